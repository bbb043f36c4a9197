"""Checks of a learner's inner loop shared by the tests of its heads."""

from __future__ import annotations

import numpy as np
import tensorflow as tf


def assert_one_inner_step_is_a_hand_step(learner, support, *, every_part_moves=False):
    """`learner.adapt` with one inner step equals the start state minus the inner rate
    times the inner loss's gradient in every adapted tensor, taken by hand; returns the
    adapted state. `every_part_moves`: each part's gradient is nonzero somewhere."""
    start = learner.start_state(*support)
    with tf.GradientTape() as tape:
        tape.watch(tf.nest.flatten(start))
        loss = tf.reduce_sum(learner.inner_loss(start, *support))
    grads = tape.gradient(loss, tf.nest.flatten(start))
    adapted = learner.adapt(*support)
    for a, s, g in zip(tf.nest.flatten(adapted), tf.nest.flatten(start), grads, strict=True):
        if every_part_moves:
            assert np.any(g.numpy() != 0)
        np.testing.assert_allclose(a, s - learner.inner_lr * g, rtol=1e-5, atol=1e-6)
    return adapted
