"""Does Matching Networks' plain cosine attention train at the scale the image table's
episodes give the conv net?

    python -m lab.matching_input_scale RUN_DIR [--scales=1,7] [--temperatures=1,0.1] \
        [--steps=600] [--every=100] [--validation_episodes=200] \
        [--gin_param="DATA_DIR='W/features'"]

Takes a run whose head is `MatchingHead` for its configuration only: each arm starts from
the initial weights that configuration draws under the run's seed (`load_run(...,
restore=False)`), so no arm sees the run's training. Each arm meta-trains for `--steps`
meta-updates on the same training episodes (the run's task family, the same seeds, the
run's meta-batch size), with every image multiplied by the arm's scale and the head's
cosine divided by the arm's temperature, with Adam at 1e-3 and gradients clipped to 10
element by element (the shipped optimizer before its first decay, at 5,000). Prints, as
Markdown, each arm's mean meta-training loss over each `--every` meta-updates and its
accuracy on the first `--validation_episodes` validation episodes (scaled alike) before
and after. Chance is a loss of log N and an accuracy of 1 / N.
"""

from __future__ import annotations

import argparse

import numpy as np

LEARNING_RATE = 1e-3
CLIP = 10.0


def updater(learner, tasks, batch_size: int, scaled):
    """One compiled meta-update of `learner` on the training episodes of `seed`, scaled;
    returns the meta-loss."""
    import keras
    import tensorflow as tf

    optimizer = keras.optimizers.Adam(LEARNING_RATE, clipvalue=CLIP)
    weights = learner.trainable_variables
    optimizer.build(weights)

    @tf.function
    def update(seed):
        batch = scaled(tasks.sample(seed, batch_size))
        with tf.GradientTape() as tape:
            loss, _ = learner.meta_loss(batch)
        optimizer.apply_gradients(zip(tape.gradient(loss, weights), weights, strict=True))
        return loss

    return update


def validation_accuracy(learner, tasks, scaled, episodes: int) -> float:
    """The learner's mean query accuracy on the first `episodes` validation episodes,
    scaled."""
    import tensorflow as tf

    from viable_tf.evaluation.classification import query_accuracy

    data = tasks.validation.dataset(batch_size=episodes, seed=0, num_episodes=episodes)
    batch = scaled(next(iter(data)))
    state = learner.adapt(batch.support_x, batch.support_y, batch.support_mask)
    return float(tf.reduce_mean(query_accuracy(learner, state, batch)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--scales", default="1,7")
    parser.add_argument("--temperatures", default="1")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--validation_episodes", type=int, default=200)
    parser.add_argument("--gin_param", action="append", default=[])
    args = parser.parse_args()
    import tensorflow as tf

    from viable_tf.config import load_run
    from viable_tf.tasks.base import TaskBatch

    arms = [
        (float(s), float(t)) for s in args.scales.split(",") for t in args.temperatures.split(",")
    ]
    rows, accuracies = {}, {}
    for scale, temperature in arms:
        run = load_run(args.run_dir, tuple(args.gin_param), restore=False)
        learner, tasks = run.learner, run.tasks
        learner.head.temperature = temperature
        batch_size = run.trainer_settings.get("meta_batch_size", 4)

        def scaled(batch: TaskBatch, scale=scale) -> TaskBatch:
            return batch._replace(support_x=batch.support_x * scale, query_x=batch.query_x * scale)

        update = updater(learner, tasks, batch_size, scaled)
        before = validation_accuracy(learner, tasks, scaled, args.validation_episodes)
        losses = [float(update(tf.constant([7, step], tf.int32))) for step in range(args.steps)]
        after = validation_accuracy(learner, tasks, scaled, args.validation_episodes)
        accuracies[scale, temperature] = (before, after)
        rows[scale, temperature] = [
            float(np.mean(losses[i : i + args.every])) for i in range(0, args.steps, args.every)
        ]
    names = [f"x{scale:g}, tau {temperature:g}" for scale, temperature in arms]
    print("| meta-updates | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(arms))
    for i in range(len(rows[arms[0]])):
        span = f"{i * args.every + 1}-{(i + 1) * args.every}"
        print(f"| {span} | " + " | ".join(f"{rows[arm][i]:.3f}" for arm in arms) + " |")
    for label, index in (("validation accuracy before", 0), ("validation accuracy after", 1)):
        cells = " | ".join(f"{100 * accuracies[arm][index]:.1f}%" for arm in arms)
        print(f"| {label} | {cells} |")


if __name__ == "__main__":
    main()
