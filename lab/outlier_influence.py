"""How far does one outlier move a trained sine learner's adapted context, compared with
one clean support point? The question behind the outlier tables of docs/RESULTS.md
(docs/method.md §8): does a learned inner loss discount the corrupted points, and how much.

    python -m lab.outlier_influence RUN_DIR [RUN_DIR ...] [--outliers 2] [--tasks 500]

For each run (its best checkpoint), on sine tasks drawn from the test seed with
`outliers` of the K support points corrupted: the context adapted on the whole support
set, phi, and for each real point j the context adapted without it (its mask bit off),
phi_-j. A point's influence is |phi - phi_-j|. Reported per run: the mean influence of
an outlier over that of a clean point (1: not told apart; below 1: discounted), the
share of all influence that falls on the outliers (m / K if not told apart), and the
query MSE. Any learner that adapts a context (CAVIA, its robust inner losses, VIABLE).
Prints one Markdown table.
"""

from __future__ import annotations

import argparse
import os

import numpy as np


def influences(model_dir: str, outliers: int, num_tasks: int) -> dict:
    """{'outlier', 'clean': influence of each outlier / clean point, 'share': the
    outliers' share of each task's influence [T], 'mse': query MSE [T]}."""
    import tensorflow as tf

    from viable_tf.config import load_run
    from viable_tf.evaluation.core import TEST_SEED
    from viable_tf.tasks import seed_for, sine_curve

    run = load_run(model_dir, (f"SineTasks.outliers={outliers}",))
    learner, tasks = run.learner, run.tasks
    batch, params = tasks.sample_tasks(seed_for(TEST_SEED, 0), num_tasks)
    clean_y = sine_curve(params, batch.support_x)
    mask = batch.support_mask.numpy()
    is_outlier = (batch.support_y.numpy() != clean_y.numpy())[..., 0] & mask  # [T, K]
    support = (batch.support_x, batch.support_y, batch.support_mask)
    adapted = learner.adapt(*support)
    mse = tf.reduce_mean(
        learner.task_loss(learner.predict(adapted, batch.query_x), batch.query_y), axis=1
    ).numpy()
    points = mask.shape[1]
    influence = np.zeros(mask.shape)
    for j in range(points):
        without = batch.support_mask & ~tf.one_hot(j, points, on_value=True, off_value=False)
        phi_j = learner.adapt(batch.support_x, batch.support_y, without).context
        influence[:, j] = tf.norm(adapted.context - phi_j, axis=1).numpy()
    influence *= mask
    has = is_outlier.any(axis=1)  # tasks with an outlier among their real points
    total = np.maximum(influence.sum(axis=1)[has], 1e-12)
    share = (influence * is_outlier).sum(axis=1)[has] / total
    return {
        "outlier": influence[is_outlier],
        "clean": influence[mask & ~is_outlier],
        "share": share,
        "mse": mse,
        "expected_share": is_outlier.sum() / mask.sum(),
    }


def _ci(values: np.ndarray) -> str:
    from viable_tf.evaluation.statistics import mean_confidence_interval

    mean, half, _ = mean_confidence_interval(values)
    return f"{mean:.3f} ± {half:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_dirs", nargs="+")
    parser.add_argument("--outliers", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=500)
    args = parser.parse_args()
    if args.outliers < 1:
        parser.error(f"--outliers must be >= 1, got {args.outliers}")
    print(
        f"| run ({args.outliers} outliers per support set, {args.tasks} test tasks) | "
        "outlier / clean influence | outliers' share of influence | query MSE |"
    )
    print("|---|---:|---:|---:|")
    for model_dir in args.run_dirs:
        found = influences(model_dir, args.outliers, args.tasks)
        ratio = found["outlier"].mean() / found["clean"].mean()
        share = f"{_ci(found['share'])} (even: {found['expected_share']:.2f})"
        name = os.path.basename(os.path.normpath(model_dir))
        print(f"| {name} | {ratio:.2f} | {share} | {_ci(found['mse'])} |", flush=True)


if __name__ == "__main__":
    main()
