"""What viable-train delivers beside what its compiled chunk runs at, per sine learner.

    .venv/bin/python benchmarks/delivered_rate.py [--updates 10000] [--rounds 2]
    .venv/bin/python benchmarks/delivered_rate.py --configs sine/cavia.gin,sine/relviable.gin

For each shipped config, built by gin exactly as viable-train builds it, under the
paper's protocol (validation on 100 tasks every 500 meta-updates, keep-best and latest
checkpoints, summaries every chunk, a figure every 5,000, the progress bar):

- chunk: meta-updates per second of the trainer's compiled chunk alone, the best of
  three 3,000-update calls (as benchmarks/meta_updates_per_second.py; the trainer is
  built with `steps_per_call=3000` for it, while `train()` still ends a call at each
  validation, every 500);
- delivered: `Trainer.train()` from meta-update 500 to 500 + `updates`, wall-clock, in
  the same process after a 500-update run has compiled everything (the difference of
  a (500 + updates)- and a 500-update run, without the process start-up).

The two are alternated `rounds` times in one sitting (machines here are noisy); the
table gives each round and the ratio delivered / chunk (checkpoints are written by
tf.train.CheckpointManager on the training thread, as viable-train writes them).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import gin
from timing import chunk_rate, header, times

from viable_tf import config
from viable_tf.training import Trainer

CHUNK = 3000  # meta-updates per timed chunk

CONFIGS = "sine/cavia.gin,sine/simviable.gin,sine/relviable.gin,sine/maml.gin"


def build(name: str, model_dir: str, *, params=()) -> Trainer:
    gin.clear_config()
    config.parse(
        [name],
        [
            "Trainer.num_steps=500",
            f"PerformanceSpec.steps_per_call={CHUNK}",
            *params,
        ],
    )
    trainer = Trainer(model_dir=model_dir)
    with contextlib.redirect_stderr(io.StringIO()):
        trainer.train()  # 500 updates: compiles the chunk, validation, checkpoints
    return trainer


def delivered_rate(trainer: Trainer, updates: int) -> float:
    trainer.num_steps = int(trainer.step.numpy()) + updates
    with contextlib.redirect_stderr(io.StringIO()):  # the bar is drawn, not shown here
        (seconds,) = times(trainer.train, 1, warmup=0)
    return updates / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", default=CONFIGS, help="comma-separated shipped configs")
    parser.add_argument("--updates", type=int, default=10_000, help="meta-updates delivered")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--gin_param", action="append", default=[], help="a binding for every trainer (ablations)"
    )
    args = parser.parse_args()
    print(header(" ".join(args.gin_param)))
    print("| config | round | chunk (updates/s) | delivered (updates/s) | delivered / chunk |")
    print("|---|---:|---:|---:|---:|")
    for name in args.configs.split(","):
        with tempfile.TemporaryDirectory() as model_dir:
            trainer = build(name, os.path.join(model_dir, "run"), params=args.gin_param)
            for round_ in range(1, args.rounds + 1):
                chunk = chunk_rate(trainer, steps=CHUNK, repeats=3)  # moves weights on
                trainer.checkpoints.latest.save(int(trainer.step.numpy()))  # resume here
                delivered = delivered_rate(trainer, args.updates)
                print(
                    f"| {name} | {round_} | {chunk:,.0f} | {delivered:,.0f} "
                    f"| {delivered / chunk:.0%} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
