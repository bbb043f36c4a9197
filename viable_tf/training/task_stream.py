"""The training task stream: the tasks of meta-update t are drawn from the stateless seed
(seed, t), several meta-updates' at a time, ahead of the loop that uses them
(`PerformanceSpec.draw_ahead`): drawn inside the loop's body, XLA's CPU code ran sine's
meta-update 1.5-1.7x slower (docs/PERFORMANCE.md)."""

from __future__ import annotations

import tensorflow as tf

from viable_tf.tasks.base import TaskBatch

#: The tasks of several meta-updates are drawn together (PerformanceSpec.draw_ahead), up to
#: this many updates and this size (a block is drawn whole, even where a call ends
#: sooner).
DRAW_AHEAD_UPDATES = 100
DRAW_AHEAD_BYTES = 16 * 2**20


def tasks_ahead(draw_ahead: int | None, steps_per_call: int, spec: TaskBatch) -> int:
    """How many meta-updates' tasks are drawn in one go: `draw_ahead`, or as many as fit
    DRAW_AHEAD_UPDATES, DRAW_AHEAD_BYTES and a call's `steps_per_call`."""
    if draw_ahead is not None:
        return draw_ahead
    most = min(steps_per_call, DRAW_AHEAD_BYTES // max(spec.num_bytes, 1), DRAW_AHEAD_UPDATES)
    return int(max(1, most))


def draw_block(draw_tasks, first_step: tf.Tensor, ahead: int, spec: TaskBatch):
    """The tasks of meta-updates first_step .. first_step + ahead - 1, each a tuple of
    [ahead, ...] tensors (`draw_tasks(step)` as one update draws them)."""
    steps = first_step + tf.range(ahead, dtype=tf.int64)
    return tf.map_fn(lambda step: tuple(draw_tasks(step)), steps, fn_output_signature=tuple(spec))
