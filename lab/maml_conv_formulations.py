"""Which way of running B tasks' own convolutions is fastest for MAML's image update on a
CPU whose kernels refuse a grouped convolution's gradient (research record:
docs/lab/maml_conv_formulations.md).

    .venv/bin/python -m lab.maml_conv_formulations --data_dir=../shared/data/omniglot [--repeats=5]

networks/task_stacked.py runs MAML's per-task convolutions as one grouped convolution where
the kernels give its gradients, and as a loop over tasks (`tf.vectorized_map`'s fallback)
where they do not. This probe times one second-order meta-gradient of the shipped 5-way
1-shot MAML config (B = 4, two inner steps) with the per-task loop against two
formulations that keep the tasks in a few standard ops with gradients of every order:

- shifted matmuls: the kh * kw taps' views of the padded input side by side, times the
  tasks' kernels in one batched matmul (with and without XLA, which the loop cannot use);
- depthwise, then a sum: each input channel of each task convolved with its C_out
  filters alone (channel multiplier C_out), the products summed over the task's inputs.

Each replaces `tf.nn.conv2d` where task_stacked calls it (the tasks stacked on the
channel axis), so the rest of the forward pass is the library's. Prints a table: ms per
meta-gradient, median of --repeats, and the largest difference from the loop's
meta-gradient, relative to its largest entry.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import tensorflow as tf

from viable_tf.networks import task_stacked


def _geometry(t, filters):
    """B, C_in, C_out of a grouped call: t [P, H, W, B * C_in], filters [kh, kw, C_in,
    B * C_out]."""
    c_in = filters.shape[2]
    b = t.shape[-1] // c_in
    return b, c_in, filters.shape[-1] // b


def shifted_matmuls(t, filters, strides, padding, dilations=1):
    """The grouped convolution as one batched matmul over the kernel's taps."""
    b, c_in, c_out = _geometry(t, filters)
    kh, kw = filters.shape[:2]
    sh, sw = (strides, strides) if isinstance(strides, int) else strides[-2:]
    dh, dw = (dilations, dilations) if isinstance(dilations, int) else dilations[-2:]
    height, width = t.shape[1], t.shape[2]
    if height is None or width is None:
        raise ValueError("shifted matmuls need the feature map's height and width")
    span_h, span_w = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    if padding == "SAME":  # the odd pixel of padding after, as TensorFlow pads
        out_h, out_w = -(-height // sh), -(-width // sw)
        pad_h = max((out_h - 1) * sh + span_h - height, 0)
        pad_w = max((out_w - 1) * sw + span_w - width, 0)
        t = tf.pad(
            t, [[0, 0], [pad_h // 2, pad_h - pad_h // 2], [pad_w // 2, pad_w - pad_w // 2], [0, 0]]
        )
    else:
        out_h, out_w = (height - span_h) // sh + 1, (width - span_w) // sw + 1
    rows = [slice(i * dh, i * dh + (out_h - 1) * sh + 1, sh) for i in range(kh)]
    columns = [slice(j * dw, j * dw + (out_w - 1) * sw + 1, sw) for j in range(kw)]
    taps = [t[:, row, column] for row in rows for column in columns]  # [P, H', W', B * C_in]
    patches = tf.stack(taps, -2)  # [P, H', W', kh * kw, B * C_in]
    shape = tf.shape(patches)
    patches = tf.reshape(patches, tf.concat([shape[:4], [b, c_in]], 0))
    kernel = tf.reshape(filters, [kh * kw, c_in, b, c_out])
    out = tf.einsum("phwtbc,tcbd->phwbd", patches, kernel)
    return tf.reshape(out, tf.concat([shape[:3], [b * c_out]], 0))


def depthwise_then_sum(t, filters, strides, padding, dilations=1):
    """The grouped convolution as a depthwise one (multiplier C_out) and a sum over C_in."""
    b, c_in, c_out = _geometry(t, filters)
    kh, kw = filters.shape[:2]
    depthwise = tf.reshape(
        tf.transpose(tf.reshape(filters, [kh, kw, c_in, b, c_out]), [0, 1, 3, 2, 4]),
        [kh, kw, b * c_in, c_out],
    )
    sh, sw = (strides, strides) if isinstance(strides, int) else strides[-2:]
    strides = [1, sh, sw, 1]
    rate = None if dilations in (1, [1, 1], (1, 1)) else dilations
    out = tf.nn.depthwise_conv2d(t, depthwise, strides, padding, dilations=rate)
    shape = tf.shape(out)
    out = tf.reshape(out, tf.concat([shape[:3], [b, c_in, c_out]], 0))
    return tf.reshape(tf.reduce_sum(out, 4), tf.concat([shape[:3], [b * c_out]], 0))


@contextlib.contextmanager
def formulation(name: str):
    """task_stacked's convolutions as `name` ("loop": task by task, as the library runs
    where grouped gradients are refused)."""
    grouped = task_stacked.grouped_gradients_supported
    conv2d = tf.nn.conv2d
    try:
        if name == "loop":
            task_stacked.grouped_gradients_supported = lambda: False
        else:
            task_stacked.grouped_gradients_supported = lambda: True
            tf.nn.conv2d = {"shifted": shifted_matmuls, "depthwise": depthwise_then_sum}[name]
        yield
    finally:
        task_stacked.grouped_gradients_supported = grouped
        tf.nn.conv2d = conv2d


#: (formulation, XLA) in the order run; the loop again last, as a check of the harness.
FORMULATIONS = (
    ("loop", False),
    ("shifted", False),
    ("shifted", True),
    ("depthwise", False),
    ("loop", False),
)


def _gradient_fn(learner, batch, xla: bool):
    """The meta-gradient of one fixed batch, traced (and compiled by XLA if `xla`)."""
    variables = learner.trainable_variables

    @tf.function(autograph=False, jit_compile=xla)
    def step():
        with tf.GradientTape() as tape:
            loss, _ = learner.meta_loss(batch)
        return tape.gradient(loss, variables)

    return step


def main() -> None:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "benchmarks"))
    from conv_limit import build  # a script beside us
    from timing import median_of

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--data_dir", required=True, help="the folder of Omniglot's zips (IMAGE_DIR)"
    )
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(
        f"grouped-convolution gradients on this CPU: {task_stacked.grouped_gradients_supported()}"
    )
    print("| formulation | XLA | ms / meta-gradient | largest difference from the loop, relative |")
    print("|---|---|---:|---:|")
    reference = None
    for name, xla in FORMULATIONS:
        with formulation(name), tempfile.TemporaryDirectory() as model_dir:
            learner, batch = build("maml", "5way1shot", args.data_dir, model_dir)
            step = _gradient_fn(learner, batch, xla)
            values = np.concatenate([g.numpy().ravel() for g in step()])
            reference = values if reference is None else reference
            seconds = median_of(lambda step=step: [g.numpy() for g in step()], args.repeats)
            difference = float(np.max(np.abs(values - reference)) / np.max(np.abs(reference)))
            print(f"| {name} | {xla} | {1e3 * seconds:.1f} | {difference:.2e} |", flush=True)


if __name__ == "__main__":
    main()
