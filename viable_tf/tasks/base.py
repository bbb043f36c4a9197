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
