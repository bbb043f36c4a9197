"""lab/collapse_probe.py: its inner loop is the learner's own (MeTAL's, query term and
per-step networks included), its task-loss loop is CAVIA's step on the same weights, and
a network whose features are dead reads as dead."""

import functools

import keras
import numpy as np
import tensorflow as tf

from lab import collapse_probe
from viable_tf.learners import MeTAL
from viable_tf.networks import keras_network
from viable_tf.networks.keras_model import conv4_film
from viable_tf.tasks import TaskBatch

WAYS, TASKS = 3, 2


def _learner() -> MeTAL:
    keras.utils.set_random_seed(3)
    return MeTAL(
        input_dim=64,
        output_dim=WAYS,
        context_dim=4,
        num_inner_steps=2,
        inner_lr=0.5,
        task_loss="cross_entropy",
        network=keras_network(
            functools.partial(conv4_film, image_shape=(8, 8, 1), filters=4, blocks=2)
        ),
    )


def _batch() -> TaskBatch:
    labels = tf.tile(tf.range(WAYS)[None], [TASKS, 1])
    return TaskBatch(
        support_x=tf.random.stateless_uniform([TASKS, WAYS, 64], [1, 2]),
        support_y=labels,
        support_mask=tf.ones([TASKS, WAYS], tf.bool),
        query_x=tf.random.stateless_uniform([TASKS, WAYS, 64], [3, 4]),
        query_y=labels,
    )


def test_the_probes_inner_loop_is_the_learners_own_and_cavias():
    learner, batch = _learner(), _batch()
    # Its learned terms start flat unless trained: move their output layers off zero.
    for variable in learner.trainable_variables:
        if "support_term" in variable.path or "query_term" in variable.path:
            variable.assign(tf.random.stateless_normal(variable.shape, [5, 6]) * 0.5)
    found = collapse_probe.probe(learner, batch)
    support = (batch.support_x, batch.support_y, batch.support_mask)
    adapted = learner.adapt(*support, query_x=batch.query_x)
    np.testing.assert_allclose(
        found["query loss"], learner.query_loss(batch, adapted), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(
        found["size of phi, adapted"], tf.norm(adapted.context, axis=1), rtol=1e-5
    )
    assert np.all(np.abs(found["step 0: learned part"]) > 1e-4)  # the terms are in the loop
    # The task loss's loop alone: CAVIA's steps on the same weights.
    state = learner.start_state(*support)
    for _ in range(learner.num_inner_steps):
        with tf.GradientTape() as tape:
            tape.watch(state.context)
            total = tf.reduce_sum(learner.support_loss(state, *support))
        state = state.replace(context=state.context - 0.5 * tape.gradient(total, state.context))
    hits = tf.argmax(learner.predict(state, batch.query_x), -1, output_type=tf.int32)
    np.testing.assert_allclose(
        found["query accuracy, CE's inner loop"],
        tf.reduce_mean(tf.cast(hits == batch.query_y, tf.float32), 1),
    )
    meta_loss, _ = learner.meta_loss(batch)
    np.testing.assert_allclose(found["meta-loss"], [meta_loss], rtol=1e-5)
    assert found["size of the meta-gradient"][0] > 0
    zero = found["features at zero, adapted"]
    assert np.all((zero >= 0) & (zero < 1))


def test_a_network_whose_features_are_dead_reads_as_dead():
    learner, batch = _learner(), _batch()
    convolutions = [
        layer for layer in learner.network.model.layers if isinstance(layer, keras.layers.Conv2D)
    ]
    last = convolutions[-1]  # every feature after the last ReLU is 0, whatever phi does
    last.kernel.assign(tf.zeros_like(last.kernel))
    last.bias.assign(tf.fill(last.bias.shape, -100.0))
    found = collapse_probe.probe(learner, batch)
    np.testing.assert_array_equal(found["features at zero, adapted"], 1.0)
    np.testing.assert_array_equal(found["features at zero, phi_0"], 1.0)
    np.testing.assert_allclose(found["logit spread"], np.std(learner.network.model.layers[-1].bias))
    np.testing.assert_allclose(found["step 0: size of d CE/d phi"], 0.0, atol=1e-7)
