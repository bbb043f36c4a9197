"""LEO's training noise, a pure function of its meta-batch: the stateless seed one
meta-update draws from (`batch_seed`) and its draws (`Noise`: dropout and the normal
samples of the codes and weights), each from a seed of its own.
"""

from __future__ import annotations

import math

import tensorflow as tf

from viable_tf.ops import RNG_ALG
from viable_tf.ops import uniform as stateless_uniform
from viable_tf.tasks.base import TaskBatch

_PRIME = 65521  # the largest prime below 2^16: keeps the seed's sums inside int64


def batch_seed(batch: TaskBatch) -> tf.Tensor:
    """A stateless seed [2] that is a pure function of a meta-batch's real points: the
    same for the same tasks (whatever the padding holds), another for other tasks."""

    def digest(x: tf.Tensor, labels: tf.Tensor | None, mask: tf.Tensor | None) -> tf.Tensor:
        bits = tf.bitwise.bitwise_and(tf.bitcast(x, tf.int32), 0x7FFFFFFF) % _PRIME
        position = tf.range(tf.shape(x)[-1], dtype=tf.int64) % _PRIME + 1
        point = tf.reduce_sum(tf.cast(bits, tf.int64) * position, axis=-1) % _PRIME  # [B, P]
        if labels is not None:
            point = point * (tf.cast(labels, tf.int64) % _PRIME + 1)
        if mask is not None:
            point = tf.where(mask, point, tf.zeros_like(point))
        return tf.reduce_sum(point)

    support = digest(batch.support_x, batch.support_y, batch.support_mask)
    return tf.stack([support, digest(batch.query_x, None, None)])


class Noise:
    """The training noise of one meta-update: an independent seed for every draw."""

    def __init__(self, seed: tf.Tensor) -> None:
        self.seed = seed
        self.draws = 0

    def next_seed(self) -> tf.Tensor:
        self.draws += 1
        return tf.random.experimental.stateless_fold_in(self.seed, self.draws, alg=RNG_ALG)

    def normal(self, shape) -> tf.Tensor:
        """Standard normal draws by Box-Muller from `ops.uniform` (TensorFlow's own
        stateless normal draws other numbers under XLA, even with Philox)."""
        radius = tf.sqrt(-2.0 * tf.math.log(1.0 - stateless_uniform(shape, self.next_seed())))
        return radius * tf.cos(2.0 * math.pi * stateless_uniform(shape, self.next_seed()))

    def dropout(self, x: tf.Tensor, rate: float) -> tf.Tensor:
        if rate == 0.0:
            return x
        # Drawn point-major ([K, B, ...] for x [B, K, ...]): the padding points that end
        # one task's support set take draws after every task's real points, which keep
        # theirs (a batch padded otherwise gets the same training noise).
        perm = [1, 0, *range(2, x.shape.rank)]
        draws = stateless_uniform(tf.gather(tf.shape(x), perm), self.next_seed())
        keep = tf.transpose(draws, perm) >= rate
        return tf.where(keep, x / (1.0 - rate), tf.zeros_like(x))
