"""lab/loss_network_anatomy.py: the live-unit count of a loss network against a
direct computation of its hidden activations, a layer switched off counted as dead, and
the inner-loop table's steps as the learner's own adaptation takes them."""

import numpy as np
import pytest
import tensorflow as tf

from lab.loss_network_anatomy import inner_loop, live_units
from viable_tf.learners import CAVIA, VIABLE
from viable_tf.networks import RelationLossNetwork, SimpleLossNetwork
from viable_tf.tasks import TaskBatch

WAYS, SHOTS, QUERIES, DIM = 3, 2, 4, 6


def _batches(num=2, tasks=2):
    batches = []
    for i in range(num):
        seed = [7, i]
        labels = tf.tile(tf.range(WAYS), [SHOTS])
        query_labels = tf.tile(tf.range(WAYS), [QUERIES])
        batches.append(
            TaskBatch(
                support_x=tf.random.stateless_normal(
                    [tasks, WAYS * SHOTS, DIM], seed, alg="philox"
                ),
                support_y=tf.tile(labels[None], [tasks, 1]),
                support_mask=tf.ones([tasks, WAYS * SHOTS], tf.bool),
                query_x=tf.random.stateless_normal(
                    [tasks, WAYS * QUERIES, DIM], [8, i], alg="philox"
                ),
                query_y=tf.tile(query_labels[None], [tasks, 1]),
            )
        )
    return batches


def _viable(loss_network, num_inner_steps=2):
    return VIABLE(
        input_dim=DIM,
        output_dim=WAYS,
        task_loss="cross_entropy",
        context_dim=4,
        num_inner_steps=num_inner_steps,
        loss_network=loss_network,
    )


def test_live_units_count_the_hidden_activations_of_every_point():
    learner = _viable(lambda: SimpleLossNetwork(hidden_units=(16, 8)))
    batches = _batches()
    recorded = []
    learner.loss_network.observe_hidden = lambda layer, h: recorded.append((layer, h.numpy()))
    for batch in batches:
        support = (batch.support_x, batch.support_y, batch.support_mask)
        learner.inner_loss(learner.start_state(*support), *support)
    learner.loss_network.observe_hidden = None
    layers = live_units(learner, batches)
    assert [entry["layer"] for entry in layers] == [1, 2]
    for entry in layers:
        on = np.concatenate(
            [h.reshape(-1, h.shape[-1]) > 0 for layer, h in recorded if layer == entry["layer"] - 1]
        )
        assert on.shape[0] == 2 * 2 * WAYS * SHOTS  # every point of every task of each batch
        assert entry["units"] == on.shape[1]
        assert entry["ever_on"] == int(on.any(0).sum())
        assert np.isclose(entry["mean_on"], on.mean())
    assert learner.loss_network.observe_hidden is None  # restored after counting


def test_a_switched_off_layer_counts_as_dead_and_passes_no_gradient():
    learner = _viable(lambda: RelationLossNetwork(hidden_units=(16, 16)))
    batches = _batches(num=1)
    live_units(learner, batches)  # builds the network
    layer = learner.loss_network.hidden_1
    layer.bias.assign(tf.fill(layer.bias.shape, -1e3))  # every unit of layer 2 off
    layers = live_units(learner, batches)
    assert layers[0]["ever_on"] > 0
    assert layers[1] == {
        "layer": 2,
        "units": 16,
        "ever_on": 0,
        "on_over_1pct": 0,
        "mean_on": 0.0,
    }
    rows = inner_loop(learner, batches, steps=1)
    np.testing.assert_array_equal(rows[:, 1], 0.0)  # no gradient in phi: the loss is flat


def test_the_inner_loop_table_takes_the_learners_own_steps():
    batches = _batches(num=1)
    batch = batches[0]
    support = (batch.support_x, batch.support_y, batch.support_mask)
    cavia = CAVIA(
        input_dim=DIM, output_dim=WAYS, task_loss="cross_entropy", context_dim=4, num_inner_steps=2
    )
    assert live_units(cavia, batches) == []  # no loss network to count
    rows = inner_loop(cavia, batches, steps=2)
    assert rows.shape == (3, 6)
    np.testing.assert_allclose(rows[:, 0], rows[:, 2], rtol=1e-6)  # CAVIA descends L_T itself
    np.testing.assert_allclose(rows[:, 4], 1.0, atol=1e-5)
    np.testing.assert_allclose(rows[:, 5], rows[:, 1], rtol=1e-5)  # ... so both steps are one
    adapted, losses = cavia.adapt(*support, return_inner_losses=True)
    np.testing.assert_allclose(rows[:2, 0], tf.reduce_mean(losses, 1).numpy(), rtol=1e-5)
    accuracy = tf.reduce_mean(
        tf.cast(
            tf.argmax(cavia.predict(adapted, batch.query_x), -1, tf.int32) == batch.query_y,
            tf.float32,
        )
    )
    assert np.isclose(rows[2, 3], accuracy.numpy(), atol=1e-6)


@pytest.mark.parametrize("activation", ["relu", "leaky_relu"])
def test_a_dead_relu_unit_gets_no_meta_gradient_and_a_leaky_one_does(activation):
    """Why relVIABLE's pair network loses its second layer end to end and does not get it
    back (docs/lab/omniglot/end_to_end.md): a ReLU unit that is off for every pair passes no
    meta-gradient to its own weights; a leaky ReLU unit, off alike, still does."""
    learner = _viable(lambda: RelationLossNetwork(hidden_units=(16, 16), activation=activation), 2)
    batch = _batches(num=1)[0]
    live = live_units(learner, [batch])[1]["ever_on"]  # (and builds the network)
    layer = learner.loss_network.hidden_1
    bias = layer.bias.numpy()
    bias[0] = -1e3  # unit 0 of the second layer: off for every pair
    layer.bias.assign(bias)
    assert live_units(learner, [batch])[1]["ever_on"] == live - 1
    with tf.GradientTape() as tape:
        loss, _ = learner.meta_loss(batch)
    # A piecewise-linear unit's bias reaches d Lhat / d phi only through which units are
    # on (docs/method.md §3.1): no meta-gradient at all; its incoming weights are what can move.
    kernel_grad = tape.gradient(loss, layer.kernel).numpy()
    column = np.abs(kernel_grad[:, 0]).sum()
    others = np.abs(kernel_grad[:, 1:]).sum()
    assert others > 0
    if activation == "relu":
        assert column == 0.0
    else:
        assert column > 0.0
