"""What a checkpoint costs the training loop: `tf.train.CheckpointManager.save`, as
viable-train writes them, against the meta-updates' time between two saves.

For each trainer of a shipped config (built from its gin file, no data read: the sine main
job's relVIABLE and the end-to-end image CAVIA on its conv net), the trainer's own
checkpoint object (learner, optimizer slots, step, early stopping) is saved many times.
viable-train saves the latest state and, when it improves, the best weights at every
validation (`eval_every` meta-updates), so at most two saves per interval, against the
meta-updates' time at the rate given by `--rates` (updates per second, measured by
meta_updates_per_second.py and conv_limit.py on the machine). A writer of the project's
own (one graph call, or a snapshot written on a thread) measured 2.4 and 0.8 ms against
the manager's 14.1 on sine: under 10% of a training run either way, so the public
manager is what viable-train uses.

    .venv/bin/python benchmarks/checkpoint_writes.py [--repeats=40] [--rates=700,7]
"""

from __future__ import annotations

import argparse
import itertools
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
    files, params = CONFIGS[name]
    with tempfile.TemporaryDirectory() as root:
        trainer = _trainer(files, params, os.path.join(root, "run"))
        tensors = len(trainer.learner.weights) + len(trainer.optimizer.variables)
        latest = trainer.checkpoints.latest  # the series viable-train saves with
        numbers = itertools.count(1)
        took = times(lambda: latest.save(next(numbers)), repeats, warmup=2)
    return {
        "tensors": tensors,
        "eval_every": trainer.eval_every,
        "manager": statistics.median(took),
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
    print(header(f"median of {args.repeats} saves"))
    print(
        "| config | tensors | CheckpointManager.save (ms) | eval_every "
        "| updates' time per interval (s) | its share of training |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for (name, _), rate in zip(CONFIGS.items(), rates, strict=True):
        row = measure(name, args.repeats)
        interval = row["eval_every"] / rate  # the meta-updates between validations
        share = 2 * row["manager"] / (interval + 2 * row["manager"])
        print(
            f"| {name} | {row['tensors']} | {1e3 * row['manager']:.1f} | {row['eval_every']} "
            f"| {interval:.2f} | {100 * share:.2f}% |"
        )


if __name__ == "__main__":
    os.chdir(REPO)
    main()
