"""SteppedLinearHead: a linear output layer meta-learned as a shared start and copied per
task, so that CAVIA's inner loop can step it (`adapt_head=True`) as MAML steps its own."""

import functools

import keras
import numpy as np
import pytest
import tensorflow as tf
from inner_step_checks import assert_one_inner_step_is_a_hand_step

from viable_tf.export import export_saved_model
from viable_tf.learners import (
    CAVIA,
    VIABLE,
    Inputs,
    Labels,
    Outputs,
    PrototypeHead,
    Residual,
    SteppedLinearHead,
    TaskLoss,
)
from viable_tf.networks import PredictionNetwork, RelationLossNetwork, SimpleLossNetwork
from viable_tf.tasks import TaskBatch

N, D, C = 5, 12, 8


def _learner(adapt_head=False, learner=CAVIA, head=None, **kwargs):
    """A learner on a small MLP under `head` (a SteppedLinearHead unless given)."""
    keras.utils.set_random_seed(7)
    return learner(
        input_dim=D,
        output_dim=N,
        context_dim=C,
        num_inner_steps=1,
        task_loss="cross_entropy",
        head=SteppedLinearHead() if head is None else head,
        adapt_head=adapt_head,
        network=lambda **kw: PredictionNetwork(hidden_units=(24,), **kw),
        **kwargs,
    )


def _episodes(b=3, shots=2, queries=3, seed=0):
    rng = np.random.default_rng(seed)
    support_y = np.tile(np.repeat(np.arange(N), shots), (b, 1)).astype(np.int32)
    query_y = np.tile(np.repeat(np.arange(N), queries), (b, 1)).astype(np.int32)
    return TaskBatch(
        tf.constant(rng.normal(size=(b, N * shots, D)), tf.float32),
        tf.constant(support_y),
        tf.ones(support_y.shape, tf.bool),
        tf.constant(rng.normal(size=(b, N * queries, D)), tf.float32),
        tf.constant(query_y),
    )


def _features(learner, x, context):
    return learner.network(x, context).numpy()  # [B, P, H]


def test_without_adapt_head_it_is_a_shared_linear_output_layer_held_per_task():
    """The state's head is the shared (kernel, bias) for every task, left as it is by the
    inner loop; the logits are the features at the adapted phi times that layer."""
    learner = _learner()
    head = learner.head
    assert (
        learner.capabilities.adapted_parts == ("context",)
        and not learner.capabilities.adapts_context
    )
    assert head.kernel.shape == (24, N) and head.bias.shape == (N,)
    batch = _episodes()
    state = learner.adapt(batch.support_x, batch.support_y, batch.support_mask)
    kernel, bias = (t.numpy() for t in state.head)
    np.testing.assert_array_equal(kernel, np.broadcast_to(head.kernel.numpy(), (3, 24, N)))
    np.testing.assert_array_equal(bias, np.broadcast_to(head.bias.numpy(), (3, N)))
    assert np.any(state.context.numpy() != 0)  # phi moved
    features = _features(learner, batch.query_x, state.context)
    expected = features @ head.kernel.numpy() + head.bias.numpy()
    logits = learner.predict(state, batch.query_x).numpy()
    np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-5)


def test_with_no_support_set_it_predicts_from_the_shared_start():
    learner = _learner(adapt_head=True)
    state = learner.initial_state(tf.constant(2))
    x = tf.random.stateless_normal([2, 4, D], seed=[1, 2], alg="philox")
    expected = _features(learner, x, tf.zeros([2, C])) @ learner.head.kernel.numpy()
    np.testing.assert_allclose(learner.predict(state, x), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("learner", [CAVIA, VIABLE])
def test_adapt_head_steps_each_tasks_copy_and_the_shared_start_gets_a_meta_gradient(learner):
    """adapt_head=True: one inner step moves phi and each task's copy of the layer by the
    inner loss's own gradient (a hand step gives the same), the copies part ways, and the
    meta-gradient reaches the shared start through them."""
    kwargs = {"loss_network": lambda: SimpleLossNetwork(hidden_units=(16,))}
    learner = _learner(adapt_head=True, learner=learner, **(kwargs if learner is VIABLE else {}))
    assert learner.capabilities.adapted_parts == ("context", "head")
    batch = _episodes()
    support = (batch.support_x, batch.support_y, batch.support_mask)
    adapted = assert_one_inner_step_is_a_hand_step(learner, support, every_part_moves=True)
    kernel = adapted.head[0].numpy()
    assert not np.allclose(kernel[0], kernel[1])  # each task its own layer
    with tf.GradientTape() as tape:
        meta_loss, _ = learner.meta_loss(batch)
    head_grads = tape.gradient(meta_loss, [learner.head.kernel, learner.head.bias])
    assert all(g is not None and np.any(g.numpy() != 0) for g in head_grads)


def test_it_is_gin_configurable_and_its_weights_are_the_learners():
    learner = _learner(adapt_head=True)
    names = [w.path for w in learner.trainable_weights]
    assert any(n.endswith("head_kernel") for n in names)
    assert any(n.endswith("head_bias") for n in names)
    assert learner.hparams()["head"] == "stepped_linear" and learner.hparams()["adapt_head"]


def test_export_serves_the_adapted_layer(tmp_path):
    """The exported model answers as the learner does, the per-task layer stepped inside
    the served graph."""
    learner = _learner(adapt_head=True)
    path = export_saved_model(learner, str(tmp_path / "stepped"))
    loaded = tf.saved_model.load(path)
    batch = _episodes(b=2)
    out = loaded.signatures["serving_default"](
        support_x=batch.support_x, support_y=batch.support_y, query_x=batch.query_x
    )
    state = learner.adapt(batch.support_x, batch.support_y, batch.support_mask)
    expected = learner.predict(state, batch.query_x).numpy()
    np.testing.assert_allclose(out["logits"], expected, rtol=1e-4, atol=1e-5)


def test_a_heads_weights_are_checkpointed_and_exported_with_the_learner(tmp_path):
    """A learned temperature and a stepped layer's start are the learner's attributes:
    a checkpoint holds them under the learner's names (the temperature's as before heads
    were objects) and restores them, and an export serves them."""
    learned_temperature = functools.partial(PrototypeHead, temperature=3.0, learn_temperature=True)
    for make, names in (  # a head holds its learner's weight: a new one for each learner
        (lambda: _learner(head=learned_temperature()), ["learner/temperature"]),
        (lambda: _learner(adapt_head=True), ["learner/head_kernel", "learner/head_bias"]),
    ):
        learner = make()
        for weight in learner.trainable_weights:
            weight.assign_add(tf.fill(weight.shape, 0.25))  # away from the initial values
        path = tf.train.Checkpoint(learner=learner).write(str(tmp_path / learner.head.name))
        saved = [name for name, _ in tf.train.list_variables(path)]
        for name in names:
            assert f"{name}/.ATTRIBUTES/VARIABLE_VALUE" in saved
        fresh = make()
        tf.train.Checkpoint(learner=fresh).read(path).assert_consumed()
        for a, b in zip(learner.trainable_weights, fresh.trainable_weights, strict=True):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
        export = export_saved_model(learner, str(tmp_path / f"export_{learner.head.name}"))
        assert tf.saved_model.load(export).signatures["serving_default"] is not None


def test_relviable_under_a_per_task_head_sees_the_features_the_head_maps():
    """Inputs(source='penultimate') under a per-task head: the network ends at its features,
    and the pair network sees them at the current phi beside the head's logits; the
    pair loss is order-invariant and a padded point takes part in no pair."""
    learner = _learner(
        adapt_head=True,
        learner=VIABLE,
        form=Residual(),
        features=[TaskLoss(), Outputs(), Labels(), Inputs(source="penultimate")],
        loss_network=lambda: RelationLossNetwork(hidden_units=(16, 16), activation="tanh"),
    )
    assert learner.feature_dim == 1 + N + N + 24  # L_T, logits, one-hot, h
    batch = _episodes(b=1, shots=1)
    support = (batch.support_x, batch.support_y, batch.support_mask)
    state = learner.start_state(*support)
    state = state.replace(context=tf.random.stateless_normal([1, C], seed=[3, 4], alg="philox"))
    loss = learner.inner_loss(state, *support).numpy()
    order = [3, 0, 4, 1, 2]
    shuffled = learner.inner_loss(
        state, *(tf.gather(t, order, axis=1) for t in support[:2]), batch.support_mask
    )
    np.testing.assert_allclose(shuffled.numpy(), loss, rtol=1e-5)
    padded = learner.inner_loss(
        state,
        tf.concat([batch.support_x, tf.fill([1, 1, D], 1e3)], axis=1),
        tf.concat([batch.support_y, [[0]]], axis=1),
        tf.concat([batch.support_mask, [[False]]], axis=1),
    )
    np.testing.assert_allclose(padded.numpy(), loss, rtol=1e-5)
    # The features are the network's own at phi: the learned loss's gradient reaches phi.
    with tf.GradientTape() as tape:
        tape.watch(state.context)
        total = tf.reduce_sum(learner.inner_loss(state, *support))
    assert np.abs(tape.gradient(total, state.context).numpy()).max() > 0
