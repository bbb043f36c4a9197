"""What did the SVM dual's cancelling projection cost a trained MetaOptNet-SVM run?

    python -m lab.svm_projection RUN_DIR [--latest] [--gin_param="DATA_DIR='W/features'"]

Until the head projected its dual onto the constraints directly
(`metaoptnet.project_capped_zero_sum`), it wrote alpha_n = C e_{y_n} - tau_n and
projected tau_n onto C times the simplex: with features of norm r, alpha is about
1 / (K r^2), and C - (C - alpha) keeps only the digits of alpha above C's rounding
error, none once r reaches about 1e8 in float64. This restores the run (its best
checkpoint, or with `--latest` its latest training state) and scores its test protocol's
episodes twice on the same weights: with the former projection (kept here, as it was)
and with the head's own. Prints one Markdown table: the median support feature norm and
Gram eigenvalue, each projection's test accuracy with its 95% CI and the paired
difference.
"""

from __future__ import annotations

import argparse

import numpy as np


def cancelling_projection(values, ceiling):
    """The former projection: alpha = C e_y - P(C e_y - alpha), P onto {t >= 0, sum t =
    C} by Duchi et al.'s sort (C the row's cap)."""
    import tensorflow as tf

    total = tf.reduce_sum(ceiling, axis=-1, keepdims=True)  # C, or 0 on a padded row
    shifted = ceiling - values
    n = tf.shape(values)[-1]
    ordered = tf.sort(shifted, axis=-1, direction="DESCENDING")
    cumulative = tf.cumsum(ordered, axis=-1) - total
    index = tf.cast(tf.range(1, n + 1), values.dtype)
    count = tf.reduce_sum(tf.cast(ordered - cumulative / index > 0, tf.int32), -1, keepdims=True)
    theta = tf.gather(cumulative, tf.maximum(count - 1, 0), batch_dims=len(values.shape) - 1)
    theta = theta / tf.cast(tf.maximum(count, 1), values.dtype)
    return ceiling - tf.maximum(shifted - theta, 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--latest", action="store_true", help="the latest training state")
    parser.add_argument("--gin_param", action="append", default=[])
    args = parser.parse_args()
    import tensorflow as tf

    from viable_tf.config import load_run
    from viable_tf.evaluation.protocols import test_protocol
    from viable_tf.evaluation.statistics import mean_confidence_interval
    from viable_tf.learners import metaoptnet

    def restored():
        run = load_run(args.run_dir, tuple(args.gin_param))
        if not args.latest:
            return run, run.checkpoint_step
        latest = tf.train.latest_checkpoint(run.run_dir.checkpoints)
        tf.train.Checkpoint(learner=run.learner).read(latest).expect_partial()
        return run, run.training_state.get("step", latest)

    stable = metaoptnet.project_capped_zero_sum
    scores = {}
    for name, projection in (("former (cancelling)", cancelling_projection), ("direct", stable)):
        # A learner of its own for each: a learner's traced adaptation keeps the
        # projection it was first traced with.
        metaoptnet.project_capped_zero_sum = projection  # read by crammer_singer_dual
        try:
            run, step = restored()
            evaluator = test_protocol(run.tasks)
            scores[name] = evaluator(run.learner).per_task
        finally:
            metaoptnet.project_capped_zero_sum = stable
    batch = next(iter(evaluator.batches()))
    state = run.learner.start_state(batch.support_x, batch.support_y, batch.support_mask)
    features = run.learner.network(batch.support_x, state.context).numpy()  # [B, K, H]
    norms = np.linalg.norm(features, axis=-1)
    curvature = np.linalg.eigvalsh(features @ np.swapaxes(features, 1, 2))[:, -1]
    former, direct = scores.values()
    print(
        f"{args.run_dir} at {step} ({former.size} test episodes): median support feature "
        f"norm {np.median(norms):.3g}, median Gram eigenvalue {np.median(curvature):.3g}\n"
    )
    print("| projection | test accuracy (95% CI) |")
    print("|---|---:|")
    for name, per_task in scores.items():
        mean = mean_confidence_interval(100 * per_task)
        print(f"| {name} | {mean.mean:.1f} ± {mean.ci95:.1f} |")
    difference = mean_confidence_interval(100 * (direct - former))
    print(f"| direct - former, paired | {difference.mean:+.2f} ± {difference.ci95:.2f} |")


if __name__ == "__main__":
    main()
