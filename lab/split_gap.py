"""How well do trained classification runs do on the classes they were meta-trained on?

    python -m lab.split_gap RUN_DIR [RUN_DIR ...] [--episodes 1000]
        [--checkpoints best|all] [--splits train,validation,test] [--gin_param=...]

For each run (written by viable-train on few-shot episodes), its best checkpoint is
scored on `episodes` fixed episodes (the test seed) of the meta-train classes, the
meta-validation classes and the test classes, each beside the nearest-class-mean
reference on the same episodes. A large meta-train vs meta-validation gap says the
meta-learner fits its training classes and does not carry over (overfitting); equal
accuracies on all three say the limit is the method, not the number of classes.
Prints one Markdown table. With `--checkpoints all`, every checkpoint each run keeps (its
best and the training ones in D/checkpoints/) gets a row: whether a run's validation
swings from one checkpoint to the next come with the same swings on its meta-training
classes (its meta-training is unsteady) or without them (what it learned carries over
unsteadily).
"""

from __future__ import annotations

import argparse
import os

SPLITS = ("train", "validation", "test")


def split_accuracies(
    model_dir: str,
    episodes: int,
    gin_params: tuple[str, ...],
    *,
    checkpoint: str | None = None,
    splits: tuple[str, ...] = SPLITS,
) -> dict:
    """{split: (the learner's accuracy, the nearest class mean's)} on the same episodes,
    for the run's best checkpoint or the one named by `checkpoint` (a path)."""
    import tensorflow as tf

    from viable_tf.config import load_run
    from viable_tf.evaluation.classification import (
        ClassificationEvaluator,
        nearest_mean_accuracy,
    )
    from viable_tf.evaluation.core import TEST_SEED

    run = load_run(model_dir, gin_params)
    if checkpoint is not None:
        tf.train.Checkpoint(learner=run.learner).read(checkpoint).expect_partial()
    result = {}
    for split in splits:
        sampler = getattr(run.tasks, split)
        evaluator = ClassificationEvaluator(sampler, num_episodes=episodes, seed=TEST_SEED)
        result[split] = (evaluator(run.learner), nearest_mean_accuracy(evaluator))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model_dirs", nargs="+")
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--checkpoints", choices=("best", "all"), default="best")
    parser.add_argument("--splits", default=",".join(SPLITS))
    parser.add_argument("--gin_param", action="append", default=[])
    args = parser.parse_args()
    splits = tuple(args.splits.split(","))
    if not splits or any(split not in SPLITS for split in splits):
        parser.error(f"--splits must name some of {', '.join(SPLITS)}, got {args.splits!r}")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from lab.loss_network_anatomy import _checkpoints

    names = {"train": "meta-train classes", "validation": "meta-val classes"}
    names["test"] = "test classes"
    print(
        "| run | checkpoint | "
        + " | ".join(names[split] for split in splits)
        + f" | nearest mean: {' / '.join(splits)} |"
    )
    print("|---|---:|" + "---:|" * len(splits) + "---:|")
    for model_dir in args.model_dirs:
        paths = _checkpoints(model_dir, "all") if args.checkpoints == "all" else [None]
        for path in paths:
            result = split_accuracies(
                model_dir, args.episodes, tuple(args.gin_param), checkpoint=path, splits=splits
            )
            cells = [f"{100 * r.mean:.1f} ± {100 * r.ci95:.1f}" for r, _ in result.values()]
            reference = " / ".join(f"{100 * m.mean:.1f}" for _, m in result.values())
            step = "best" if path is None else path.rsplit("-", 1)[-1]
            name = os.path.basename(model_dir.rstrip("/"))
            print(f"| {name} | {step} | {' | '.join(cells)} | {reference} |")


if __name__ == "__main__":
    main()
