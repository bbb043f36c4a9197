"""viable-omniglot: the classification pipeline end to end on real Omniglot images
(docs/method.md §6).

    viable-omniglot [--data_dir=../shared/data/omniglot] --work_dir=W [--num_steps=1500]

Stages, each skipped when its output exists (rerun the command to resume):
  1. encoder   train the image encoder on the meta-train characters (Keras fit), freeze
               it, write the features of all 242 characters in LEO's pickle format:
               W/encoder/encoder.keras, W/features/omniglot/center/<split>_embeddings.pkl
  2. train     meta-train and test each method x setting (gin/omniglot/*.gin):
               W/runs/<method>_<N>way<K>shot/ (results.json: accuracy, 95% CI)
  3. sweep     the 5-shot models tested at 1..9 shots: W/runs/*_5way5shot/eval_k<K>.json
  4. export    per setting, the model with the best *validation* accuracy among those
               trained (never chosen on test), with the frozen encoder in front, taking
               images as read (float32 [B, K, 105, 105, 1], 0..1):
               W/export/<method>_<N>way<K>shot/<v>/; W/results.json names it ("served")
Then W/results.json and W/results.md hold every number with the wall-clock times,
beside a reference without meta-learning on the same test episodes: each query takes
the label of the nearest class mean of its support features.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import time

from viable_tf.cli.common import UsageError, module_command, run_main
from viable_tf.experiments import class_means
from viable_tf.experiments.labels import LABELS  # the reports' names (omniglot.LABELS)
from viable_tf.logs import add_verbosity_flag
from viable_tf.run_dir import RunDir

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIGS = "omniglot"  # the shipped configs' folder (viable_tf.config)
DEFAULT_DATA_DIR = os.path.join(REPO, "..", "shared", "data", "omniglot")
METHODS = (
    "cavia",
    "simviable",
    "relviable",
    "cavia_proto",
    "simviable_proto",
    "relviable_proto",
    "cavia_cosine",
    "simviable_cosine",
)
SETTINGS = ("5way1shot", "5way5shot", "20way1shot")
SWEEP_SHOTS = tuple(range(1, 10))


def read_json(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def prepare_features(data_dir: str, work_dir: str, *, epochs: int, seed: int) -> dict:
    """Stage 1: the encoder and the features, written once."""
    from viable_tf.datasets import omniglot
    from viable_tf.datasets.leo_tfds import embeddings_path
    from viable_tf.networks import omniglot_encoder

    features_dir = os.path.join(work_dir, "features")
    encoder_dir = os.path.join(work_dir, "encoder")
    info_path = os.path.join(encoder_dir, "encoder.json")
    if os.path.exists(info_path):
        return read_json(info_path)
    start = time.perf_counter()
    splits = omniglot.read_omniglot(data_dir)
    counts = {s: len(set(split.classes)) for s, split in splits.items()}
    print(f"Omniglot characters per split: {counts} (meta-train only for the encoder)")
    encoder, history = omniglot_encoder.train_encoder(splits["train"], epochs=epochs, seed=seed)
    os.makedirs(encoder_dir, exist_ok=True)
    encoder.save(os.path.join(encoder_dir, "encoder.keras"))
    for name, split in splits.items():
        path = embeddings_path(features_dir, "omniglot", "center", name)
        omniglot.write_leo_pickle(path, omniglot_encoder.encode(encoder, split.images), split)
    info = {
        "characters": counts,
        "images": {s: len(split.classes) for s, split in splits.items()},
        "epochs": epochs,
        "final_train_accuracy": history["accuracy"][-1],
        "seconds": round(time.perf_counter() - start, 1),
    }
    from viable_tf.training.experiment import write_json

    write_json(info, info_path)
    return info


def _subprocess(command: list[str], log_path: str) -> None:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    with open(log_path, "a") as log:
        result = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    if result.returncode:
        raise RuntimeError(f"{' '.join(command[:3])} failed; see {log_path}")


#: The gin bindings naming the runs' data (`data` below; None: stage 1's features).
Data = tuple[str, ...] | None


def features(work_dir: str) -> tuple[str, ...]:
    """The gin binding that points the runs' configs at stage 1's features."""
    return (f"DATA_DIR={os.path.join(work_dir, 'features')!r}",)


def train(work_dir: str, run: str, params: list[str], configs=CONFIGS, data: Data = None) -> None:
    """Stage 2 for one run (skipped if done); its time is in its results.json."""
    model_dir = os.path.join(work_dir, "runs", run)
    if os.path.exists(RunDir(model_dir).results):
        return
    os.makedirs(model_dir, exist_ok=True)
    command = [
        *module_command("viable_tf.cli.train"),
        f"--gin_file={configs}/{run}.gin",
        *(f"--gin_param={p}" for p in data or features(work_dir)),
        *(f"--gin_param={p}" for p in params),
        "--gin_param=Trainer.show_progress=False",
        f"--model_dir={model_dir}",
    ]
    _subprocess(command, RunDir(model_dir).log)


def sweep(work_dir: str, run: str, shots: tuple[int, ...], data: Data = None) -> None:
    """Stage 3 for one 5-shot run: test at every K in `shots` (skipped where done)."""
    model_dir = os.path.join(work_dir, "runs", run)
    run_dir = RunDir(model_dir)
    missing = [k for k in shots if not os.path.exists(run_dir.evaluation(k))]
    if missing:
        command = [
            *module_command("viable_tf.cli.evaluate"),
            f"--model_dir={model_dir}",
            f"--num_support={','.join(map(str, missing))}",
            *(f"--gin_param={p}" for p in data or features(work_dir)),
        ]
        _subprocess(command, RunDir(model_dir).log)


@functools.cache
def frozen_encoder(work_dir: str):
    """The encoder of stage 1, read once for all exports."""
    import keras

    from viable_tf.networks.omniglot_encoder import OmniglotPreprocessing

    return keras.saving.load_model(
        os.path.join(work_dir, "encoder", "encoder.keras"),
        custom_objects={"OmniglotPreprocessing": OmniglotPreprocessing},
    )


def export(
    work_dir: str,
    run: str,
    *,
    featurizer=None,
    normalize: bool = True,
    examples: str | None = None,
    data: Data = None,
) -> str:
    """Stage 4 for one run: its best checkpoint behind its image preprocessing (the frozen
    encoder of stage 1 unless `featurizer` is given, e.g. an end-to-end model's pixels), as
    a served version of W/export/<run>/; `normalize` as the run's inputs were (the
    LEO-format features are l2-normalised, an image folder's pixels are not); `examples`,
    a folder of example drawings (`datasets.omniglot.write_examples`), ships as its
    assets.extra/examples/."""
    from viable_tf.config import load_run
    from viable_tf.datasets import omniglot
    from viable_tf.export import export_saved_model

    base = os.path.join(work_dir, "export", run)
    if os.path.isdir(base) and any(name.isdigit() for name in os.listdir(base)):
        return base
    model_dir = os.path.join(work_dir, "runs", run)
    loaded = load_run(model_dir, data or features(work_dir))
    with open(loaded.run_dir.operative_config) as f:
        config = f.read()
    metadata = {
        "evaluation": loaded.run_dir.read_results(),
        "checkpoint_step": loaded.checkpoint_step,
        "inputs": "drawings as read from the PNG: float32 [B, K, 105, 105, 1], 0..1, "
        "white = 1; or the PNG files themselves (serving_png)",
    }
    if examples:
        metadata["examples"] = "examples/index.json"
    return export_saved_model(
        loaded.learner,
        base,
        operative_config=config,
        metadata=metadata,
        model_name=run,
        featurizer=frozen_encoder(work_dir) if featurizer is None else featurizer,
        normalize=normalize,
        input_shape=omniglot.IMAGE_SHAPE,
        warmup_inputs=functools.partial(omniglot.warmup_images, num_ways=loaded.tasks.num_ways),
        extra_assets={"examples": examples} if examples else None,
    )


def best_by_validation(runs: dict[str, dict], setting: str) -> str:
    """The run of `setting` with the best meta-validation accuracy (ties: the first)."""
    candidates = [name for name in runs if name.endswith(f"_{setting}")]
    return max(candidates, key=lambda name: runs[name]["best_validation_accuracy"])


def _cell(record: dict) -> str:
    return f"{100 * record['mean']:.1f} ± {100 * record['ci95']:.1f}"


def report(summary: dict) -> str:
    """Markdown tables: accuracy by method x setting, and the 1..9-shot sweep."""
    settings, methods = summary["settings"], summary["methods"]
    runs = summary["runs"]
    lines = ["### Omniglot test accuracy (%), mean ± 95% CI", ""]
    lines.append("| method | " + " | ".join(settings) + " |")
    lines.append("|---|" + "---:|" * len(settings))
    for method in methods:  # a cell without a finished run stays empty
        cells = [_cell(runs[f"{method}_{s}"]) if f"{method}_{s}" in runs else "" for s in settings]
        lines.append(f"| {LABELS[method]} | " + " | ".join(cells) + " |")
    if summary.get("reference"):
        cells = [_cell(summary["reference"][s]) for s in settings]
        lines.append("| nearest class mean (reference) | " + " | ".join(cells) + " |")
    sweeps = {m: runs.get(f"{m}_5way5shot", {}).get("by_shots") for m in methods}
    if any(sweeps.values()):
        shots = summary["sweep_shots"]
        lines += ["", "### Trained 5-way 5-shot, tested at K shots: accuracy (%)", ""]
        lines.append("| method | " + " | ".join(f"K = {k}" for k in shots) + " |")
        lines.append("|---|" + "---:|" * len(shots))
        for method, by_shots in sweeps.items():
            if by_shots:
                cells = " | ".join(_cell(by_shots[str(k)]) for k in shots)
                lines.append(f"| {LABELS[method]} | {cells} |")
    if summary.get("served"):
        lines += ["", "### Exported for serving (best meta-validation accuracy per setting)", ""]
        for setting, run in summary["served"].items():
            accuracy = runs[run]["best_validation_accuracy"]
            lines.append(f"- {setting}: {run} (validation {100 * accuracy:.1f}%)")
    lines += ["", "### Runs", ""]
    lines.append("| run | meta-updates | best at | wall-clock (train + test) |")
    lines.append("|---|---:|---:|---:|")
    for name, record in runs.items():
        lines.append(
            f"| {name} | {record['steps_trained']} | {record['checkpoint_step']} "
            f"| {record['train_and_eval_seconds'] / 60:.1f} min |"
        )
    return "\n".join(lines) + "\n"


def run_params(args: argparse.Namespace) -> list[str]:
    """The gin bindings every run of a driver gets from its flags."""
    return [
        f"NUM_STEPS={args.num_steps}",
        f"META_BATCH_SIZE={args.meta_batch_size}",
        f"EvaluationSpec.eval_every={args.eval_every}",
        f"classification_validation_evaluator.num_episodes={args.validation_episodes}",
        f"classification_test_evaluator.num_episodes={args.test_episodes}",
        *args.gin_param,
    ]


def parse_names(flag: str, text: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    names = tuple(n for n in text.split(",") if n)
    unknown = [n for n in names if n not in allowed]
    if unknown or not names:
        raise UsageError(f"{flag} must list some of {','.join(allowed)}; got {text!r}")
    return names


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="viable-omniglot", description=__doc__.split("\n")[0])
    add_verbosity_flag(parser)
    parser.add_argument("--data_dir", default=None, help="folder with the Omniglot zips")
    parser.add_argument("--work_dir", required=True, help="where everything is written (W)")
    parser.add_argument("--methods", default=",".join(METHODS), help="of " + ",".join(LABELS))
    parser.add_argument("--settings", default=",".join(SETTINGS), help="of " + ",".join(SETTINGS))
    parser.add_argument("--num_steps", type=int, default=1500, help="meta-updates per run")
    parser.add_argument("--meta_batch_size", type=int, default=4, help="episodes per update")
    parser.add_argument("--eval_every", type=int, default=250, help="validate every N updates")
    parser.add_argument("--validation_episodes", type=int, default=200, help="per validation")
    parser.add_argument("--encoder_epochs", type=int, default=30, help="encoder training epochs")
    parser.add_argument("--test_episodes", type=int, default=1000, help="test episodes per K")
    parser.add_argument("--no_sweep", action="store_true", help="skip testing at 1..9 shots")
    parser.add_argument("--no_export", action="store_true", help="skip the SavedModel exports")
    parser.add_argument("--gin_param", action="append", default=[], help="extra binding, all runs")
    parser.add_argument(
        "--reference_only",
        action="store_true",
        help="after stage 1, train nothing: the nearest class mean of the features on the test "
        "episodes of --settings, in W/reference.json",
    )
    return parser


def _main() -> int:
    args = _parser().parse_args()
    data_dir = args.data_dir or DEFAULT_DATA_DIR
    if args.data_dir is None and not os.path.isdir(data_dir):
        raise UsageError(f"no --data_dir given and the default {data_dir} does not exist")
    for flag in (
        "num_steps",
        "meta_batch_size",
        "eval_every",
        "validation_episodes",
        "encoder_epochs",
        "test_episodes",
    ):
        if getattr(args, flag) < 1:
            raise UsageError(f"--{flag} must be >= 1, got {getattr(args, flag)}")
    methods = parse_names("--methods", args.methods, tuple(LABELS))
    settings = parse_names("--settings", args.settings, SETTINGS)
    start = time.perf_counter()
    encoder = prepare_features(data_dir, args.work_dir, epochs=args.encoder_epochs, seed=0)
    print(f"encoder: {encoder['final_train_accuracy']:.3f} train accuracy, {encoder['seconds']} s")
    if args.reference_only:
        class_means.write_reference(
            args.work_dir,
            settings,
            args.test_episodes,
            configs=CONFIGS,
            data=features(args.work_dir),
        )
        return 0
    params = run_params(args)
    from tqdm import tqdm

    runs = [f"{m}_{s}" for s in settings for m in methods]
    summary: dict = {"methods": list(methods), "settings": list(settings), "runs": {}}
    for run in tqdm(runs, unit="run", desc="omniglot"):
        train(args.work_dir, run, params)
        model_dir = os.path.join(args.work_dir, "runs", run)
        record = RunDir(model_dir).read_results()
        if run.endswith("_5way5shot") and not args.no_sweep:
            sweep(args.work_dir, run, SWEEP_SHOTS)
            record["by_shots"] = {
                str(k): read_json(RunDir(model_dir).evaluation(k)) for k in SWEEP_SHOTS
            }
        summary["runs"][run] = record
    if not args.no_export:
        summary["served"] = {}
        for setting in settings:
            run = best_by_validation(summary["runs"], setting)
            summary["runs"][run]["export"] = export(args.work_dir, run)
            summary["served"][setting] = run
            accuracy = summary["runs"][run]["best_validation_accuracy"]
            print(
                f"{setting}: exported {run} (best validation accuracy {100 * accuracy:.1f}% "
                f"of {len(methods)} methods) to {summary['runs'][run]['export']}"
            )
    data = features(args.work_dir)
    summary["reference"] = {
        s: class_means.reference(s, args.test_episodes, configs=CONFIGS, data=data)
        for s in settings
    }
    summary.update(
        encoder=encoder,
        sweep_shots=list(SWEEP_SHOTS),
        wall_clock_seconds=round(time.perf_counter() - start, 1),
        command=" ".join(["viable-omniglot", *sys.argv[1:]]),
    )
    write_summary(summary, args.work_dir, report(summary))
    return 0


def write_summary(summary: dict, work_dir: str, text: str) -> None:
    """W/results.json and W/results.md (`text`), and the tables on the console."""
    from viable_tf.training.experiment import write_json

    write_json(summary, os.path.join(work_dir, "results.json"))
    with open(os.path.join(work_dir, "results.md"), "w") as f:
        f.write(text)
    print(text)
    print(f"wall-clock: {summary['wall_clock_seconds'] / 60:.1f} min; results in {work_dir}")


def main() -> None:
    run_main(_main, "viable-omniglot")


if __name__ == "__main__":
    main()
