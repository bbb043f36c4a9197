"""How well do trained classification runs do on the classes they were meta-trained on?

    python -m research.split_gap RUN_DIR [RUN_DIR ...] [--episodes 1000]
        [--gin_param=...]

For each run (written by viable-train on few-shot episodes), its best checkpoint is
scored on `episodes` fixed episodes (the test seed) of the meta-train classes, the
meta-validation classes and the test classes, each beside the nearest-class-mean
reference on the same episodes. A large meta-train vs meta-validation gap says the
meta-learner fits its training classes and does not carry over (overfitting); equal
accuracies on all three say the limit is the method, not the number of classes.
Prints one Markdown table.
"""

from __future__ import annotations

import argparse
import os


def split_accuracies(model_dir: str, episodes: int, gin_params: tuple[str, ...]) -> dict:
    from viable_tf.config import load_run
    from viable_tf.evaluation.classification import (
        ClassificationEvaluator,
        nearest_mean_accuracy,
    )
    from viable_tf.evaluation.core import TEST_SEED

    run = load_run(model_dir, gin_params)
    result = {}
    for split in ("train", "validation", "test"):
        sampler = getattr(run.tasks, split)
        evaluator = ClassificationEvaluator(sampler, num_episodes=episodes, seed=TEST_SEED)
        result[split] = (evaluator(run.learner), nearest_mean_accuracy(evaluator))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model_dirs", nargs="+")
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--gin_param", action="append", default=[])
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    print(
        "| run | meta-train classes | meta-val classes | test classes "
        "| nearest mean: train / val / test |"
    )
    print("|---|---:|---:|---:|---:|")
    for model_dir in args.model_dirs:
        result = split_accuracies(model_dir, args.episodes, tuple(args.gin_param))
        cells = [f"{100 * r.mean:.1f} ± {100 * r.ci95:.1f}" for r, _ in result.values()]
        reference = " / ".join(f"{100 * m.mean:.1f}" for _, m in result.values())
        print(f"| {os.path.basename(model_dir.rstrip('/'))} | {' | '.join(cells)} | {reference} |")


if __name__ == "__main__":
    main()
