"""Is a solved head's learned logit scale where its meta-loss wants it, on a trained run?

    python -m lab.svm_logit_scale RUN_DIR [RUN_DIR ...] [--episodes=200] \
        [--factors=0.5,1,2,4,8,16,32] [--gin_param="DATA_DIR='W/features'"]

Restores each run whose head is MetaOptNet's (`SVMHead` or `RidgeHead`, a learned scale
times the solved classifier's scores) at its best checkpoint, adapts to the first
`--episodes` validation episodes, and multiplies the query logits by each factor: the
factor 1 is the scale the run learned. Prints, as Markdown, per run: the learned scale,
the median spread of a query's logits (largest minus smallest), the accuracy (the same at
every factor: the argmax does not move), and the mean query cross-entropy at each factor.
A meta-loss that falls as the factor grows says that the scale is below where the
meta-gradient pushes it: Adam moves a scalar by at most about its learning rate per
meta-update, so a scale that must grow by tens takes tens of thousands of updates.
"""

from __future__ import annotations

import argparse

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_dirs", nargs="+")
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--factors", default="0.5,1,2,4,8,16,32")
    parser.add_argument("--gin_param", action="append", default=[])
    args = parser.parse_args()
    import tensorflow as tf

    from viable_tf.config import load_run
    from viable_tf.evaluation.classification import query_accuracy

    factors = [float(f) for f in args.factors.split(",")]
    print(
        "| run | checkpoint | learned scale | median logit spread | accuracy | "
        + " | ".join(f"cross-entropy x{f:g}" for f in factors)
        + " |"
    )
    print("|---|---:|---:|---:|---:|" + "---:|" * len(factors))
    for run_dir in args.run_dirs:
        run = load_run(run_dir, tuple(args.gin_param))
        learner = run.learner
        data = run.tasks.validation.dataset(
            batch_size=args.episodes, seed=0, num_episodes=args.episodes
        )
        batch = next(iter(data))
        state = learner.adapt(batch.support_x, batch.support_y, batch.support_mask)
        logits = learner.predict(state, batch.query_x)  # [B, Q, N]
        spread = tf.reduce_max(logits, -1) - tf.reduce_min(logits, -1)  # [B, Q]
        accuracy = float(tf.reduce_mean(query_accuracy(learner, state, batch)))
        losses = [
            float(
                tf.reduce_mean(
                    tf.nn.sparse_softmax_cross_entropy_with_logits(batch.query_y, f * logits)
                )
            )
            for f in factors
        ]
        print(
            f"| {run_dir.rstrip('/').split('/')[-1]} | {run.checkpoint_step:,} | "
            f"{float(learner.head.scale):.3g} | {np.median(spread):.3g} | {100 * accuracy:.1f}% | "
            + " | ".join(f"{loss:.3f}" for loss in losses)
            + " |"
        )


if __name__ == "__main__":
    main()
