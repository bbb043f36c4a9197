"""Omniglot end to end (issue 26): a conv net whose context enters through FiLM, trained
by CAVIA, simVIABLE and MAML directly on the 28 x 28 images, on the same alphabet split
and episodes as the frozen-feature pipeline (viable-omniglot).

    python -m viable_tf.experiments.omniglot_conv --data_dir=../shared/data/omniglot \\
        --work_dir=W [--num_steps=5000] [--methods=cavia,simviable,maml]

Stages, each skipped when its output exists:
  1. pixels   every image as 784 numbers (strokes = 1 at 28 x 28, as the encoder sees
              them) in LEO's pickle format: W/features/omniglot/pixels/<split>_embeddings.pkl
  2. train    each method x setting from gin/omniglot_conv/ (Trainer.jit_compile=False):
              W/runs/<method>_<N>way<K>shot/results.json
Then W/results.json and W/results.md, with the time per meta-update of each run and the
nearest class mean of the (l2-normalised) pixels on the same test episodes.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from viable_tf.cli.common import UsageError, run_main
from viable_tf.experiments import omniglot
from viable_tf.logs import add_verbosity_flag
from viable_tf.run_dir import RunDir

CONFIGS = "omniglot_conv"
METHODS = ("cavia", "simviable", "maml")
SETTINGS = ("5way1shot", "5way5shot")


def prepare_pixels(data_dir: str, work_dir: str) -> dict:
    """Stage 1: the images as features, written once."""
    import numpy as np

    from viable_tf.datasets import omniglot as data
    from viable_tf.datasets.leo_tfds import embeddings_path
    from viable_tf.training.experiment import write_json

    info_path = os.path.join(work_dir, "features", "pixels.json")
    if os.path.exists(info_path):
        return omniglot.read_json(info_path)
    start = time.perf_counter()
    splits = data.read_omniglot(data_dir)
    strokes = data.OmniglotPreprocessing()
    for name, split in splits.items():
        pixels = np.concatenate(
            [
                np.asarray(strokes(split.images[i : i + 512])).reshape(-1, 28 * 28)
                for i in range(0, len(split.images), 512)
            ]
        ).astype(np.float32)
        path = embeddings_path(os.path.join(work_dir, "features"), "omniglot", "pixels", name)
        data.write_leo_pickle(path, pixels, split)
    info = {
        "images": {s: len(split.classes) for s, split in splits.items()},
        "characters": {s: len(set(split.classes)) for s, split in splits.items()},
        "seconds": round(time.perf_counter() - start, 1),
    }
    write_json(info, info_path)
    return info


def report(summary: dict) -> str:
    text = omniglot.report(summary).replace(
        "### Omniglot test accuracy", "### Omniglot end to end (conv + FiLM), test accuracy"
    )
    lines = ["", "### Time per meta-update (train + validation + test, one run's wall-clock)", ""]
    lines.append("| run | meta-updates | seconds per meta-update |")
    lines.append("|---|---:|---:|")
    for name, record in summary["runs"].items():
        per_update = record["train_and_eval_seconds"] / record["steps_trained"]
        lines.append(f"| {name} | {record['steps_trained']} | {per_update:.3f} |")
    return text + "\n".join(lines) + "\n"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_verbosity_flag(parser)
    parser.add_argument("--data_dir", default=omniglot.DEFAULT_DATA_DIR)
    parser.add_argument("--work_dir", required=True)
    parser.add_argument("--methods", default=",".join(METHODS), help="of " + ",".join(METHODS))
    parser.add_argument("--settings", default=",".join(SETTINGS), help="of " + ",".join(SETTINGS))
    parser.add_argument("--num_steps", type=int, default=5000)
    parser.add_argument("--meta_batch_size", type=int, default=4)
    parser.add_argument("--eval_every", type=int, default=500)
    parser.add_argument("--validation_episodes", type=int, default=100)
    parser.add_argument("--test_episodes", type=int, default=1000)
    parser.add_argument("--gin_param", action="append", default=[])
    return parser


def _main() -> int:
    args = _parser().parse_args()
    for flag in ("num_steps", "meta_batch_size", "eval_every", "validation_episodes"):
        if getattr(args, flag) < 1:
            raise UsageError(f"--{flag} must be >= 1, got {getattr(args, flag)}")
    methods = omniglot.parse_names("--methods", args.methods, METHODS)
    settings = omniglot.parse_names("--settings", args.settings, SETTINGS)
    start = time.perf_counter()
    pixels = prepare_pixels(args.data_dir, args.work_dir)
    params = omniglot.run_params(args)
    summary: dict = {"methods": list(methods), "settings": list(settings), "runs": {}}
    for setting in settings:
        for method in methods:
            run = f"{method}_{setting}"
            omniglot.train(args.work_dir, run, params, configs=CONFIGS)
            model_dir = os.path.join(args.work_dir, "runs", run)
            summary["runs"][run] = RunDir(model_dir).read_results()
            print(f"{run}: {100 * summary['runs'][run]['mean']:.1f}%", flush=True)
    summary["reference"] = {
        s: omniglot.reference(args.work_dir, s, args.test_episodes, configs=CONFIGS)
        for s in settings
    }
    summary.update(
        pixels=pixels,
        wall_clock_seconds=round(time.perf_counter() - start, 1),
        command=" ".join(["python -m viable_tf.experiments.omniglot_conv", *sys.argv[1:]]),
    )
    omniglot.write_summary(summary, args.work_dir, report(summary))
    return 0


def main() -> None:
    run_main(_main, "omniglot_conv")


if __name__ == "__main__":
    main()
