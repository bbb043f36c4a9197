"""Has a classifier run's network died? (MeTAL on CAVIA at 20-way 1-shot end to end fell
to uniform predictions for about 800 updates: docs/lab/omniglot/end_to_end.md, "MeTAL on
CAVIA's collapse at 20 ways, and its return").

    python -m lab.collapse_probe RUN_DIR CHECKPOINT [CHECKPOINT ...] [--meta_batches 6] \
        [--gin_param=IMAGE_DIR='...']

For each checkpoint (a prefix such as RUN_DIR/checkpoints/ckpt-35500; the run's folder is
only read), on the same training meta-batches (drawn from seed 7, not the run's): per
inner step from phi_0, the support cross-entropy, the learned part of the inner loss
(inner loss minus task loss) and the sizes of their gradients in phi, and |phi|; after
the learner's inner loop, the query loss and accuracy, the spread of the query logits
over the classes, and the fraction of the query points' penultimate features at zero
(at phi_0 and adapted); the query accuracy after the task loss's inner loop alone on the
same weights (CAVIA's step); and the meta-loss with the size of its gradient in the
meta-parameters. A network whose features have died after adaptation answers every
query alike (spread near 0, accuracy at chance) whatever loss steps its context, and its
meta-gradient is small: nothing pulls it back. Needs a learner whose loop
lab/inner_path.py walks (phi alone at one rate: not Meta-SGD's learned rates) and a
functional Keras network (conv4_film), as the image table's runs are.
"""

from __future__ import annotations

import argparse

import numpy as np


def inner_loop(learner, batch, *, task_loss_only: bool = False):
    """The learner's inner loop from phi_0 (or the task loss's alone), as the learner runs
    it: per step, its rows; and the adapted state."""
    import tensorflow as tf

    from lab import inner_path

    path, state = inner_path.walk(learner, batch, stepped="task" if task_loss_only else "inner")
    rows = []
    for step in path:
        inner = step.task if task_loss_only else step.inner
        inner_grad = step.task_grad if task_loss_only else step.inner_grad
        rows.append(
            {
                "support CE": step.task.numpy(),
                "learned part": (inner - step.task).numpy(),
                "size of d CE/d phi": tf.norm(step.task_grad, axis=1).numpy(),
                "size of d learned/d phi": tf.norm(inner_grad - step.task_grad, axis=1).numpy(),
                "size of phi": tf.norm(step.state.context, axis=1).numpy(),
            }
        )
    return rows, state


def probe(learner, batch) -> dict[str, np.ndarray]:
    """The module docstring's quantities on one meta-batch, each [B] (the meta-loss and its
    gradient's size: [1])."""
    import tensorflow as tf

    rows, adapted = inner_loop(learner, batch)
    out = {f"step {k}: {name}": value for k, row in enumerate(rows) for name, value in row.items()}
    out["size of phi, adapted"] = tf.norm(adapted.context, axis=1).numpy()
    logits = learner.predict(adapted, batch.query_x)  # [B, Q, N]
    hits = tf.argmax(logits, -1, output_type=batch.query_y.dtype) == batch.query_y
    out["query loss"] = learner.query_loss(batch, adapted).numpy()
    out["query accuracy"] = tf.reduce_mean(tf.cast(hits, tf.float32), 1).numpy()
    out["logit spread"] = tf.reduce_mean(tf.math.reduce_std(logits, -1), 1).numpy()
    network = learner.network
    for name, context in (("phi_0", tf.zeros_like(adapted.context)), ("adapted", adapted.context)):
        _, features = network.call_with_penultimate(batch.query_x, context)  # [B, Q, H]
        zero = tf.cast(features <= 0, tf.float32)
        out[f"features at zero, {name}"] = tf.reduce_mean(zero, [1, 2]).numpy()
    _, plain = inner_loop(learner, batch, task_loss_only=True)
    plain_hits = tf.argmax(learner.predict(plain, batch.query_x), -1, output_type=tf.int32)
    out["query accuracy, CE's inner loop"] = tf.reduce_mean(
        tf.cast(plain_hits == batch.query_y, tf.float32), 1
    ).numpy()
    with tf.GradientTape() as tape:
        meta_loss, _ = learner.meta_loss(batch)
    grads = tape.gradient(meta_loss, learner.trainable_variables)
    out["meta-loss"] = np.array([float(meta_loss)])
    out["size of the meta-gradient"] = np.array(
        [float(tf.linalg.global_norm([g for g in grads if g is not None]))]
    )
    return out


def report(run_dir: str, checkpoints: list[str], gin_params: tuple[str, ...], meta_batches: int):
    import tensorflow as tf

    from viable_tf.config import load_run

    run = load_run(run_dir, gin_params)
    learner, batch_size = run.learner, run.trainer_settings["meta_batch_size"]
    batches = [run.tasks.sample(tf.constant([7, i]), batch_size) for i in range(meta_batches)]
    columns = {}
    for prefix in checkpoints:
        tf.train.Checkpoint(learner=learner).read(prefix).expect_partial()
        found = [probe(learner, batch) for batch in batches]
        columns[prefix.rsplit("/", 1)[-1]] = {
            name: np.concatenate([f[name] for f in found]) for name in found[0]
        }
    names = list(next(iter(columns.values())))
    print(f"{meta_batches} training meta-batches of {batch_size} tasks; mean (min to max)")
    print("| quantity | " + " | ".join(columns) + " |")
    print("|---|" + "---|" * len(columns))
    for name in names:
        cells = [
            f"{v[name].mean():.3f} ({v[name].min():.3f} to {v[name].max():.3f})"
            for v in columns.values()
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("checkpoints", nargs="+")
    parser.add_argument("--meta_batches", type=int, default=6)
    parser.add_argument("--gin_param", action="append", default=[])
    args = parser.parse_args()
    report(args.run_dir, args.checkpoints, tuple(args.gin_param), args.meta_batches)


if __name__ == "__main__":
    main()
