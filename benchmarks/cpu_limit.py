"""The CPU limit of relVIABLE at classification scale: its meta-update's FLOPs over its
time, beside the machine's measured matmul peak on the same shapes.

    .venv/bin/python benchmarks/cpu_limit.py [--settings 5w5s,20w1s] [--repeats 3]

For each setting, the shipped classification relVIABLE (2 x 1,500 ReLU pair layers,
640-d episodes, 15 queries per class, 2 inner steps, second order, Adam; the episodes
and learner of benchmarks/relation_network.py), one meta-update as the trainer runs it:

- FLOPs: counted from the traced graph, 2 M N K for every MatMul / BatchMatMul (the
  graph is flat and every shape static), and checked against TensorFlow's own profiler
  (`tf.compat.v1.profiler`, float_operation), which also counts the element-wise ops;
- time: median of `repeats` meta-updates after a warm-up, with TensorFlow's kernels
  (oneDNN) and compiled by XLA;
- the same with the pair layers in bfloat16 (`RelationLossNetwork.compute_dtype`,
  oneDNN);
- peak: the best of 2 x `repeats` bare matmuls of the meta-update's largest shape
  ([B P, 1500] x [1500, 1500], P pairs per task), in float32 and bfloat16, oneDNN and XLA,
  after a warm-up.

The table gives each path's GFLOP/s and its share of the best float32 and the best
bfloat16 matmul rates measured in the same sitting.
"""

from __future__ import annotations

import argparse
import math
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf
from relation_network import SETTINGS, episodes, make_learner, meta_update_fn
from timing import best_of, header, median_of

MATMULS = ("MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")


def matmul_flops(graph: tf.Graph) -> int:
    """2 M N K summed over the graph's (batched) matmuls; shapes must be static."""
    total = 0
    for op in graph.get_operations():
        if op.type not in MATMULS:
            continue
        a, b = (tuple(t.shape.as_list()) for t in op.inputs[:2])
        if op.type == "MatMul":
            m, k = a[::-1] if op.get_attr("transpose_a") else a
            n = b[0] if op.get_attr("transpose_b") else b[1]
            batch = 1
        else:
            m, k = a[-2:][::-1] if op.get_attr("adj_x") else a[-2:]
            n = b[-2] if op.get_attr("adj_y") else b[-1]
            batch = math.prod(op.outputs[0].shape.as_list()[:-2])
        total += 2 * batch * m * n * k
    return total


def profiler_flops(graph: tf.Graph) -> int:
    """TensorFlow's own count (its registered statistics: matmuls and element-wise ops)."""
    options = tf.compat.v1.profiler.ProfileOptionBuilder.float_operation()
    options["output"] = "none"
    return tf.compat.v1.profiler.profile(graph, options=options).total_float_ops


def matmul_rate(rows: int, width: int, dtype: tf.DType, xla: bool, repeats: int) -> float:
    """GFLOP/s of [rows, width] x [width, width] in `dtype`."""
    a = tf.random.stateless_normal([rows, width], seed=[0, 1], dtype=tf.float32)
    b = tf.random.stateless_normal([width, width], seed=[0, 2], dtype=tf.float32)
    a, b = tf.cast(a, dtype), tf.cast(b, dtype)
    matmul = tf.function(lambda a, b: tf.reduce_sum(tf.matmul(a, b)), jit_compile=xla)
    seconds = best_of(lambda: float(matmul(a, b)), repeats)
    return 2 * rows * width * width / seconds / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--settings", default="5w5s,20w1s", help="of " + ",".join(SETTINGS))
    parser.add_argument("--meta_batch_size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(header("relVIABLE 2 x 1,500 ReLU, 640-d, 15 queries per class, 2 inner steps"))
    print(
        "| setting | B | path | GFLOP / update (matmuls; TF profiler) | s / update "
        "| GFLOP/s | % of float32 peak | % of bfloat16 peak |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for name in args.settings.split(","):
        ways, shots = SETTINGS[name]
        batch = episodes(args.meta_batch_size, ways, shots)
        graph = (
            meta_update_fn(make_learner("relviable", ways), jit_compile=False)
            .get_concrete_function(batch)
            .graph
        )
        flops, profiled = matmul_flops(graph), profiler_flops(graph)
        rows = args.meta_batch_size * (ways * shots) ** 2  # every ordered pair of a task
        rates = {
            (dtype.name, xla): matmul_rate(rows, 1500, dtype, xla, 2 * args.repeats)
            for dtype in (tf.float32, tf.bfloat16)
            for xla in (False, True)
        }
        best = {
            kind: max(rate for (dtype, _), rate in rates.items() if dtype == kind)
            for kind in ("float32", "bfloat16")
        }

        def shares(rate, best=best):
            return f"{rate / best['float32']:.0%} | {rate / best['bfloat16']:.0%}"

        paths = {"oneDNN": (False, "float32"), "XLA": (True, "float32")}
        paths["bfloat16 pair layers, oneDNN"] = (False, "bfloat16")
        for label, (xla, dtype) in paths.items():
            learner = make_learner("relviable", ways, compute_dtype=dtype)
            step = meta_update_fn(learner, jit_compile=xla)
            seconds = median_of(lambda step=step, batch=batch: float(step(batch)), args.repeats)
            rate = flops / seconds / 1e9
            print(
                f"| {name} | {args.meta_batch_size} | meta-update, {label} "
                f"| {flops / 1e9:,.1f}; {profiled / 1e9:,.1f} | {seconds:.3f} | {rate:,.1f} "
                f"| {shares(rate)} |",
                flush=True,
            )
        for (dtype, xla), rate in rates.items():
            path = f"matmul [{rows}, 1500] x [1500, 1500] {dtype}, {'XLA' if xla else 'oneDNN'}"
            print(f"| {name} | | {path} | | | {rate:,.1f} | {shares(rate)} |", flush=True)


if __name__ == "__main__":
    main()
