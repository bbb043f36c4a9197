"""How much of a trained classifier's accuracy hangs on the size of its inner step? The
question behind the learned losses' unsteady validation curves end to end
(docs/omniglot/end_to_end.md): if the learned loss's scale drifts as it is meta-learned,
two steps of a fixed rate land phi at a different distance at every validation.

    python -m research.step_scale RUN_DIR [RUN_DIR ...] [--scales 0.25,0.5,1,2,4] \
        [--episodes 500] [--checkpoints all|best] [--gin_param=DATA_DIR='W/features']

For each run and each checkpoint it holds (the best one, and the training ones kept in
D/checkpoints/ unless --checkpoints=best), on the fixed validation episodes the trainer
validates on (its seed; the first --episodes of them): the adapted query accuracy with the
inner learning rate multiplied by each scale, and, at the trained rate, the size of the first
inner step |alpha d Lhat / d phi| and the inner loss at phi_0 (means over episodes). Prints
one Markdown table. Scale 1 on 500 episodes repeats the trainer's own validation.
"""

from __future__ import annotations

import argparse
import os

import numpy as np


def checkpoint_paths(model_dir: str, which: str) -> list[str]:
    """The best checkpoint, then (which='all') the training ones, oldest first."""
    import tensorflow as tf

    from viable_tf.run_dir import RunDir

    run = RunDir(model_dir)
    paths = [p for p in [tf.train.latest_checkpoint(run.best)] if p]
    if which == "all":
        state = tf.train.get_checkpoint_state(run.checkpoints)
        if state is not None:
            paths += list(state.all_model_checkpoint_paths)
    return paths


def step_scale(
    model_dir: str,
    scales: tuple[float, ...],
    episodes: int,
    which: str,
    gin_params: tuple[str, ...],
) -> list[dict]:
    """One row per checkpoint: {'checkpoint', 'step', 'accuracy': {scale: mean},
    'step_norm', 'inner_loss'}."""
    import tensorflow as tf

    from viable_tf.config import load_run
    from viable_tf.evaluation.classification import ClassificationEvaluator, query_accuracy
    from viable_tf.evaluation.core import VALIDATION_SEED

    run = load_run(model_dir, gin_params)
    learner = run.learner
    trained_lr = learner.inner_lr
    evaluator = ClassificationEvaluator(
        run.tasks.validation, num_episodes=episodes, seed=VALIDATION_SEED
    )
    batches = list(evaluator.batches())
    rows = []
    for path in checkpoint_paths(model_dir, which):
        tf.train.Checkpoint(learner=learner).read(path).expect_partial()
        accuracy, norms, losses = {}, [], []
        for scale in scales:
            learner.inner_lr = trained_lr * scale
            per_episode = []
            for batch in batches:
                support = (batch.support_x, batch.support_y, batch.support_mask)
                per_episode.append(query_accuracy(learner, learner.adapt(*support), batch).numpy())
            accuracy[scale] = float(np.mean(np.concatenate(per_episode)))
        learner.inner_lr = trained_lr
        for batch in batches:
            support = (batch.support_x, batch.support_y, batch.support_mask)
            start = learner.start_state(*support)
            with tf.GradientTape() as tape:
                tape.watch(start.context)
                inner = learner.inner_loss(start, *support)
                total = tf.reduce_sum(inner)
            gradient = tape.gradient(total, start.context)
            norms.append((trained_lr * tf.norm(gradient, axis=1)).numpy())
            losses.append(inner.numpy())
        rows.append(
            {
                "checkpoint": path,
                "step": int(path.rsplit("-", 1)[-1]),
                "accuracy": accuracy,
                "step_norm": float(np.mean(np.concatenate(norms))),
                "inner_loss": float(np.mean(np.concatenate(losses))),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model_dirs", nargs="+")
    parser.add_argument("--scales", default="0.25,0.5,1,2,4")
    parser.add_argument("--episodes", type=int, default=500)
    parser.add_argument("--checkpoints", choices=("all", "best"), default="all")
    parser.add_argument("--gin_param", action="append", default=[])
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    scales = tuple(float(s) for s in args.scales.split(","))
    if not scales or min(scales) <= 0:
        parser.error(f"--scales must be positive numbers, got {args.scales!r}")
    header = " | ".join(f"x{s:g}" for s in scales)
    print(f"| run | checkpoint | {header} | first step's size | inner loss at phi_0 |")
    print("|---|---:|" + "---:|" * len(scales) + "---:|---:|")
    for model_dir in args.model_dirs:
        name = os.path.basename(model_dir.rstrip("/"))
        for row in step_scale(
            model_dir, scales, args.episodes, args.checkpoints, tuple(args.gin_param)
        ):
            best = max(row["accuracy"].values())
            cells = " | ".join(
                (f"**{100 * a:.1f}**" if a == best else f"{100 * a:.1f}")
                for a in row["accuracy"].values()
            )
            print(
                f"| {name} | {row['step']} | {cells} | {row['step_norm']:.3f} "
                f"| {row['inner_loss']:.3f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
