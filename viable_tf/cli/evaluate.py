"""viable-eval: re-evaluate a trained run's best checkpoint on the fixed test tasks.

    viable-eval --model_dir=D [--num_support=K] [--gin_param=...]

Prints the results JSON and writes it to D/eval_k<K>.json.
"""

from __future__ import annotations

import argparse
import json
import os

from viable_tf.cli.common import UsageError, parse_gin, run_main


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="viable-eval", description=__doc__.split("\n")[0])
    parser.add_argument("--model_dir", required=True, help="a directory written by viable-train")
    parser.add_argument("--num_support", type=int, default=None, help="K to adapt on")
    parser.add_argument("--gin_param", action="append", default=[], help="gin binding")
    return parser


def _main() -> int:
    args = _parser().parse_args()
    config = os.path.join(args.model_dir, "operative_config.gin")
    if not os.path.isfile(config):
        raise UsageError(
            f"{args.model_dir} is not a trained run: expected {config}, written by viable-train"
        )
    if args.num_support is not None and args.num_support < 0:
        raise UsageError(f"--num_support must be >= 0, got {args.num_support}")
    parse_gin([config], args.gin_param)
    from viable_tf.training.experiment import evaluate_run, write_json
    from viable_tf.training.trainer import Trainer

    trainer = Trainer(model_dir=args.model_dir, show_progress=False)
    if not (trainer.best_manager.latest_checkpoint or trainer.manager.latest_checkpoint):
        raise UsageError(
            f"no checkpoint in {args.model_dir}: expected {args.model_dir}/best/ or "
            f"{args.model_dir}/checkpoints/, written by viable-train"
        )
    record = evaluate_run(trainer, num_support=args.num_support)
    path = os.path.join(args.model_dir, f"eval_k{record['num_support']}.json")
    write_json(record, path)
    print(json.dumps(record, indent=2))
    return 0


def main() -> None:
    run_main(_main, "viable-eval")


if __name__ == "__main__":
    main()
