"""VIABLE's gradient-agreement features (docs/method.md §8): each support point's task-loss gradient
with respect to phi against the mean of the others', given to the loss network as
constants; exact against a point-by-point computation, masked, order-equivariant."""

import numpy as np
import pytest
import tensorflow as tf

from viable_tf.learners import (
    MAMLVIABLE,
    VIABLE,
    GradientAgreement,
    Inputs,
    Labels,
    Outputs,
    TaskLoss,
)
from viable_tf.learners.loss_features import gradient_agreement
from viable_tf.networks import RelationLossNetwork, SimpleLossNetwork
from viable_tf.tasks import SineTasks, seed_for

#: simVIABLE's point features and each point's gradient agreement.
AGREE = (TaskLoss(), Outputs(), Labels(), GradientAgreement())


def _learner(**kwargs):
    return VIABLE(
        input_dim=1,
        output_dim=1,
        features=[TaskLoss(), Outputs(), Labels(), Inputs(), GradientAgreement()],
        loss_network=lambda: RelationLossNetwork(hidden_units=(16, 16)),
        **kwargs,
    )


def _batch(num_tasks=4, num_support=6):
    return SineTasks(num_support=num_support, min_support=2, outliers=1).sample(
        seed_for(3, 0), num_tasks
    )


def _state(learner, num_tasks):
    context = tf.random.stateless_normal([num_tasks, learner.context_dim], [1, 2], alg="philox")
    return type(learner.initial_state(num_tasks))(context=context)


def test_features_match_each_points_own_gradient():
    learner, batch = _learner(), _batch()
    state = _state(learner, 4)
    features = gradient_agreement(
        learner, state, batch.support_x, batch.support_y, batch.support_mask
    ).numpy()
    mask = batch.support_mask.numpy()
    assert mask.sum(axis=1).min() < 6  # padded points present
    for t in range(4):
        grads = []
        for k in range(6):
            context = tf.Variable(state.context[t : t + 1])
            x, y = batch.support_x[t : t + 1, k : k + 1], batch.support_y[t : t + 1, k : k + 1]
            with tf.GradientTape() as tape:
                y_hat = learner.predict(type(state)(context=context), x)
                loss = tf.reduce_sum(learner.task_loss(y_hat, y))
            grads.append(tape.gradient(loss, context).numpy()[0] * mask[t, k])
        grads = np.array(grads)
        real = mask[t].sum()
        for k in range(6):
            if not mask[t, k]:
                np.testing.assert_array_equal(features[t, k], 0.0)
                continue
            others = (grads.sum(0) - grads[k]) / max(real - 1, 1)
            cosine = grads[k] @ others / (np.linalg.norm(grads[k]) * np.linalg.norm(others))
            relative = np.linalg.norm(grads[k]) / (np.linalg.norm(grads, axis=1).sum() / real)
            np.testing.assert_allclose(features[t, k], [cosine, relative], rtol=1e-4, atol=1e-5)


def test_features_follow_the_points_when_the_support_set_is_reordered():
    learner, batch = _learner(), _batch()
    state = _state(learner, 4)
    order = np.random.default_rng(0).permutation(6)
    args = (batch.support_x, batch.support_y, batch.support_mask)
    features = gradient_agreement(learner, state, *args).numpy()
    shuffled = gradient_agreement(
        learner, state, *(tf.gather(a, order, axis=1) for a in args)
    ).numpy()
    np.testing.assert_allclose(shuffled, features[:, order], rtol=1e-5, atol=1e-6)


def test_they_widen_the_loss_networks_input_and_stay_constants():
    plain = VIABLE(input_dim=1, output_dim=1, loss_network=SimpleLossNetwork)
    agreeing = VIABLE(input_dim=1, output_dim=1, loss_network=SimpleLossNetwork, features=AGREE)
    assert agreeing.feature_dim == plain.feature_dim + 2
    assert agreeing.hparams()["gradient_agreement"] is True
    learner, batch = _learner(), _batch()
    state = _state(learner, 4)
    with tf.GradientTape() as tape:
        tape.watch(state.context)
        features = gradient_agreement(
            learner, state, batch.support_x, batch.support_y, batch.support_mask
        )
    assert tape.gradient(features, state.context) is None
    # The learned loss still reaches phi (through y_hat and L_T) and trains end to end.
    loss, _ = learner.meta_loss(batch)
    assert np.isfinite(loss.numpy())


def test_refused_where_phi_is_not_all_that_adapts():
    with pytest.raises(ValueError, match="adapts a context phi"):
        MAMLVIABLE(input_dim=1, output_dim=1, loss_network=SimpleLossNetwork, features=AGREE)
