"""Where an image meta-update's time goes in float32 and in bfloat16, by kind of op, and
what bfloat16 could give at most.

    .venv/bin/python lab/bfloat16_profile.py --data_dir=../shared/data/omniglot \
        [--methods=cavia,maml] [--settings=5way1shot,20way1shot] [--steps=6]

A research tool (docs/lab/benchmarks_record.md). For each shipped end-to-end config, the
trainer's chunk of `steps` updates is run once to warm up and once under TensorFlow's
profiler, in float32 and in bfloat16 (`PerformanceSpec.precision`, forced). Each op's
self time on the host's threads (lab/fusion_profile.py's reading of the XSpace) is summed
by the op's type and classed: convolutions, matmuls and their gradients, the element-wise ops
(FiLM, ReLU, pooling and their gradients, the sums of gradients), casts, and the rest.
Prints, per config, milliseconds of op time per update by class in each format, and the
ceiling: the update's op time in float32 with its convolutions and matmuls at their
bfloat16 time and everything else at float32's, casts free (what bfloat16 gives if it
speeds up the products alone and costs nothing else). Op time sums the threads, so read
ratios, not wall-clock.
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
)

from fusion_profile import self_times

CLASSES = ("conv/matmul", "element-wise", "cast", "other")
PRODUCTS = ("Conv2D", "MatMul", "BatchMatMul", "FusedConv2D", "FusedMatMul", "DepthwiseConv2d")
ELEMENTWISE = (
    "Mul", "AddV2", "AddN", "Add", "Sub", "Relu", "ReluGrad", "MaxPool", "MaxPoolGrad",
    "BiasAdd", "BiasAddGrad", "Neg", "RealDiv", "Square", "Sum", "Mean", "MaxPoolGradGrad",
)  # fmt: skip


def op_type(event: str) -> str:
    """An op event is named `scope/name:Type` (TensorFlow's executor); others as they are."""
    return event.rsplit(":", 1)[-1] if ":" in event else event


def classify(kind: str) -> str:
    """oneDNN's kernels are `_Mkl[Native]<Op>`: classed by the op they run."""
    op = kind.removeprefix("_Mkl").removeprefix("Native")
    if op.startswith(PRODUCTS):
        return "conv/matmul"
    if op == "Cast":
        return "cast"
    if op in ELEMENTWISE:
        return "element-wise"
    return "other"


def profile(method: str, setting: str, number_format: str, data_dir: str, steps: int) -> dict:
    """Milliseconds of op self time per update, by class."""
    import tensorflow as tf
    from timing import image_trainer

    with tempfile.TemporaryDirectory() as work:
        trainer = image_trainer(
            method, setting, data_dir, os.path.join(work, "run"),
            steps_per_call=steps, precision=number_format, force_precision=True,
        )  # fmt: skip
        int(trainer.train_chunk(tf.constant(steps))[0])  # trace, warm up
        trace = os.path.join(work, "trace")
        tf.profiler.experimental.start(trace)
        ran = int(trainer.train_chunk(tf.constant(steps))[0])
        tf.profiler.experimental.stop()
        if ran != steps:
            sys.exit(f"the chunk ran {ran} of {steps} updates")
        (xplane,) = glob.glob(os.path.join(trace, "**", "*.xplane.pb"), recursive=True)
        times = self_times(xplane)
    by_class: collections.Counter = collections.Counter()
    for event, seconds in times.items():
        if ":" in event and "::" not in event:  # an op, not an executor event holding ops
            by_class[classify(op_type(event))] += seconds * 1e3 / steps
    return by_class


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data_dir", required=True)
    parser.add_argument("--methods", default="cavia,maml")
    parser.add_argument("--settings", default="5way1shot,20way1shot")
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    heads = " | ".join(f"{c} f32 / bf16" for c in CLASSES)
    print(f"| method | setting | {heads} | total f32 / bf16 | ceiling |")
    print("|---|---|" + "---:|" * (len(CLASSES) + 2))
    for setting in args.settings.split(","):
        for method in args.methods.split(","):
            f32, bf16 = (
                profile(method, setting, f, args.data_dir, args.steps)
                for f in ("float32", "bfloat16")
            )
            total32, total16 = sum(f32.values()), sum(bf16.values())
            ceiling = total32 / (total32 - f32["conv/matmul"] + bf16["conv/matmul"])
            cells = " | ".join(f"{f32[c]:.1f} / {bf16[c]:.1f}" for c in CLASSES)
            print(
                f"| {method} | {setting} | {cells} | {total32:.1f} / {total16:.1f} "
                f"| {ceiling:.2f}x |",
                flush=True,
            )


if __name__ == "__main__":
    main()
