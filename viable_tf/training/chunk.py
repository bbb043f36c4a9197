"""The compiled chunk of meta-training: up to `steps_per_call` meta-updates in one graph
call, the tasks of several updates drawn ahead of the loop that uses them (task_stream.py)
and the losses summed per summary segment (segments.py). `Trainer.train_chunk` compiles
it; the Python loop (loop.py) calls it between the periodic jobs."""

from __future__ import annotations

import tensorflow as tf

from viable_tf.tasks.base import TaskBatch
from viable_tf.training import segments
from viable_tf.training.task_stream import draw_block, tasks_ahead


def run_meta_updates(trainer, num_updates: tf.Tensor):
    """Up to `num_updates` (at most `steps_per_call`) meta-updates; stops at the
    first non-finite meta-loss (unless a gradient transform falls back).

    The tasks of `tasks_ahead` meta-updates are drawn in one go (the same tasks
    as drawn one update at a time), then the updates run on them.

    Returns:
      (updates run; per summary segment [S], the updates between two multiples of
      `summary_every`, in order: sums of meta-losses and of pre-update inner
      losses, update counts (0 for a segment not reached) and the learning rate
      after its last update; the index of the first non-finite meta-loss or -1).
    """
    spec = tf.nest.map_structure(  # a batch traced for its shapes only (then pruned)
        tf.TensorSpec.from_tensor, trainer.draw_tasks(tf.constant(0, tf.int64))
    )
    ahead = tasks_ahead(trainer.draw_ahead, trainer.steps_per_call, spec)
    num_updates = tf.minimum(num_updates, trainer.steps_per_call)
    every = tf.constant(trainer.summary_every, tf.int64)
    first_segment = trainer.step.read_value() // every

    def keep_going(i, sums, first_bad):
        return tf.logical_and(i < num_updates, first_bad < 0)

    def run_block(i, sums, first_bad):
        block = draw_block(trainer.draw_tasks, trainer.step.read_value(), ahead, spec)
        block_end = tf.minimum(num_updates, i + ahead)
        start = i

        def block_going(i, sums, first_bad):
            return tf.logical_and(i < block_end, first_bad < 0)

        def body(i, sums, first_bad):
            segment = trainer.step.read_value() // every - first_segment
            batch = TaskBatch(*(t[i - start] for t in block))
            loss, inner, _, counted = trainer.apply_meta_update(batch)
            row = segments.point(loss, inner, counted)
            sums = tf.tensor_scatter_nd_add(sums, [[segment]], [row])
            first_bad = tf.where(tf.math.is_finite(loss), first_bad, i)
            return i + 1, sums, first_bad

        return tf.while_loop(block_going, body, (i, sums, first_bad))

    sums = segments.empty_sums(trainer.steps_per_call // trainer.summary_every + 2)
    ran, sums, first_bad = tf.while_loop(
        keep_going, run_block, (tf.constant(0), sums, tf.constant(-1))
    )
    loss_sums, inner_sums, updates, rates = segments.read_out(
        sums, ran, trainer.optimizer.iterations, trainer.lr_schedule
    )
    return ran, loss_sums, inner_sums, updates, rates, first_bad
