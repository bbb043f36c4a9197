"""MAML's per-task convolutions as one grouped convolution (networks/task_stacked.py):
the same outputs and the same second-order meta-gradient as the model run task by task."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import load_tool

from viable_tf.learners import MAML
from viable_tf.networks import FiLM, keras_network
from viable_tf.networks.keras_model import conv4_film
from viable_tf.networks.task_stacked import (
    chain_of_known_layers,
    grouped_gradients_supported,
    stacked_forward,
)

# TensorFlow's own CPU kernels (TF_ENABLE_ONEDNN_OPTS=0) have no grouped-convolution
# gradient: there conv chains take the per-task loop (the forward pass still stacks).


def small_conv(input_dim, output_dim, context_dim):
    """conv4_film's layers (no FiLM: MAML has no context) on 8 x 8 images, and a Dense
    with an activation and AveragePooling, to cover every known layer."""
    x = keras.Input((input_dim,))
    h = keras.layers.Reshape((8, 8, 1))(x)
    h = keras.layers.Conv2D(6, 3, padding="same")(h)
    h = keras.layers.MaxPooling2D(2)(keras.layers.ReLU()(h))
    h = keras.layers.Conv2D(5, 3, padding="valid", activation="tanh")(h)
    h = keras.layers.AveragePooling2D(2)(keras.layers.Activation("relu")(h))
    h = keras.layers.Flatten()(h)
    h = keras.layers.Dense(7, activation="tanh")(h)
    return keras.Model(x, keras.layers.Dense(output_dim)(h))


def _per_task(model, params, x):
    """The reference: the model on each task's own weights, one task at a time."""
    outputs = []
    for b in range(x.shape[0]):
        out, _ = model.stateless_call([p[b] for p in params], [], x[b])
        outputs.append(out)
    return tf.stack(outputs)


def test_stacked_tasks_equal_the_model_task_by_task():
    keras.utils.set_random_seed(1)
    model = small_conv(64, 3, 0)
    layers = [layer for layer in model.layers if not isinstance(layer, keras.layers.InputLayer)]
    assert len(layers) == 10 and (chain_of_known_layers(model) is not None) == (
        grouped_gradients_supported()
    )
    rng = np.random.default_rng(0)
    variables = model.trainable_variables
    params = [  # every task its own weights
        tf.constant(v.numpy()[None] + 0.1 * rng.normal(size=(4, *v.shape)), tf.float32)
        for v in variables
    ]
    x = tf.constant(rng.normal(size=(4, 5, 64)), tf.float32)
    np.testing.assert_allclose(
        stacked_forward(layers, variables, params, x).numpy(),
        _per_task(model, params, x).numpy(),
        rtol=1e-5,
        atol=1e-5,
    )


@pytest.mark.slow
def test_maml_on_a_conv_net_gets_the_loops_meta_gradient():
    """Second order through two inner steps: the stacked path and the per-task loop
    (the chain switched off) give the same meta-loss and meta-gradient."""
    rng = np.random.default_rng(2)
    support_x = tf.constant(rng.uniform(size=(3, 6, 64)), tf.float32)
    support_y = tf.constant(np.tile([0, 1, 2, 0, 1, 2], (3, 1)), tf.int32)
    query_x = tf.constant(rng.uniform(size=(3, 4, 64)), tf.float32)
    results = []
    for stacked in (True, False):
        keras.utils.set_random_seed(3)
        learner = MAML(
            input_dim=64,
            output_dim=3,
            num_inner_steps=2,
            inner_lr=0.5,
            task_loss="cross_entropy",
            network=keras_network(small_conv),
        )
        if not grouped_gradients_supported():  # both sides take the loop here
            assert learner.network._chain is None
        assert learner.network._chain is not None or not grouped_gradients_supported()
        if not stacked:
            object.__setattr__(learner.network, "_chain", None)
        with tf.GradientTape() as tape:
            state = learner.adapt(support_x, support_y, tf.ones([3, 6], tf.bool))
            query = learner.predict(state, query_x)
            loss = tf.reduce_mean(learner.task_loss(query, tf.zeros([3, 4], tf.int32)))
        results.append((loss.numpy(), tape.gradient(loss, learner.trainable_variables)))
    (loss_a, grads_a), (loss_b, grads_b) = results
    np.testing.assert_allclose(loss_a, loss_b, rtol=1e-5)
    for a, b in zip(grads_a, grads_b, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-6)


def test_models_the_stacking_does_not_know_take_the_loop():
    backbone = chain_of_known_layers(conv4_film(784, 5, 0))  # MAML's backbone
    assert (backbone is not None) == grouped_gradients_supported()
    assert chain_of_known_layers(conv4_film(784, 5, 4)) is None  # a context input: CAVIA's

    x = keras.Input((16,))
    h = keras.layers.Reshape((4, 4, 1))(x)
    h = keras.layers.LayerNormalization()(h)  # not a known layer
    model = keras.Model(x, keras.layers.Dense(2)(keras.layers.Flatten()(h)))
    assert chain_of_known_layers(model) is None
    branch = keras.layers.Dense(3)(x)  # two paths from the input: not a chain
    model = keras.Model(x, keras.layers.Add()([branch, keras.layers.Dense(3)(x)]))
    assert chain_of_known_layers(model) is None
    assert FiLM  # FiLM needs a context: never in MAML's chain


@pytest.mark.parametrize("padding", ["same", "valid"])
def test_strided_convolutions_stack_too(padding):
    x = keras.Input((36,))
    h = keras.layers.Reshape((6, 6, 1))(x)
    h = keras.layers.Conv2D(3, 3, strides=2, padding=padding)(h)
    model = keras.Model(x, keras.layers.Dense(2)(keras.layers.Flatten()(h)))
    layers = [layer for layer in model.layers if not isinstance(layer, keras.layers.InputLayer)]
    rng = np.random.default_rng(4)
    params = [
        tf.constant(v.numpy()[None] + rng.normal(size=(2, *v.shape)), tf.float32)
        for v in model.trainable_variables
    ]
    x = tf.constant(rng.normal(size=(2, 3, 36)), tf.float32)
    np.testing.assert_allclose(
        stacked_forward(layers, model.trainable_variables, params, x).numpy(),
        _per_task(model, params, x).numpy(),
        rtol=1e-5,
        atol=1e-5,
    )


@pytest.mark.parametrize("name", ["shifted", "depthwise"])
def test_the_labs_batched_formulations_equal_the_model_task_by_task(name):
    """lab/maml_conv_formulations.py's alternatives to the grouped convolution (timed
    there against the loop) compute the same forward pass."""
    probe = load_tool("maml_conv_formulations")
    keras.utils.set_random_seed(1)
    model = small_conv(64, 3, 0)
    layers = [layer for layer in model.layers if not isinstance(layer, keras.layers.InputLayer)]
    rng = np.random.default_rng(0)
    params = [
        tf.constant(v.numpy()[None] + 0.1 * rng.normal(size=(4, *v.shape)), tf.float32)
        for v in model.trainable_variables
    ]
    x = tf.constant(rng.normal(size=(4, 5, 64)), tf.float32)
    with probe.formulation(name):
        stacked = tf.function(lambda: stacked_forward(layers, model.trainable_variables, params, x))
        np.testing.assert_allclose(
            stacked().numpy(), _per_task(model, params, x).numpy(), rtol=1e-5, atol=1e-5
        )
