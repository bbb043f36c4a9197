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

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf
from timing import header, relviable_sine_rate

from viable_tf.training import make_strategy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--logical_cpus", type=int, default=2)
    parser.add_argument("--batches", default="25,100,400,1600")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    mirrored = make_strategy("mirrored", logical_cpus=args.logical_cpus)
    default = tf.distribute.get_strategy()
    devices = ", ".join(d.split("/")[-1] for d in mirrored.extended.worker_devices)
    print(header(f"mirrored replicas: {devices}; relVIABLE, K = Q = 10, C = 5"))
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
        rates = [relviable_sine_rate(s, batch_size, jit_compile=jit) for _, s, jit in columns]
        print(
            f"| {batch_size} | "
            + " | ".join(f"{r:,.1f}" for r in rates)
            + f" | {rates[2] / rates[1]:.2f}x |",
            flush=True,
        )
    print("\n(meta-updates per second; tasks per second = B x meta-updates per second)")


if __name__ == "__main__":
    main()
