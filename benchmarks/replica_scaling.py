"""Meta-updates per second of relVIABLE on sine versus replica count and meta-batch size.

    .venv/bin/python benchmarks/replica_scaling.py [--logical_cpus 2] [--batches 25,100,400,1600]

Replicas are GPUs where there are any, else logical CPU devices split from this
machine's CPU (they share its cores). One device is measured both XLA-compiled
(the trainer's default) and as a plain graph (what multi-device training runs),
so the table separates the cost of going multi-device from the gain of replicas.
K = Q = 10, C = 5, one inner step. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf

from viable_tf.learners import VIABLE
from viable_tf.tasks import SineTasks
from viable_tf.training import Trainer, make_strategy


def rate(strategy, batch_size: int, *, jit_compile: bool, steps: int | None = None) -> float:
    """Meta-updates per second of a relVIABLE trainer's compiled chunk of `steps`
    updates (default: about 15,000 tasks' worth), best of 3 after a warm-up."""
    steps = steps or max(30, 15_000 // batch_size)
    trainer = Trainer(
        model_dir=tempfile.mkdtemp(),
        tasks=SineTasks(),
        learner=VIABLE,
        meta_batch_size=batch_size,
        jit_compile=jit_compile,
        show_progress=False,
        strategy=strategy,
        steps_per_call=steps,
    )
    trainer.train_chunk(tf.constant(5))  # trace, compile, warm up
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        int(trainer.train_chunk(tf.constant(steps))[0])
        best = min(best, time.perf_counter() - start)
    return steps / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--logical_cpus", type=int, default=2)
    parser.add_argument("--batches", default="25,100,400,1600")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    mirrored = make_strategy("mirrored", logical_cpus=args.logical_cpus)
    default = tf.distribute.get_strategy()
    devices = ", ".join(d.split("/")[-1] for d in mirrored.extended.worker_devices)
    print(f"{os.cpu_count()} cores; mirrored replicas: {devices}; relVIABLE, K = Q = 10, C = 5\n")
    columns = [
        ("1 device, XLA", default, True),
        ("1 device, graph", default, False),
        (f"{mirrored.num_replicas_in_sync} replicas, mirrored", mirrored, False),
    ]
    print(
        "| meta-batch B | "
        + " | ".join(name for name, _, _ in columns)
        + " | speed-up vs 1 device (graph) |"
    )
    print("|---:|" + "---:|" * (len(columns) + 1))
    for batch_size in batches:
        rates = [rate(s, batch_size, jit_compile=jit) for _, s, jit in columns]
        print(
            f"| {batch_size} | "
            + " | ".join(f"{r:,.1f}" for r in rates)
            + f" | {rates[2] / rates[1]:.2f}x |",
            flush=True,
        )
    print("\n(meta-updates per second; tasks per second = B x meta-updates per second)")


if __name__ == "__main__":
    main()
