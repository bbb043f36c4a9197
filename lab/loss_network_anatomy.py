"""What does a trained learned loss do along its inner loop, and how much of its loss
network is alive? The questions behind relVIABLE's shortfall end to end
(docs/lab/omniglot/end_to_end.md, "Why relVIABLE falls behind").

    python -m lab.loss_network_anatomy RUN_DIR [--checkpoints all|best] \
        [--initialisation] [--episodes 100] [--extra_steps 2] \
        [--gin_param=DATA_DIR='W/features']

For each checkpoint the run holds (the best one, and the training ones kept in
D/checkpoints/ unless --checkpoints=best), and with --initialisation for the initial
weights its configuration draws under its seed (as meta-update 0), on the first
--episodes of the fixed validation episodes the trainer validates on, two tables:

- the inner loop, step by step from phi_0 (the trained number of steps, then
  --extra_steps more at the same rate): the inner loss the learner descends, the size of
  its gradient in phi, the true support loss and the size of its gradient, the query
  accuracy, and the cosine between the inner loss's gradient and the support loss's
  (means over tasks);
- for a learned loss, each hidden layer of its loss network at phi_0: how many units are
  on for at least one point (or pair) of any episode, how many for more than 1% of them,
  and the mean fraction of units on (activation > 0). A ReLU unit that is never on passes
  no gradient, to phi or to its own weights, and stays off; for tanh, "on" only says
  which half of its range a unit is in.
"""

from __future__ import annotations

import argparse
import os

import numpy as np


def _checkpoints(model_dir: str, which: str) -> list[str]:
    """The checkpoints to read, one per meta-update, in order."""
    import tensorflow as tf

    from viable_tf.run_dir import RunDir

    run = RunDir(model_dir)
    best = tf.train.latest_checkpoint(run.best)
    paths = [best] if best else []
    if which == "all":
        state = tf.train.get_checkpoint_state(run.checkpoints)
        if state is not None:
            paths += list(state.all_model_checkpoint_paths)
    by_step = {}  # the best one's step is often also a kept training checkpoint
    for path in paths:
        by_step.setdefault(int(path.rsplit("-", 1)[-1]), path)
    return [by_step[step] for step in sorted(by_step)]


def inner_loop(learner, batches, steps: int) -> np.ndarray:
    """[steps + 1, 6]: per step from phi_0, the means over tasks of (inner loss, |d inner
    loss / d phi|, support loss, query accuracy, cos(d inner / d phi, d support / d phi),
    |d support loss / d phi|): how large the learned step is beside the task's own."""
    import tensorflow as tf

    from lab import inner_path
    from viable_tf.evaluation.classification import query_accuracy

    rows = []
    for batch in batches:
        path, _ = inner_path.walk(learner, batch, steps=steps + 1)  # the last step not taken
        per_step = []
        for step in path:
            values = (
                step.inner,
                tf.norm(step.inner_grad, axis=1),
                step.task,
                query_accuracy(learner, step.state, batch),
                step.cosine,
                tf.norm(step.task_grad, axis=1),
            )
            per_step.append(np.stack([t.numpy() for t in values]))
        rows.append(np.stack(per_step))  # [steps + 1, 6, B]
    return np.concatenate(rows, axis=-1).mean(-1)


def live_units(learner, batches) -> list[dict]:
    """Per hidden layer of the learner's loss network at phi_0: units on for any point or
    pair, units on for more than 1% of them, the mean fraction on. Empty for a learner
    without an MLP loss network (the task loss itself, or attVIABLE's attention layers)."""
    import tensorflow as tf

    from viable_tf.learners.viable import LearnedInnerLoss
    from viable_tf.networks import RelationLossNetwork, SimpleLossNetwork

    if not isinstance(learner, LearnedInnerLoss):
        return []
    network = learner.loss_network
    if not isinstance(network, SimpleLossNetwork | RelationLossNetwork):
        return []
    on: dict[int, list[np.ndarray]] = {}

    def observe(layer: int, activations: tf.Tensor) -> None:
        flat = tf.reshape(activations, [-1, activations.shape[-1]])
        on.setdefault(layer, []).append(tf.cast(flat > 0, tf.float32).numpy())

    network.observe_hidden = observe
    try:
        for batch in batches:
            support = (batch.support_x, batch.support_y, batch.support_mask)
            learner.inner_loss(learner.start_state(*support), *support)
    finally:
        network.observe_hidden = None
    layers = []
    for layer in sorted(on):
        fraction = np.concatenate(on[layer]).mean(0)  # per unit: share of points/pairs on
        layers.append(
            {
                "layer": layer + 1,
                "units": fraction.size,
                "ever_on": int((fraction > 0).sum()),
                "on_over_1pct": int((fraction > 0.01).sum()),
                "mean_on": float(fraction.mean()),
            }
        )
    return layers


def anatomy(
    model_dir: str,
    which: str,
    episodes: int,
    extra_steps: int,
    gin_params: tuple[str, ...],
    initialisation: bool = False,
) -> list[dict]:
    """One entry per checkpoint (meta-update 0 first if `initialisation`):
    {'step', 'inner_loop' [S + extra + 1, 5], 'layers'}."""
    import tensorflow as tf

    from viable_tf.config import load_run
    from viable_tf.evaluation.classification import ClassificationEvaluator
    from viable_tf.evaluation.core import VALIDATION_SEED

    run = load_run(model_dir, gin_params)
    learner = run.learner
    batches = list(
        ClassificationEvaluator(
            run.tasks.validation, num_episodes=episodes, seed=VALIDATION_SEED
        ).batches()
    )

    def entry(learner, step: int) -> dict:
        return {
            "step": step,
            "inner_loop": inner_loop(learner, batches, learner.num_inner_steps + extra_steps),
            "layers": live_units(learner, batches),
        }

    entries = []
    if initialisation:
        entries.append(entry(load_run(model_dir, gin_params, restore=False).learner, 0))
    for path in _checkpoints(model_dir, which):
        tf.train.Checkpoint(learner=learner).read(path).expect_partial()
        entries.append(entry(learner, int(path.rsplit("-", 1)[-1])))
    return entries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model_dir")
    parser.add_argument("--checkpoints", choices=("all", "best"), default="all")
    parser.add_argument("--initialisation", action="store_true")
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--extra_steps", type=int, default=2)
    parser.add_argument("--gin_param", action="append", default=[])
    args = parser.parse_args()
    if args.episodes < 1 or args.extra_steps < 0:
        parser.error("--episodes must be >= 1 and --extra_steps >= 0")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    entries = anatomy(
        args.model_dir,
        args.checkpoints,
        args.episodes,
        args.extra_steps,
        tuple(args.gin_param),
        args.initialisation,
    )
    print(
        "| checkpoint | step t | inner loss | its gradient's size | support loss "
        "| its gradient's size | query accuracy (%) | cos with the support loss's gradient |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for entry in entries:
        for t, row in enumerate(entry["inner_loop"]):
            inner, norm, task, accuracy, cosine, task_norm = row
            print(
                f"| {entry['step']} | {t} | {inner:.3f} | {norm:.3f} | {task:.3f} "
                f"| {task_norm:.3f} | {100 * accuracy:.1f} | {cosine:.2f} |"
            )
    if any(entry["layers"] for entry in entries):
        print()
        print(
            "| checkpoint | hidden layer | units | on for any point or pair "
            "| on for > 1% of them | mean fraction on |"
        )
        print("|---:|---:|---:|---:|---:|---:|")
        for entry in entries:
            for layer in entry["layers"]:
                print(
                    f"| {entry['step']} | {layer['layer']} | {layer['units']} "
                    f"| {layer['ever_on']} | {layer['on_over_1pct']} | {layer['mean_on']:.3f} |"
                )


if __name__ == "__main__":
    main()
