"""Task losses L_T, per point (docs/method.md §1): the true loss of regression and classification,
and robust losses a learner may minimise in its inner loop in place of the true one (docs/method.md
§8's hand-made baselines for corrupted support sets; the outer loss stays L_T).

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

HUBER_DELTA = 1.0  # where the Huber loss turns from squared to linear, in y's units
LABEL_SMOOTHING = 0.1


def huber(y_hat: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
    """Huber loss with delta = HUBER_DELTA, mean over Y, per point [B, P]: a point's pull
    on the fit is bounded by delta (half the squared error inside it, linear outside)."""
    error = tf.abs(y_hat - y)
    quadratic = tf.minimum(error, HUBER_DELTA)
    return tf.reduce_mean(0.5 * tf.square(quadratic) + HUBER_DELTA * (error - quadratic), -1)


def absolute_error(y_hat: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
    """Mean absolute error over Y, per point [B, P]: every point pulls with the same force."""
    return tf.reduce_mean(tf.abs(y_hat - y), axis=-1)


def smoothed_cross_entropy(logits: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
    """Cross-entropy against the one-hot label smoothed by LABEL_SMOOTHING, per point."""
    n = logits.shape[-1]
    target = tf.one_hot(labels, n) * (1.0 - LABEL_SMOOTHING) + LABEL_SMOOTHING / n
    return -tf.reduce_sum(target * tf.nn.log_softmax(logits), axis=-1)


def bounded_cross_entropy(logits: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
    """1 - p_label, per point [B, P] (the MAE of the probabilities over 2; Ghosh et al.
    2017): bounded in [0, 1], so a mislabelled point pulls no harder than a clean one."""
    probabilities = tf.nn.softmax(logits)
    return 1.0 - tf.reduce_sum(tf.one_hot(labels, logits.shape[-1]) * probabilities, -1)


#: Inner-loop losses in place of a task loss, and the task loss each stands in for.
INNER_LOSSES: dict[str, tuple[TaskLoss, str]] = {
    "huber": (huber, "mse"),
    "absolute_error": (absolute_error, "mse"),
    "smoothed_cross_entropy": (smoothed_cross_entropy, "cross_entropy"),
    "bounded_cross_entropy": (bounded_cross_entropy, "cross_entropy"),
}


def get_inner_loss(name: str | None, task_loss: str) -> TaskLoss:
    """The loss an inner loop minimises: the task loss when `name` is None, else a robust
    loss of INNER_LOSSES that stands in for `task_loss`."""
    if name is None or name == task_loss:
        return get_task_loss(task_loss)
    if name not in INNER_LOSSES:
        raise ValueError(
            f"unknown inner_task_loss {name!r}; expected None, {task_loss!r} or one of "
            f"{sorted(INNER_LOSSES)}"
        )
    loss, stands_in_for = INNER_LOSSES[name]
    if stands_in_for != task_loss:
        raise ValueError(
            f"inner_task_loss {name!r} stands in for {stands_in_for!r}, not this learner's "
            f"task loss {task_loss!r}"
        )
    return loss


def get_task_loss(name: str) -> TaskLoss:
    """The task loss called `name` ('mse' or 'cross_entropy')."""
    try:
        return TASK_LOSSES[name]
    except KeyError:
        raise ValueError(
            f"unknown task_loss {name!r}; expected one of {sorted(TASK_LOSSES)}"
        ) from None
