"""The batch of few-shot tasks that every learner consumes.

Shape legend (fixed project-wide): B tasks, K support points (padded), Q query
points, D input dim, Y output dim.
"""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf


class TaskBatch(NamedTuple):
    """B few-shot tasks; support sets padded to a fixed K and masked.

    Attributes:
      support_x: float32 [B, K, D].
      support_y: float32 [B, K, Y] (regression) or int32 [B, K] (classification).
      support_mask: bool [B, K]; False marks padding. A task whose mask is all
        False has K = 0 and is not adapted.
      query_x: float32 [B, Q, D].
      query_y: float32 [B, Q, Y] or int32 [B, Q].
    """

    support_x: tf.Tensor
    support_y: tf.Tensor
    support_mask: tf.Tensor
    query_x: tf.Tensor
    query_y: tf.Tensor


def masked_mean(values: tf.Tensor, mask: tf.Tensor, axis: int | tuple[int, ...]) -> tf.Tensor:
    """Mean of `values` over `axis` counting only entries where `mask` is True.

    Masked entries take no part, even if they hold NaN or inf: they are replaced,
    not multiplied by zero. An all-masked slice has mean 0 (and zero gradient).
    """
    mask = tf.cast(mask, values.dtype)
    total = tf.reduce_sum(tf.where(mask > 0, values, tf.zeros_like(values)), axis=axis)
    count = tf.reduce_sum(mask, axis=axis)
    return total / tf.maximum(count, 1.0)
