"""viable-train: meta-train as configured by gin, evaluate the best checkpoint.

    viable-train --gin_file=gin/sine/relviable.gin [--gin_param=NUM_STEPS=2000] --model_dir=D

Writes D/results.json, D/operative_config.gin, checkpoints and TensorBoard events
under D. Rerunning the same command after an interruption resumes.
"""

from __future__ import annotations

import argparse
import json
import os

from viable_tf.cli.common import UsageError, add_gin_flags, parse_gin, run_main, tool_command

METRIC_NAMES = {"mse": "MSE", "accuracy": "accuracy"}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="viable-train", description=__doc__.split("\n")[0])
    add_gin_flags(parser)
    parser.add_argument("--model_dir", required=True, help="output directory D")
    return parser


def _main() -> int:
    args = _parser().parse_args()
    if not args.gin_file:
        raise UsageError("no --gin_file given; expected e.g. --gin_file=gin/sine/relviable.gin")
    parse_gin(args.gin_file, args.gin_param)
    from viable_tf.training.experiment import train_and_evaluate

    record = train_and_evaluate(args.model_dir)
    if record is None:
        print("viable-train: this worker is done; the chief writes the results")
        return 0
    print(json.dumps(record, indent=2))
    model_dir = args.model_dir
    # The checkpoint tested and the updates trained, not NUM_STEPS: a run the patience
    # rule stops ends short of it.
    best, trained = record["checkpoint_step"], record["steps_trained"]
    print(
        f"\n{record['method']}: test {METRIC_NAMES[record['metric']]} {record['mean']:.4f} "
        f"+- {record['ci95']:.4f} "
        f"(95% CI, {record['num_tasks']} tasks, K = {record['num_support']}, "
        f"the checkpoint of meta-update {best:,} of {trained:,} trained)"
    )
    from viable_tf.evaluation.reference import reference_lines

    for line in reference_lines(record):
        print(line)
    print(f"Results: {os.path.join(model_dir, 'results.json')}\nNext:")
    for line in next_commands(model_dir, record):
        print(f"  {line}")
    return 0


def next_commands(model_dir: str, record: dict) -> list[str]:
    """What to run after a training: TensorBoard, a test at other support sizes (sine: K
    points; a classifier: K shots), the export, and serving it."""
    shots = "--num_support=4" if record["metric"] == "mse" else "--num_support=1,5"
    lines = [
        f"{tool_command('tensorboard')} --logdir {model_dir}",
        f"{tool_command('viable-eval')} --model_dir={model_dir} {shots}",
    ]
    if record["metric"] == "mse":
        lines.append(
            f"{tool_command('viable-export')} --model_dir={model_dir} --export_base=EXPORT_DIR"
        )
        lines.append(
            f"{tool_command('viable-train')} --gin_file=sine/relviable.gin "
            "--model_dir=runs/sine/relviable_full   # full length: 50,000 meta-updates"
        )
        return lines
    export = os.path.join(os.path.dirname(os.path.abspath(model_dir)), "export", "images")
    return [
        *lines,
        f"{tool_command('viable-export')} --model_dir={model_dir} --export_base={export}",
        f"{tool_command('viable-serve')} --model_name=images --model_base_path={export}",
        f"{tool_command('viable-client')} --model_name=images images --support=SUPPORT "
        "--query=QUERY   # SUPPORT/<class>/<image>: docs/images.md",
    ]


def main() -> None:
    run_main(_main, "viable-train")


if __name__ == "__main__":
    main()
