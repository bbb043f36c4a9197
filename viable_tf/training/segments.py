"""The compiled chunk's loss summaries: per segment of `summary_every` meta-updates, one
row of the loop's carry, its columns named here, and what the chunk returns of them.

A tiny carry: a buffer of every update's losses made XLA's loop copy it, so the loop
adds each update's point into its segment's row instead.
"""

from __future__ import annotations

import tensorflow as tf

#: A segment's row: sums of the meta-losses and of the pre-update inner losses, the
#: updates run, and the updates counted (not the ones that took a fallback).
SEGMENT_COLUMNS = ("loss", "inner_loss", "updates", "counted")


def empty_sums(num_segments: int) -> tf.Tensor:
    """The carry's start: [S, len(SEGMENT_COLUMNS)] zeros."""
    return tf.zeros([num_segments, len(SEGMENT_COLUMNS)])


def point(loss: tf.Tensor, inner: tf.Tensor, counted: tf.Tensor) -> tf.Tensor:
    """One meta-update's row to add into its segment's: [len(SEGMENT_COLUMNS)]."""
    return tf.stack([loss, inner, 1.0, counted])


def read_out(sums: tf.Tensor, ran: tf.Tensor, iterations: tf.Variable, lr_schedule):
    """(loss sums, inner-loss sums, updates, learning rate after each segment's last
    update), each [S]. Updates that took the fallback count in no mean: the sums are
    rescaled so that sum / updates is the mean over the others (unchanged where all
    count)."""
    column = {name: sums[:, i] for i, name in enumerate(SEGMENT_COLUMNS)}
    updates, counted = column["updates"], column["counted"]
    # The learning rate after each segment's last update (iterations = updates).
    ends = iterations - tf.cast(ran, tf.int64) + tf.cumsum(tf.cast(updates, tf.int64))
    rates = tf.cast(lr_schedule(ends), tf.float32)
    scale = updates / tf.maximum(counted, 1.0)
    loss_sums, inner_sums = (
        tf.where(counted == updates, column[name], column[name] * scale)
        for name in ("loss", "inner_loss")
    )
    return loss_sums, inner_sums, updates, rates
