"""Small tensor helpers every layer of the library uses: seeds, stateless draws, means.

Stateless draws state their algorithm (`RNG_ALG`): with TensorFlow's default
(`auto_select`) the same seed gives other numbers under XLA than in a plain graph,
so a run compiled with XLA on one device and the same run mirrored over several
(never XLA-compiled) would train on different tasks. Philox is the same in both.
"""

from __future__ import annotations

import tensorflow as tf

#: The counter-based generator behind every stateless draw of the library.
RNG_ALG = "philox"


def seed_for(base_seed: int | tf.Tensor, index: int | tf.Tensor) -> tf.Tensor:
    """A stateless-RNG seed [2] for the `index`-th draw of a run seeded `base_seed`."""
    return tf.stack([tf.cast(base_seed, tf.int64), tf.cast(index, tf.int64)])


def split_seed(seed: tf.Tensor, num: int) -> tf.Tensor:
    """`num` independent seeds [num, 2] derived from one seed [2]."""
    return tf.random.experimental.stateless_split(seed, num=num, alg=RNG_ALG)


def uniform(shape, seed: tf.Tensor, minval=0.0, maxval=None, dtype=tf.float32) -> tf.Tensor:
    """Uniform draws in [minval, maxval) as a pure function of `seed` [2]."""
    return tf.random.stateless_uniform(
        shape, seed, minval=minval, maxval=maxval, dtype=dtype, alg=RNG_ALG
    )


def masked_mean(values: tf.Tensor, mask: tf.Tensor, axis: int | tuple[int, ...]) -> tf.Tensor:
    """Mean of `values` over `axis` counting only entries where `mask` is True.

    Masked entries take no part, even if they hold NaN or inf: they are replaced,
    not multiplied by zero. An all-masked slice has mean 0 (and zero gradient).
    """
    mask = tf.cast(mask, values.dtype)
    total = tf.reduce_sum(tf.where(mask > 0, values, tf.zeros_like(values)), axis=axis)
    count = tf.reduce_sum(mask, axis=axis)
    return total / tf.maximum(count, 1.0)
