"""Does a meta-gradient repeat its bits when called again on the same inputs? The question
behind "Runs do not retrace their path" (docs/lab/omniglot/end_to_end.md): resumed from one
checkpoint, two processes of a conv run part in the last bits after a few updates.

    python -m lab.repeat_bits config GIN_FILE [--calls 130] [--gin_param=...] [--jit_compile]
    python -m lab.repeat_bits plain [--calls 150] [--images 880] [--pool max|avg] \
        [--layers 4] [--shift_only]

`config` builds the trainer of GIN_FILE (its initial weights) and calls its meta-gradient
`calls` times on the meta-batch of update 0, the weights unchanged; `plain` does the same
with a program of TensorFlow ops alone (no viable_tf): a conv net (4 layers) whose
feature maps a 100-number context scales and shifts (FiLM; --shift_only: shifts), one
inner step on the context from zero, the gradient of the loss after it in every weight
(second order). Both print how many calls returned other bits than the first, from which
call on, and in which gradients, as one Markdown row. --jit_compile compiles the
configuration's meta-gradient with XLA: one executable, no graph executor scheduling
its ops.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

import numpy as np


def first_differences(
    fn: Callable[[], Sequence], names: Sequence[str], calls: int
) -> list[tuple[int, list[str], float]]:
    """Calls fn() `calls` times; for each call whose outputs differ in any bit from the
    first call's: (its index from 0, the names of the outputs that differ, the largest
    difference relative to the largest magnitude of its output in the first call)."""
    first = [np.asarray(t) for t in fn()]
    found = []
    for call in range(1, calls):
        now = [np.asarray(t) for t in fn()]
        differ = [
            i for i, (a, b) in enumerate(zip(first, now, strict=True)) if a.tobytes() != b.tobytes()
        ]
        if differ:
            largest = max(_relative(first[i], now[i]) for i in differ)
            found.append((call, [names[i] for i in differ], largest))
    return found


def _relative(first: np.ndarray, now: np.ndarray) -> float:
    """The largest |now - first| over the largest |first| (an output that was all zeros
    counts its largest |now| itself)."""
    scale = float(np.max(np.abs(first), initial=0.0))
    difference = float(np.max(np.abs(now.astype(np.float64) - first), initial=0.0))
    return difference / scale if scale > 0 else difference


def config_meta_gradient(gin_file: str, gin_params: Sequence[str], jit_compile: bool = False):
    """(fn, names): the meta-gradient of GIN_FILE's trainer at its initial weights on the
    meta-batch of update 0 (the meta-loss first), compiled by XLA if `jit_compile`."""
    import tempfile

    import tensorflow as tf

    from viable_tf.cli.common import parse_gin

    parse_gin([gin_file], [*gin_params, "Trainer.show_progress=False"])
    from viable_tf.training import Trainer

    trainer = Trainer(model_dir=tempfile.mkdtemp())  # a new folder: nothing to restore
    batch = trainer.draw_tasks(tf.constant(0, tf.int64))
    meta_gradients = tf.function(trainer.meta_gradients, autograph=False, jit_compile=jit_compile)

    def fn():
        loss, _, grads = meta_gradients(batch)
        return [loss, *grads]

    return fn, ["meta-loss", *(v.path for v in trainer.variables)]


def plain_meta_gradient(
    images: int, pool: str, layers: int = 4, shift_only: bool = False, seed: int = 0
):
    """(fn, names): the second-order gradient of a FiLM conv net's loss after one inner
    step on its context, in TensorFlow ops alone, on `images` fixed random 28 x 28 images
    (`layers` conv layers; the context shifts their feature maps and, unless
    `shift_only`, scales them)."""
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    x = tf.constant(rng.normal(size=(images, 28, 28, 1)).astype(np.float32))
    y = tf.constant(rng.integers(0, 20, size=images))
    weights, names, channels = [], [], 1
    for layer in range(layers):
        weights += [
            tf.Variable(
                rng.normal(size=(3, 3, channels, 32)).astype(np.float32)
                * (2 / (9 * channels)) ** 0.5
            ),
            tf.Variable(np.zeros(32, np.float32)),
            tf.Variable(rng.normal(size=(100, 64)).astype(np.float32) * 0.1),
        ]
        names += [f"conv{layer}/kernel", f"conv{layer}/bias", f"film{layer}/kernel"]
        channels = 32
    weights.append(tf.Variable(rng.normal(size=(32, 20)).astype(np.float32) * 0.1))
    names.append("output/kernel")
    pooling = {"max": tf.nn.max_pool2d, "avg": tf.nn.avg_pool2d}[pool]

    def loss(context):
        h = x
        for layer in range(layers):
            kernel, bias, film = weights[3 * layer : 3 * layer + 3]
            scale, shift = tf.split(context @ film, 2, axis=-1)
            h = tf.nn.conv2d(h, kernel, 1, "SAME") + bias
            h = (h if shift_only else h * (1.0 + scale)) + shift
            h = pooling(tf.nn.relu(h), 2, 2, "VALID")
        logits = tf.reduce_mean(h, [1, 2]) @ weights[-1]
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))

    @tf.function(autograph=False)
    def fn():
        with tf.GradientTape() as outer:
            context = tf.zeros([1, 100])
            with tf.GradientTape() as inner:
                inner.watch(context)
                before = loss(context)
            after = loss(context - inner.gradient(before, context))
        return [after, *outer.gradient(after, weights)]

    return fn, ["meta-loss", *names]


def row(what: str, calls: int, found: list[tuple[int, list[str], float]]) -> str:
    """One Markdown row: what, calls, calls that differ, the first such, in which outputs."""
    if not found:
        return f"| {what} | {calls} | 0 | | |"
    first, names, _ = found[0]
    largest = max(d for _, _, d in found)
    outputs = sorted({n for _, ns, _ in found for n in ns})
    return (
        f"| {what} | {calls} | {len(found)} | {first} | {len(outputs)} outputs "
        f"(first: {', '.join(names[:3])}); largest relative difference {largest:.2g} |"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    config = sub.add_parser("config", help="a configuration's meta-gradient")
    config.add_argument("gin_file")
    config.add_argument("--gin_param", action="append", default=[])
    config.add_argument("--calls", type=int, default=130)
    config.add_argument("--jit_compile", action="store_true")
    plain = sub.add_parser("plain", help="the same in TensorFlow ops alone")
    plain.add_argument("--images", type=int, default=880)
    plain.add_argument("--pool", choices=("max", "avg"), default="max")
    plain.add_argument("--layers", type=int, default=4)
    plain.add_argument("--shift_only", action="store_true")
    plain.add_argument("--calls", type=int, default=150)
    args = parser.parse_args(argv)
    if args.calls < 2:
        parser.error(f"--calls must be at least 2, got {args.calls}")
    if args.what == "config":
        fn, names = config_meta_gradient(args.gin_file, args.gin_param, args.jit_compile)
        what = args.gin_file + (", XLA" if args.jit_compile else "")
    else:
        for flag in ("images", "layers"):
            if getattr(args, flag) < 1:
                parser.error(f"--{flag} must be at least 1, got {getattr(args, flag)}")
        fn, names = plain_meta_gradient(args.images, args.pool, args.layers, args.shift_only)
        film = "shift" if args.shift_only else "scale and shift"
        what = f"plain, {args.layers} layers, {film}, {args.images} images, {args.pool} pooling"
    print("| program | calls | calls with other bits | first such call | where |")
    print("|---|---:|---:|---:|---|")
    print(row(what, args.calls, first_differences(fn, names, args.calls)))


if __name__ == "__main__":
    main()
