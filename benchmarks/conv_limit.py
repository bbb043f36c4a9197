"""How far the image meta-update is from what this CPU does for its convolutions.

    .venv/bin/python benchmarks/conv_limit.py --data_dir=../shared/data/omniglot \\
        [--methods=cavia,simviable,maml] [--settings=5way1shot,5way5shot] [--repeats=5]

For each method and setting, built from gin/omniglot_conv/ exactly as viable-train builds
it (B = 4, two second-order inner steps), one meta-gradient on a fixed batch is traced
with static shapes, and

- its FLOPs are counted from the graph: every convolution (Conv2D and the two backprop
  convolutions that its first and second derivatives are made of, grouped ones by their
  filter's shape: 2 x output positions x filter size) and every matmul (2 M N K), checked
  against TensorFlow's own profiler (`tf.compat.v1.profiler`, which registers statistics
  for some of these ops only);
- the limit: each distinct convolution and matmul of the graph (op type and shapes) is
  run alone, in a loop of the same op in one tf.function, with TensorFlow's default
  (oneDNN) kernels; the sum over the graph's ops of their standalone times is the time
  the update's heavy ops take at the speed this CPU gives those exact shapes;
- a graph with a loop in it (a model MAML runs task by task) is reported as one it
  cannot count: the loop body's ops would be counted once, not once per iteration;
- ours: the traced meta-gradient's median time, and the trainer's (optimizer and
  sampling included) from benchmarks/meta_updates_per_second.py for comparison.

Prints GFLOP per update, GFLOP/s, and ours as a share of the limit, per method and
setting, and the fastest convolution rate measured (the CPU's best for these shapes).
"""

from __future__ import annotations

import argparse
import collections
import math
import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import gin
import tensorflow as tf
from timing import header, median_of

from viable_tf import config
from viable_tf.training import Trainer

CONVS = ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter")
MATMULS = ("MatMul", "BatchMatMulV2", "BatchMatMulV3")


def build(method: str, setting: str, data_dir: str, model_dir: str):
    """The learner and one fixed training batch of a shipped end-to-end config."""
    gin.clear_config()
    config.parse(
        [f"omniglot_conv/{method}_{setting}.gin"],
        [f"IMAGE_DIR={data_dir!r}", "Trainer.show_progress=False"],
    )
    trainer = Trainer(model_dir=model_dir)
    batch = trainer.tasks.sample(tf.constant([0, 1], tf.int64), trainer.meta_batch_size)
    batch = tf.nest.map_structure(tf.constant, batch)
    return trainer.learner, batch


def meta_gradient_fn(learner, batch):
    variables = learner.trainable_variables

    @tf.function(autograph=False)
    def step():
        with tf.GradientTape() as tape:
            loss, _ = learner.meta_loss(batch)
        grads = tape.gradient(loss, variables)
        return tf.add_n([tf.reduce_sum(g) for g in grads if g is not None])

    return step


#: Control flow whose body ops the graph walk would count once per loop, not per iteration.
LOOPS = ("While", "StatelessWhile")


def _static(tensor) -> list[int] | None:
    dims = tensor.shape.as_list() if tensor.shape.rank is not None else None
    return None if dims is None or None in dims else dims


def heavy_ops(graph: tf.Graph) -> list[tuple[str, tuple, int]]:
    """(op type, key shapes, FLOPs) of every convolution and matmul in `graph` (the
    meta-gradient's graph holds them all inline: it calls no functions)."""
    found = []
    for op in graph.get_operations():
        if op.type in CONVS:
            out = op.outputs[0]
            if op.type == "Conv2D":
                image, kernel, result = op.inputs[0], op.inputs[1], out
            elif op.type == "Conv2DBackpropInput":
                image, kernel, result = out, op.inputs[1], op.inputs[2]
            else:  # Conv2DBackpropFilter: input, filter_sizes, out_backprop
                image, kernel, result = op.inputs[0], out, op.inputs[2]
            shapes = [_static(t) for t in (image, kernel, result)]
            if None in shapes:
                raise ValueError(f"{op.name}: shapes not static: {shapes}")
            image_shape, kernel_shape, result_shape = shapes
            flops = 2 * math.prod(result_shape[:3]) * math.prod(kernel_shape)
            key = (
                tuple(image_shape),
                tuple(kernel_shape),
                tuple(result_shape),
                op.get_attr("padding").decode(),
                tuple(op.get_attr("strides")),
            )
            found.append((op.type, key, flops))
        elif op.type in MATMULS:
            a, b = (_static(t) for t in op.inputs[:2])
            if a is None or b is None:
                raise ValueError(f"{op.name}: shapes not static")
            if op.type == "MatMul":
                ta, tb = op.get_attr("transpose_a"), op.get_attr("transpose_b")
                m, k = (a[1], a[0]) if ta else (a[0], a[1])
                n = b[0] if tb else b[1]
                batch = 1
                key = (tuple(a), tuple(b), ta, tb)
            else:
                ta, tb = op.get_attr("adj_x"), op.get_attr("adj_y")
                m, k = (a[-1], a[-2]) if ta else (a[-2], a[-1])
                n = b[-2] if tb else b[-1]
                batch = math.prod(_static(op.outputs[0])[:-2])
                key = (tuple(a), tuple(b), ta, tb)
            found.append((op.type, key, 2 * batch * m * n * k))
    return found


def profiler_flops(graph: tf.Graph) -> int:
    options = tf.compat.v1.profiler.ProfileOptionBuilder.float_operation()
    options["output"] = "none"
    return tf.compat.v1.profiler.profile(graph, options=options).total_float_ops


def standalone_seconds(op_type: str, key: tuple, repeats: int, inner: int = 20) -> float:
    """The median time of one op of this type and shapes, run `inner` times in a loop."""
    if op_type in CONVS:
        image_shape, kernel_shape, result_shape, padding, strides = key
        image = tf.random.normal(image_shape)
        kernel = tf.random.normal(kernel_shape)
        result = tf.random.normal(result_shape)
        if op_type == "Conv2D":
            run = lambda: tf.nn.conv2d(image, kernel, strides, padding)  # noqa: E731
        elif op_type == "Conv2DBackpropInput":
            run = lambda: tf.raw_ops.Conv2DBackpropInput(  # noqa: E731
                input_sizes=image_shape,
                filter=kernel,
                out_backprop=result,
                strides=list(strides),
                padding=padding,
            )
        else:
            run = lambda: tf.raw_ops.Conv2DBackpropFilter(  # noqa: E731
                input=image,
                filter_sizes=kernel_shape,
                out_backprop=result,
                strides=list(strides),
                padding=padding,
            )
    else:
        a_shape, b_shape, ta, tb = key
        a, b = tf.random.normal(a_shape), tf.random.normal(b_shape)
        run = lambda: tf.matmul(a, b, transpose_a=ta, transpose_b=tb)  # noqa: E731

    @tf.function(autograph=False)
    def loop():  # a while loop: the same op each time, never merged as a common subexpression
        def body(i, total):
            return i + 1, total + tf.reduce_sum(tf.reshape(run(), [-1])[:1])

        return tf.while_loop(lambda i, _: i < inner, body, (tf.constant(0), tf.constant(0.0)))[1]

    return median_of(lambda: float(loop()), repeats, warmup=2) / inner


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--data_dir", required=True, help="the folder of Omniglot's zips (IMAGE_DIR)"
    )
    parser.add_argument("--methods", default="cavia,simviable,maml")
    parser.add_argument("--settings", default="5way1shot,5way5shot")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(header("B = 4, two second-order inner steps; float32; default (oneDNN) kernels"))
    print(
        "| setting | method | GFLOP / update: convs + matmuls (TF profiler) | conv share "
        "| ms / update, ours | GFLOP/s | ms at the ops' standalone speed | share of the limit |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    best_rate = 0.0
    for setting in args.settings.split(","):
        for method in args.methods.split(","):
            with tempfile.TemporaryDirectory() as model_dir:
                learner, batch = build(method, setting, args.data_dir, model_dir)
                step = meta_gradient_fn(learner, batch)
                graph = step.get_concrete_function().graph
                loops = [op.name for op in graph.get_operations() if op.type in LOOPS]
                ops = heavy_ops(graph)
                profiled = profiler_flops(graph)
                total = sum(flops for _, _, flops in ops)
                conv = sum(flops for kind, _, flops in ops if kind in CONVS)
                ours = median_of(lambda step=step: float(step()), args.repeats, warmup=2)
                counts = collections.Counter((kind, key) for kind, key, _ in ops)
                flops_of = {(kind, key): flops for kind, key, flops in ops}
                limit = 0.0
                for (kind, key), count in counts.items():
                    seconds = standalone_seconds(kind, key, args.repeats)
                    limit += count * seconds
                    if kind in CONVS:
                        best_rate = max(best_rate, flops_of[(kind, key)] / seconds)
            if loops:  # a loop body's ops are counted once, not once per iteration
                print(
                    f"| {setting} | {method} | cannot count: {len(loops)} loop(s) in the graph "
                    f"| | {1e3 * ours:.1f} | | | |",
                    flush=True,
                )
                continue
            print(
                f"| {setting} | {method} | {total / 1e9:.2f} ({profiled / 1e9:.2f}) "
                f"| {conv / total:.0%} | {1e3 * ours:.1f} | {total / ours / 1e9:.1f} "
                f"| {1e3 * limit:.1f} | {limit / ours:.0%} |",
                flush=True,
            )
    print(f"\nFastest convolution measured alone: {best_rate / 1e9:.1f} GFLOP/s")


if __name__ == "__main__":
    main()
