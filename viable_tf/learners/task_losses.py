"""Task losses L_T, per point (SPEC §1): the true loss of regression and classification.

Shape legend: B tasks, P points per task, Y output dim, N classes (way).
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

TaskLoss = Callable[[tf.Tensor, tf.Tensor], tf.Tensor]


def squared_error(y_hat: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
    """y_hat, y float [B, P, Y] -> mean squared error over Y, per point [B, P]."""
    return tf.reduce_mean(tf.square(y_hat - y), axis=-1)


def cross_entropy(logits: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
    """logits [B, P, N], integer labels [B, P] -> cross-entropy per point [B, P]."""
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)


TASK_LOSSES: dict[str, TaskLoss] = {"mse": squared_error, "cross_entropy": cross_entropy}


def get_task_loss(name: str) -> TaskLoss:
    """The task loss called `name` ('mse' or 'cross_entropy')."""
    try:
        return TASK_LOSSES[name]
    except KeyError:
        raise ValueError(
            f"unknown task_loss {name!r}; expected one of {sorted(TASK_LOSSES)}"
        ) from None
