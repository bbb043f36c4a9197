"""What a checkpoint costs the training loop, and whether viable_tf's own writer earns its
place beside TensorFlow's public `tf.train.CheckpointManager`.

For each trainer of a shipped config (built from its gin file, no data read: the sine main
job's relVIABLE and the end-to-end image CAVIA on its conv net), the same checkpoint object
(learner, optimizer slots, step, early stopping) is saved many times in one sitting,
alternating the sides:

- `CheckpointManager.save`: the public API, eager (the loop waits for the whole write);
- `CheckpointWriter`, synchronous: the same `Checkpoint.write` traced once into a graph call;
- `CheckpointWriter` in the background, as viable-train saves: the loop waits only for the
  snapshot (one graph call copying every variable), the write happens on a thread.

The last columns put the stall at the config's own save interval: viable-train saves the
latest state and, when it improves, the best weights at every validation (`eval_every`
meta-updates), so at most two saves per interval, against the meta-updates' time at the
rate given by `--rates` (updates per second, measured by meta_updates_per_second.py and
conv_limit.py on the machine).

    .venv/bin/python benchmarks/checkpoint_writes.py [--repeats=40] [--rates=700,7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from timing import header, times  # noqa: E402

#: name -> (gin files, bindings that let the trainer build without its data)
CONFIGS = {
    "sine relVIABLE": (["gin/sine/relviable.gin"], []),
    "images CAVIA (conv)": (["gin/omniglot_conv/cavia_5way1shot.gin"], []),
}


def _trainer(files, params, model_dir):
    """The config's trainer, on stand-in tasks of its shapes where its tasks read data,
    with the optimizer's slots built (as after the first meta-update)."""
    import gin

    from viable_tf import config
    from viable_tf.tasks import SineTasks
    from viable_tf.training import Trainer

    config.parse(files, params)
    if "Episodes" in str(gin.query_parameter("Trainer.tasks")):  # few-shot or image folder
        stand_in = SineTasks()  # the image configs' shapes: 28 x 28 pixels, 5 ways
        stand_in.input_dim, stand_in.output_dim, stand_in.task_loss = 784, 5, "cross_entropy"
        with gin.unlock_config():
            gin.bind_parameter("Trainer.tasks", stand_in)
    trainer = Trainer(model_dir=model_dir, show_progress=False)
    trainer.optimizer.build(trainer.learner.trainable_variables)
    return trainer


def measure(name: str, repeats: int) -> dict:
    import tensorflow as tf

    from viable_tf.training.checkpoints import CheckpointWriter

    files, params = CONFIGS[name]
    with tempfile.TemporaryDirectory() as root:
        trainer = _trainer(files, params, os.path.join(root, "run"))
        state = trainer.checkpoints.latest.checkpoint
        tensors = len(trainer.learner.weights) + len(trainer.optimizer.variables)
        manager = tf.train.CheckpointManager(state, os.path.join(root, "manager"), max_to_keep=2)
        synchronous = CheckpointWriter(state, os.path.join(root, "sync"), max_to_keep=2)
        background = trainer.checkpoints.latest  # the writer viable-train saves with
        sides = {
            "manager": lambda n: manager.save(checkpoint_number=n),
            "writer": synchronous.save,
            "background": background.save,
        }
        seconds = {side: [] for side in sides}
        for n in range(repeats + 2):  # two warm-up rounds (tracing), alternating sides
            for side, save in sides.items() if n % 2 else reversed(sides.items()):
                (took,) = times(lambda save=save, n=n: save(n), 1, warmup=0)
                if n >= 2:
                    seconds[side].append(took)
                background.wait()  # each side starts from an idle disk
    return {
        "tensors": tensors,
        "eval_every": trainer.eval_every,
        **{side: statistics.median(values) for side, values in seconds.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument(
        "--rates",
        default="700,7",
        help="meta-updates per second of each config on this machine, in CONFIGS' order",
    )
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    print(header(f"median of {args.repeats} saves per side, alternating"))
    print(
        "| config | tensors | manager (ms) | writer (ms) | background stall (ms) "
        "| eval_every | updates' time per interval (s) | manager's share | background's share |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for (name, _), rate in zip(CONFIGS.items(), rates, strict=True):
        row = measure(name, args.repeats)
        interval = row["eval_every"] / rate  # the meta-updates between validations
        share = {s: 2 * row[s] / (interval + 2 * row[s]) for s in ("manager", "background")}
        print(
            f"| {name} | {row['tensors']} | {1e3 * row['manager']:.1f} "
            f"| {1e3 * row['writer']:.1f} | {1e3 * row['background']:.1f} "
            f"| {row['eval_every']} | {interval:.2f} | {100 * share['manager']:.2f}% "
            f"| {100 * share['background']:.2f}% |"
        )


if __name__ == "__main__":
    os.chdir(REPO)
    main()
