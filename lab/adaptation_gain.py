"""What do a trained classifier's inner steps add, and how does its learned step relate
to the task's? The question behind relVIABLE's end-to-end shortfall against CAVIA
(docs/lab/omniglot/end_to_end.md).

    python -m lab.adaptation_gain RUN_DIR [RUN_DIR ...] [--episodes 500] \
        [--gin_param=DATA_DIR='W/features']

For each run (its best checkpoint), on fixed test episodes (the test seed, so the
episodes of the runs' own test): the query accuracy of the unadapted learner (the state
the inner loop starts from) and of the adapted one, their difference per episode (mean
± 95% CI), and the cosine between the first inner step's gradient of the loss the learner
descends and of the true support loss, d/d phi (1 for CAVIA; how much a learned loss's
first step is the task's). Prints one Markdown table.
"""

from __future__ import annotations

import argparse
import os

import numpy as np


def adaptation_gain(model_dir: str, episodes: int, gin_params: tuple[str, ...]) -> dict:
    """{'before', 'after', 'gain': per-episode accuracies [E], 'cosine': [E] or None}."""
    from lab import inner_path
    from viable_tf.config import load_run
    from viable_tf.evaluation.classification import ClassificationEvaluator, query_accuracy
    from viable_tf.evaluation.core import TEST_SEED

    run = load_run(model_dir, gin_params)
    learner = run.learner
    evaluator = ClassificationEvaluator(run.tasks.test, num_episodes=episodes, seed=TEST_SEED)
    before, after, cosine = [], [], []
    for batch in evaluator.batches():
        support = (batch.support_x, batch.support_y, batch.support_mask)
        start = learner.start_state(*support)
        before.append(query_accuracy(learner, start, batch).numpy())
        adapted = learner.adapt(*support, query_x=batch.query_x)
        after.append(query_accuracy(learner, adapted, batch).numpy())
        if start.context is not None:
            cosine.append(inner_path.at(learner, batch, start).cosine.numpy())
    before, after = np.concatenate(before), np.concatenate(after)
    return {
        "before": before,
        "after": after,
        "gain": after - before,
        "cosine": np.concatenate(cosine) if cosine else None,
    }


def _cell(values: np.ndarray, scale: float = 100.0, digits: int = 1) -> str:
    """mean ± the 95% CI's half-width, as the evaluations report them."""
    from viable_tf.evaluation.statistics import mean_confidence_interval

    mean, ci, _ = mean_confidence_interval(values)
    return f"{scale * mean:.{digits}f} ± {scale * ci:.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model_dirs", nargs="+")
    parser.add_argument("--episodes", type=int, default=500)
    parser.add_argument("--gin_param", action="append", default=[])
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    print(
        "| run | accuracy unadapted (%) | adapted (%) | gain (points) "
        "| cos(inner step, task step) at phi_0 |"
    )
    print("|---|---:|---:|---:|---:|")
    for model_dir in args.model_dirs:
        r = adaptation_gain(model_dir, args.episodes, tuple(args.gin_param))
        cos = "" if r["cosine"] is None else _cell(r["cosine"], scale=1.0, digits=2)
        name = os.path.basename(model_dir.rstrip("/"))
        print(
            f"| {name} | {_cell(r['before'])} | {_cell(r['after'])} | {_cell(r['gain'])} | {cos} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
