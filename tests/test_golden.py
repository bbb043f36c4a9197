"""One inner step with constant-initialised linear networks, checked by hand.

Prediction network: y_hat = w*x + v.phi + b with w = 0.5, v = (0.5, 0.5), b = 0
(no hidden layer, C = 2). Support: x = (1, 2), y = (0, 1), plus one padded point
with wild values that must change nothing. Query: x = 3, y = 1. alpha = 1.

At phi_0 = 0: y_hat = (0.5, 1.0), residuals r = (0.5, 0.0).
- CAVIA: d/dphi mean r^2 = mean(2r) v = 0.5 v = (0.25, 0.25); phi_1 = -(0.25, 0.25);
  query y_hat = 1.5 - 0.25 = 1.25; meta-loss (1.25 - 1)^2 = 0.0625.
- simVIABLE, linear loss net Lhat_j = L_j + y_hat_j + y_j:
  d/dphi = mean(2r + 1) v = 1.5 v = (0.75, 0.75); query y_hat = 1.5 - 0.75 = 0.75.
- relVIABLE, linear pair net Lhat_jk = sum(f_j) + sum(f_k), f = (L, x, y_hat, y):
  mean over pairs = 2 mean_j sum(f_j); d/dphi = 2 * 1.5 v = (1.5, 1.5); y_hat = 0.
- MAML (C = 0, inner lr 0.1): dL/dw = mean(2 r x) = 0.5, dL/db = mean(2r) = 0.5;
  w_1 = 0.45, b_1 = -0.05; query y_hat = 1.35 - 0.05 = 1.3.
- VIABLE on MAML, simple linear loss Lhat_j = L_j + y_hat_j + y_j: the weights descend
  d/dw = mean(2 r x + x) = mean(2, 2) = 2 and d/db = mean(2r + 1) = 1.5, so
  w_1 = 0.5 - 0.2 = 0.3, b_1 = -0.15; query y_hat = 0.9 - 0.15 = 0.75. With the linear
  pair net (twice the per-point sum): d/dw = 4, d/db = 3, w_1 = 0.1, b_1 = -0.3, y_hat = 0.
Meta-gradient of CAVIA's meta-loss M = (y_hat_q - y_q)^2, y_hat_q = w x_q + b -
alpha mean(2r) |v|^2 with r = w x + b - y:
  dM/dw = 2 * 0.25 * (3 - 2 * 1.5 * 0.5) = 0.75   (first order: 2 * 0.25 * 3 = 1.5)
  dM/db = 2 * 0.25 * (1 - 2 * 0.5) = 0            (first order: 0.5)
  dM/dv_i = 2 * 0.25 * (-2 * 0.5 * 0.5) = -0.25   (first order: 0.5 * phi_i = -0.125)
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from viable_tf.learners import CAVIA, MAML, MAMLVIABLE, VIABLE, AdaptedState
from viable_tf.networks import PredictionNetwork, RelationLossNetwork, SimpleLossNetwork
from viable_tf.tasks import TaskBatch


def _linear_network(**dims):
    return PredictionNetwork(
        hidden_units=(),
        init="keras",  # zero bias b
        kernel_initializer=keras.initializers.Constant(0.5),
        **dims,
    )


def _linear_loss(cls):
    def make():
        return cls(hidden_units=(1,), activation="linear")

    return make


def _set_ones(loss_network):
    for variable in loss_network.trainable_variables:
        variable.assign(tf.ones_like(variable) if "bias" not in variable.path else 0 * variable)


BATCH = TaskBatch(
    support_x=tf.constant([[[1.0], [2.0], [100.0]]]),
    support_y=tf.constant([[[0.0], [1.0], [-50.0]]]),
    support_mask=tf.constant([[True, True, False]]),
    query_x=tf.constant([[[3.0]]]),
    query_y=tf.constant([[[1.0]]]),
)


def _cavia(**kwargs):
    return CAVIA(input_dim=1, output_dim=1, context_dim=2, network=_linear_network, **kwargs)


def _viable(loss_cls, learner_cls=VIABLE, context_dim=2):
    learner = learner_cls(
        input_dim=1,
        output_dim=1,
        context_dim=context_dim,
        network=_linear_network,
        loss_network=_linear_loss(loss_cls),
    )
    _set_ones(learner.loss_network)
    return learner


@pytest.mark.parametrize(
    ("make", "context", "query_prediction"),
    [
        (_cavia, -0.25, 1.25),
        (lambda: _viable(SimpleLossNetwork), -0.75, 0.75),
        (lambda: _viable(RelationLossNetwork), -1.5, 0.0),
    ],
)
def test_one_inner_step_by_hand(make, context, query_prediction):
    learner = make()
    state = learner.adapt(BATCH.support_x, BATCH.support_y, BATCH.support_mask)
    np.testing.assert_allclose(state.context, [[context, context]], rtol=1e-6)
    np.testing.assert_allclose(learner.predict(state, BATCH.query_x), [[[query_prediction]]])


def test_maml_one_inner_step_by_hand():
    learner = MAML(input_dim=1, output_dim=1, context_dim=0, network=_linear_network)
    w, b = learner.adapt(BATCH.support_x, BATCH.support_y, BATCH.support_mask).weights
    np.testing.assert_allclose(w, [[[0.45]]], rtol=1e-6)
    np.testing.assert_allclose(b, [[-0.05]], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(
        learner.predict(AdaptedState(weights=[w, b]), BATCH.query_x), [[[1.3]]], rtol=1e-6
    )


@pytest.mark.parametrize(
    ("loss_cls", "weight", "bias", "query_prediction"),
    [(SimpleLossNetwork, 0.3, -0.15, 0.75), (RelationLossNetwork, 0.1, -0.3, 0.0)],
)
def test_viable_on_maml_one_inner_step_by_hand(loss_cls, weight, bias, query_prediction):
    learner = _viable(loss_cls, MAMLVIABLE, context_dim=0)
    w, b = learner.adapt(BATCH.support_x, BATCH.support_y, BATCH.support_mask).weights
    np.testing.assert_allclose(w, [[[weight]]], rtol=1e-6)
    np.testing.assert_allclose(b, [[bias]], rtol=1e-6)
    prediction = learner.predict(AdaptedState(weights=[w, b]), BATCH.query_x)
    np.testing.assert_allclose(prediction, [[[query_prediction]]], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    ("first_order", "expected"),
    [(False, {"w": 0.75, "b": 0.0, "v": -0.25}), (True, {"w": 1.5, "b": 0.5, "v": -0.125})],
)
def test_cavia_meta_gradient_by_hand(first_order, expected):
    learner = _cavia(first_order=first_order)
    with tf.GradientTape() as tape:
        loss, _ = learner.meta_loss(BATCH)
    np.testing.assert_allclose(loss, 0.0625, rtol=1e-6)
    kernel_x, kernel_context, bias = learner.network.params
    grad_w, grad_v, grad_b = tape.gradient(loss, [kernel_x, kernel_context, bias])
    np.testing.assert_allclose(grad_w, [[expected["w"]]], rtol=1e-5)
    np.testing.assert_allclose(grad_b, [expected["b"]], atol=1e-6)
    np.testing.assert_allclose(grad_v, [[expected["v"]], [expected["v"]]], rtol=1e-5)
