"""Cost of relVIABLE's 2 x 1,500 relation loss network on Mini-ImageNet-shaped episodes.

    .venv/bin/python benchmarks/relation_network.py [--meta_batch_size 8] [--repeats 5]
    .venv/bin/python benchmarks/relation_network.py --modes [--settings 5w1s,5w5s,20w1s,20w5s]
    .venv/bin/python benchmarks/relation_network.py --passes [--settings 20w5s]
    .venv/bin/python benchmarks/relation_network.py --cpu_limit [--settings 5w5s,20w1s]

`--modes`: the shipped relVIABLE (`--activation`, ReLU) per setting, its meta-update compiled with
XLA (float32), run on TensorFlow's own kernels (oneDNN, float32), and with the pair
layers in bfloat16 (oneDNN): seconds per meta-update, peak memory and the ratio to
CAVIA's meta-update (XLA) at the same setting.

`--passes`: the shipped relVIABLE (`--activation`, oneDNN float32) with its meta-gradient
computed over 1, 2, 4 or all B tasks at a time (`PerformanceSpec.tasks_per_pass`): seconds
per meta-update and peak memory.

`--cpu_limit`: the CPU limit of the shipped relVIABLE (ReLU) per setting (default
5w5s,20w1s), one meta-update on each path of `--modes` (`MODES`): its FLOPs, counted
from the traced graph (2 M N K for every MatMul / BatchMatMul; the graph is flat and
every shape static) and checked against
TensorFlow's own profiler (`tf.compat.v1.profiler`, float_operation, which also counts
element-wise ops), over its median time; beside the best of 2 x `repeats` bare matmuls
of its largest shape ([B P, 1500] x [1500, 1500], P ordered pairs per task) in float32
and bfloat16, oneDNN and XLA, and each path's share of the best float32 and bfloat16
rates of the same sitting.

One meta-update as training runs it (second-order meta-gradient through 2 inner
steps, Adam), on synthetic episodes of LEO's shapes (640-d inputs, N-way K-shot,
15 queries per class): relVIABLE vs CAVIA time at 5-way 5-shot, the relation
network's first layer decomposed per point vs materialised per pair (time and
peak memory), and the peak memory of a 20-way 5-shot relVIABLE meta-update.

Time: median of `repeats` meta-updates (2 for the 20-way rows) after a warm-up (XLA-compiled, as the
trainer runs). Peak memory: TensorFlow's CPU allocator high-water mark during
one meta-update run as a plain graph (XLA's own buffers are not counted by the
allocator, so memory is measured without it), above what was held before it.
Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# The BFC allocator keeps the statistics that peak memory is read from (TensorFlow's
# default CPU allocator has none); every row runs on it, timed rows included.
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")

import keras
import numpy as np
import tensorflow as tf
from timing import best_of, header, median_of, times

from viable_tf.learners import CAVIA, VIABLE
from viable_tf.networks import RelationLossNetwork
from viable_tf.tasks import TaskBatch
from viable_tf.training.meta_gradient import gradients_in_passes

EMBEDDING_DIM = 640
QUERIES = 15


def episodes(batch_size: int, ways: int, shots: int, seed: int = 0) -> TaskBatch:
    rng = np.random.default_rng(seed)

    def points(per_class):
        x = rng.normal(size=(batch_size, ways * per_class, EMBEDDING_DIM)).astype(np.float32)
        x /= np.linalg.norm(x, axis=-1, keepdims=True)
        y = np.tile(np.repeat(np.arange(ways, dtype=np.int32), per_class), (batch_size, 1))
        return tf.constant(x), tf.constant(y)

    support_x, support_y = points(shots)
    query_x, query_y = points(QUERIES)
    return TaskBatch(support_x, support_y, tf.ones(support_y.shape, tf.bool), query_x, query_y)


def make_learner(
    method: str,
    ways: int,
    *,
    decomposed: bool = True,
    activation: str = "relu",
    compute_dtype: str = "float32",
):
    keras.utils.set_random_seed(0)
    common = {
        "input_dim": EMBEDDING_DIM,
        "output_dim": ways,
        "context_dim": 100,
        "num_inner_steps": 2,
        "inner_lr": 1.0,
        "task_loss": "cross_entropy",
    }
    if method == "cavia":
        return CAVIA(**common)
    return VIABLE(
        loss_network=lambda: RelationLossNetwork(
            hidden_units=(1500, 1500),
            include_inputs=True,
            decomposed=decomposed,
            activation=activation,
            compute_dtype=compute_dtype,
        ),
        **common,
    )


def meta_update_fn(learner, jit_compile: bool, tasks_per_pass: int | None = None):
    variables = learner.trainable_variables
    optimizer = keras.optimizers.Adam(1e-3)
    optimizer.build(variables)

    @tf.function(jit_compile=jit_compile)
    def step(batch):  # as the trainer computes it (None: the whole batch in one pass)
        size = batch.support_x.shape[0]
        loss, _, grads = gradients_in_passes(
            learner, variables, batch, 0, size, tasks_per_pass or size, size
        )
        optimizer.apply_gradients(zip(grads, variables, strict=True))
        return loss

    return step


def seconds_per_update(learner, batch, repeats: int, jit_compile: bool = True) -> float:
    step = meta_update_fn(learner, jit_compile=jit_compile)
    return median_of(lambda: float(step(batch)), repeats)  # after a compiling call


def peak_bytes(learner, batch) -> int:
    step = meta_update_fn(learner, jit_compile=False)
    step.get_concrete_function(batch)  # trace first: tracing allocates nothing large
    float(step(batch))
    tf.config.experimental.reset_memory_stats("CPU:0")
    before = tf.config.experimental.get_memory_info("CPU:0")["current"]
    float(step(batch))
    return tf.config.experimental.get_memory_info("CPU:0")["peak"] - before


SETTINGS = {"5w1s": (5, 1), "5w5s": (5, 5), "20w1s": (20, 1), "20w5s": (20, 5)}
MODES = {  # label: (XLA, compute dtype of the pair layers)
    "float32, XLA": (True, "float32"),
    "float32, oneDNN": (False, "float32"),
    "bfloat16, oneDNN": (False, "bfloat16"),
}


def modes_table(settings: list[str], batch_size: int, repeats: int, activation: str) -> None:
    print("| setting | B | mode | s / meta-update | vs CAVIA | peak memory (MiB) |")
    print("|---|---:|---|---:|---:|---:|")
    for name in settings:
        ways, shots = SETTINGS[name]
        batch = episodes(batch_size, ways, shots)
        cavia = seconds_per_update(make_learner("cavia", ways), batch, 5)
        slow = ways * shots * batch_size > 400
        for label, (xla, dtype) in MODES.items():

            def learner(dtype=dtype, ways=ways):
                return make_learner("relviable", ways, activation=activation, compute_dtype=dtype)

            seconds = seconds_per_update(learner(), batch, 2 if slow else repeats, xla)
            memory = "—" if xla else f"{peak_bytes(learner(), batch) / 2**20:,.0f}"
            print(
                f"| {name} | {batch_size} | {label} | {seconds:.3f} | {seconds / cavia:,.0f}x "
                f"| {memory} |",
                flush=True,
            )


def passes_table(settings: list[str], batch_size: int, repeats: int, activation: str) -> None:
    print("| setting | B | tasks per pass | s / meta-update | peak memory (MiB) |")
    print("|---|---:|---:|---:|---:|")
    for name in settings:
        ways, shots = SETTINGS[name]
        batch = episodes(batch_size, ways, shots)
        slow = ways * shots * batch_size > 400
        for per_pass in (None, *(p for p in (4, 2, 1) if p < batch_size)):
            # oneDNN, as the classification relVIABLE configs run: time and peak memory
            # from the same meta-updates (the allocator's statistics cost nothing).
            learner = make_learner("relviable", ways, activation=activation)
            step = meta_update_fn(learner, jit_compile=False, tasks_per_pass=per_pass)
            float(step(batch))  # trace and warm up
            seconds, peak = [], 0
            for _ in range(1 if slow else repeats):
                tf.config.experimental.reset_memory_stats("CPU:0")
                before = tf.config.experimental.get_memory_info("CPU:0")["current"]
                seconds += times(lambda step=step, batch=batch: float(step(batch)), 1, warmup=0)
                peak = max(peak, tf.config.experimental.get_memory_info("CPU:0")["peak"] - before)
            print(
                f"| {name} | {batch_size} | {per_pass or batch_size} "
                f"| {statistics.median(seconds):.3f} | {peak / 2**20:,.0f} |",
                flush=True,
            )


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


def cpu_limit_table(settings: list[str], batch_size: int, repeats: int) -> None:
    """FLOPs of one meta-update (shipped relVIABLE, ReLU) over its time on each path,
    beside the matmul peak of its largest shape measured in the same sitting."""
    print(
        "| setting | B | path | GFLOP / update (matmuls; TF profiler) | s / update "
        "| GFLOP/s | % of float32 peak | % of bfloat16 peak |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for name in settings:
        ways, shots = SETTINGS[name]
        batch = episodes(batch_size, ways, shots)
        graph = (
            meta_update_fn(make_learner("relviable", ways), jit_compile=False)
            .get_concrete_function(batch)
            .graph
        )
        flops, profiled = matmul_flops(graph), profiler_flops(graph)
        rows = batch_size * (ways * shots) ** 2  # every ordered pair of a task
        rates = {
            (dtype.name, xla): matmul_rate(rows, 1500, dtype, xla, 2 * repeats)
            for dtype in (tf.float32, tf.bfloat16)
            for xla in (False, True)
        }
        best = {
            kind: max(rate for (dtype, _), rate in rates.items() if dtype == kind)
            for kind in ("float32", "bfloat16")
        }

        def shares(rate, best=best):
            return f"{rate / best['float32']:.0%} | {rate / best['bfloat16']:.0%}"

        for label, (xla, dtype) in MODES.items():  # the paths --modes times
            learner = make_learner("relviable", ways, compute_dtype=dtype)
            step = meta_update_fn(learner, jit_compile=xla)
            seconds = median_of(lambda step=step, batch=batch: float(step(batch)), repeats)
            rate = flops / seconds / 1e9
            print(
                f"| {name} | {batch_size} | meta-update, {label} "
                f"| {flops / 1e9:,.1f}; {profiled / 1e9:,.1f} | {seconds:.3f} | {rate:,.1f} "
                f"| {shares(rate)} |",
                flush=True,
            )
        for (dtype, xla), rate in rates.items():
            path = f"matmul [{rows}, 1500] x [1500, 1500] {dtype}, {'XLA' if xla else 'oneDNN'}"
            print(f"| {name} | | {path} | | | {rate:,.1f} | {shares(rate)} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--modes", action="store_true", help="XLA vs oneDNN vs bfloat16")
    parser.add_argument("--passes", action="store_true", help="tasks per pass: time, memory")
    parser.add_argument(
        "--cpu_limit", action="store_true", help="FLOPs over time beside the matmul peak"
    )
    parser.add_argument("--settings", default=None, help="for --modes (all) and --passes (20w5s)")
    parser.add_argument("--meta_batch_size", type=int, default=8, help="episodes per update")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--activation",
        default="relu",
        help="the pair layers' (--modes, --passes): the classification default, ReLU since "
        "2026-11-23; the tables in docs/PERFORMANCE.md before it were measured with tanh",
    )
    parser.add_argument(
        "--large_batch_size", type=int, default=1, help="episodes per update at 20-way 5-shot"
    )
    args = parser.parse_args()
    b = args.meta_batch_size
    if args.cpu_limit:
        print(header("relVIABLE 2 x 1,500 ReLU, 640-d, 15 queries per class, 2 inner steps"))
        cpu_limit_table((args.settings or "5w5s,20w1s").split(","), b, args.repeats)
        return
    if args.modes or args.passes:
        print(header())
        table = modes_table if args.modes else passes_table
        default = ",".join(SETTINGS) if args.modes else "20w5s"
        table((args.settings or default).split(","), b, args.repeats, args.activation)
        return
    print(
        header(
            "640-d inputs, 800 hidden, C = 100, 2 inner steps (second order), "
            f"{QUERIES} queries per class"
        )
    )
    print("| setting | learner | first layer | B | s / meta-update | peak memory (MiB) |")
    print("|---|---|---|---:|---:|---:|")
    rows = [
        ("5-way 5-shot", 5, 5, "cavia", True, b),
        ("5-way 5-shot", 5, 5, "relviable", True, b),
        ("5-way 5-shot", 5, 5, "relviable", False, b),
        ("20-way 5-shot", 20, 5, "relviable", True, args.large_batch_size),
        ("20-way 5-shot", 20, 5, "relviable", False, args.large_batch_size),
        ("20-way 5-shot", 20, 5, "relviable", True, b),  # the configs' meta-batch
    ]
    for label, ways, shots, method, decomposed, batch_size in rows:
        batch = episodes(batch_size, ways, shots)
        learner = make_learner(method, ways, decomposed=decomposed)
        repeats = args.repeats if ways * shots * batch_size <= 400 else 2  # the slow rows
        seconds = seconds_per_update(learner, batch, repeats)
        memory = peak_bytes(make_learner(method, ways, decomposed=decomposed), batch) / 2**20
        layer = "—" if method == "cavia" else ("decomposed" if decomposed else "naive (pairs)")
        name = "CAVIA" if method == "cavia" else "relVIABLE 2x1500"
        print(
            f"| {label} | {name} | {layer} | {batch_size} | {seconds:.3f} | {memory:,.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
