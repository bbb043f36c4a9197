"""Small tensor helpers every layer of the library uses: seeds, stateless draws, means.

One random stream per seed, whatever runs it. With TensorFlow's default algorithm
(`auto_select`) the same seed gives other numbers under XLA than in a plain graph, so
a run compiled with XLA on one device and the same run mirrored over several (never
XLA-compiled) would train on different tasks. Stating `alg="philox"` is not enough:
XLA and TensorFlow's kernels draw the same Philox *bits* but turn them into floats
differently once the seed is a runtime tensor (a constant seed is folded before XLA
sees it, which hides this). So `uniform` draws raw uint32 bits with Philox and maps
them to numbers itself, with integer and bit operations that are exact everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

#: The counter-based generator behind every stateless draw of the library.
RNG_ALG = "philox"


def seed_for(base_seed: int | tf.Tensor, index: int | tf.Tensor) -> tf.Tensor:
    """A stateless-RNG seed [2] for the `index`-th draw of a run seeded `base_seed`."""
    return tf.stack([tf.cast(base_seed, tf.int64), tf.cast(index, tf.int64)])


def split_seed(seed: tf.Tensor, num: int) -> tf.Tensor:
    """`num` independent seeds [num, 2] derived from one seed [2]."""
    return tf.random.experimental.stateless_split(seed, num=num, alg=RNG_ALG)


def uniform(shape, seed: tf.Tensor, minval=0.0, maxval=1.0, dtype=tf.float32) -> tf.Tensor:
    """Uniform draws in [minval, maxval) as a pure function of `seed` [2], the same with
    or without XLA. float32: 2^23 evenly spaced values per unit interval (as
    TensorFlow's own kernel); int32: [minval, maxval) by the remainder (a bias of at
    most range / 2^32)."""
    bits = tf.random.stateless_uniform(
        shape, seed, minval=None, maxval=None, dtype=tf.uint32, alg=RNG_ALG
    )
    if dtype.is_integer:
        span = tf.cast(maxval - minval, tf.uint32)
        return tf.cast(minval, dtype) + tf.cast(bits % span, dtype)
    # The low 23 bits as the mantissa of a float in [1, 2), minus 1: exact.
    mantissa = tf.bitwise.bitwise_or(tf.bitwise.bitwise_and(bits, 0x7FFFFF), 0x3F800000)
    unit = tf.bitcast(mantissa, tf.float32) - 1.0
    return tf.cast(minval + (maxval - minval) * unit, dtype)


def real_labels(labels: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
    """Integer class labels [B, K] with a padded point's (mask False) made 0: a padding
    label may be anything (-1, ...), and a loss computed on every point must not see it.
    Real points' labels, and float regression targets, are returned as they are."""
    if not tf.as_dtype(labels.dtype).is_integer:
        return labels
    return tf.where(mask, labels, tf.zeros_like(labels))


def masked_mean(values: tf.Tensor, mask: tf.Tensor, axis: int | tuple[int, ...]) -> tf.Tensor:
    """Mean of `values` over `axis` counting only entries where `mask` is True.

    Masked entries take no part, even if they hold NaN or inf: they are replaced,
    not multiplied by zero. An all-masked slice has mean 0 (and zero gradient).
    """
    mask = tf.cast(mask, values.dtype)
    total = tf.reduce_sum(tf.where(mask > 0, values, tf.zeros_like(values)), axis=axis)
    count = tf.reduce_sum(mask, axis=axis)
    return total / tf.maximum(count, 1.0)


@tf.custom_gradient
def relu(x: tf.Tensor):
    """max(x, 0), as `tf.nn.relu`, with its gradient written as a select on x > 0.

    The value and the gradient are ReLU's (the gradient is 0 at x = 0, as `ReluGrad`'s).
    What differs is the second derivative's graph. Differentiating TensorFlow's
    `ReluGrad` again yields, besides the masked cotangent, a `zeros_like(x)` for the
    pre-activations, and XLA then keeps every product that this zero flows through: in
    a meta-gradient (second order through the inner loop) each hidden layer costs one
    activation-gradient matmul and one weight-gradient matmul that contribute nothing.
    A select has no gradient with respect to its condition, so here there is no such
    zero: relVIABLE's chunk on sine has 6 pair-layer matmuls and 2 weight-gradient
    matmuls per hidden layer pair (JAX's count) instead of 8 and 4
    (docs/PERFORMANCE.md).
    """

    def gradient(upstream: tf.Tensor) -> tf.Tensor:
        return tf.where(x > 0, upstream, tf.zeros_like(upstream))

    return tf.nn.relu(x), gradient


def standardized(values: tf.Tensor, mask: tf.Tensor, axes: Sequence[int]) -> tf.Tensor:
    """`values` minus the mean over `axes` of its real entries (`mask`, broadcast to it),
    over their sample standard deviation plus 1e-12 (MeTAL's standardisation). With
    fewer than two real entries, the entries minus their mean. Masked entries give 0."""
    mask = tf.broadcast_to(mask, tf.shape(values))
    real = tf.cast(mask, values.dtype)
    count = tf.reduce_sum(real, axis=axes, keepdims=True)
    kept = tf.where(mask, values, tf.zeros_like(values))
    mean = tf.reduce_sum(kept, axis=axes, keepdims=True) / tf.maximum(count, 1.0)
    centred = tf.where(mask, values - mean, tf.zeros_like(values))
    var = tf.reduce_sum(tf.square(centred), axis=axes, keepdims=True) / tf.maximum(count - 1, 1)
    positive = var > 0
    std = tf.where(positive, tf.sqrt(tf.where(positive, var, tf.ones_like(var))), 0.0)
    return centred / (std + 1e-12)


def tensor_means(tensors: Sequence[tf.Tensor]) -> tf.Tensor:
    """[B, L]: the mean of each per-task tensor [B, ...] over all but its task axis."""
    return tf.stack(
        [tf.reduce_mean(tf.reshape(t, [tf.shape(t)[0], -1]), axis=1) for t in tensors], axis=1
    )
