"""The prototype head (head='prototypes'): per task the output layer starts at the
support set's class means in the network's feature space."""

import json

import grpc
import keras
import numpy as np
import pytest
import requests
import tensorflow as tf
from inner_step_checks import assert_one_inner_step_is_a_hand_step
from serving_harness import RunningServer, model_config

from serving.client import Client
from serving.server import ServerOptions
from viable_tf.export import export_saved_model
from viable_tf.learners import CAVIA, MAML, MAMLVIABLE, VIABLE, LinearHead, PrototypeHead
from viable_tf.learners.prototypes import EMPTY_CLASS_BIAS
from viable_tf.networks import (
    AttentionLossNetwork,
    Normalize,
    PredictionNetwork,
    RelationLossNetwork,
    SimpleLossNetwork,
    SkipInputs,
)
from viable_tf.tasks import TaskBatch

N, D = 5, 12


def _small(loss_network):
    return lambda: loss_network(hidden_units=(16,))


PROTOTYPE_LEARNERS = {
    "cavia": lambda **kw: CAVIA(context_dim=8, **kw),
    "maml": lambda **kw: MAML(inner_lr=0.1, **kw),
    "simviable": lambda **kw: VIABLE(context_dim=8, loss_network=_small(SimpleLossNetwork), **kw),
    "relviable": lambda **kw: VIABLE(context_dim=8, loss_network=_small(RelationLossNetwork), **kw),
    "attviable": lambda **kw: VIABLE(
        context_dim=8, loss_network=lambda: AttentionLossNetwork(width=16), **kw
    ),
    "maml_simviable": lambda **kw: MAMLVIABLE(
        inner_lr=0.1, loss_network=_small(SimpleLossNetwork), **kw
    ),
    "maml_relviable": lambda **kw: MAMLVIABLE(
        inner_lr=0.1, loss_network=_small(RelationLossNetwork), **kw
    ),
}


def _learner(name, num_inner_steps=2, **kwargs):
    keras.utils.set_random_seed(4)
    return PROTOTYPE_LEARNERS[name](
        input_dim=D,
        output_dim=N,
        num_inner_steps=num_inner_steps,
        task_loss="cross_entropy",
        head=PrototypeHead(),
        network=lambda **kw: PredictionNetwork(hidden_units=(24,), **kw),
        **kwargs,
    )


def _episodes(b=3, shots=2, queries=3, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(b, N, D))
    support_y = np.tile(np.repeat(np.arange(N), shots), (b, 1)).astype(np.int32)
    query_y = np.tile(np.repeat(np.arange(N), queries), (b, 1)).astype(np.int32)
    take = lambda y: np.take_along_axis(centres, y[..., None], 1)  # noqa: E731
    support_x = take(support_y) + 0.3 * rng.normal(size=(b, N * shots, D))
    query_x = take(query_y) + 0.3 * rng.normal(size=(b, N * queries, D))
    return TaskBatch(
        tf.constant(support_x, tf.float32),
        tf.constant(support_y),
        tf.ones(support_y.shape, tf.bool),
        tf.constant(query_x, tf.float32),
        tf.constant(query_y),
    )


def _features(learner, x):
    """The penultimate features the head starts from (phi_0 = 0; MAML: theta)."""
    if isinstance(learner, CAVIA):
        return learner.network(x, tf.zeros([x.shape[0], learner.context_dim])).numpy()
    return learner.network.forward(learner.network.params, x).numpy()


@pytest.fixture(params=sorted(PROTOTYPE_LEARNERS))
def name(request):
    return request.param


def test_zero_inner_steps_predict_the_nearest_class_mean(name):
    """Before any inner step the prediction is the nearest class mean of the support
    features (squared Euclidean), exactly, and the logits are ||g||^2 - ||g - mu_c||^2."""
    learner = _learner(name, num_inner_steps=0)
    batch = _episodes()
    state = learner.adapt(batch.support_x, batch.support_y, batch.support_mask)
    logits = learner.predict(state, batch.query_x).numpy()  # [B, Q, N]
    support, query = _features(learner, batch.support_x), _features(learner, batch.query_x)
    labels = batch.support_y.numpy()
    means = np.stack(
        [[s[y == c].mean(0) for c in range(N)] for s, y in zip(support, labels, strict=True)]
    )
    distances = ((query[:, :, None, :] - means[:, None, :, :]) ** 2).sum(-1)  # [B, Q, N]
    np.testing.assert_array_equal(logits.argmax(-1), distances.argmin(-1))
    expected = (query**2).sum(-1)[..., None] - distances
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-3 * np.abs(expected).max())


def test_padded_points_change_nothing(name):
    learner = _learner(name)
    batch = _episodes()
    pad = 4
    padded = TaskBatch(
        tf.concat([batch.support_x, tf.fill([3, pad, D], 1e6)], 1),
        tf.concat([batch.support_y, tf.constant([[0, 4, 2, 4]] * 3, tf.int32)], 1),
        tf.concat([batch.support_mask, tf.zeros([3, pad], tf.bool)], 1),
        batch.query_x,
        batch.query_y,
    )
    clean, dirty = learner.meta_loss(batch)[0], learner.meta_loss(padded)[0]
    np.testing.assert_allclose(dirty, clean, rtol=1e-5)


def test_the_meta_gradient_flows_through_the_class_means(name):
    """With zero inner steps the query loss reaches theta only through the features and
    the means they make: every weight of the network gets a meta-gradient (but the
    context kernel, which multiplies phi_0 = 0), and the network has no output layer
    of its own (the head is per task)."""
    learner = _learner(name, num_inner_steps=0)
    params = learner.network.params
    with tf.GradientTape() as tape:
        loss, _ = learner.meta_loss(_episodes())
    grads = tape.gradient(loss, params)
    assert len(params) == 2 + (0 if "maml" in name else 1)  # kernel_x, (kernel_context), bias
    for param, grad in zip(params, grads, strict=True):
        if "kernel_context" in param.path:
            assert grad is None or not np.any(grad.numpy()), param.path
        else:
            assert grad is not None and np.any(grad.numpy() != 0), param.path
    assert learner.hparams()["head"] == "prototypes"


def test_the_inner_loop_adapts_what_the_learner_adapts(name):
    learner = _learner(name, num_inner_steps=1)
    batch = _episodes()
    start = learner.start_state(batch.support_x, batch.support_y, batch.support_mask)
    adapted = learner.adapt(batch.support_x, batch.support_y, batch.support_mask)
    moved = [
        not np.allclose(a, s)
        for a, s in zip(tf.nest.flatten(adapted), tf.nest.flatten(start), strict=True)
    ]
    if "maml" in name:  # every weight, the head included
        assert all(moved)
    else:  # CAVIA and VIABLE: phi only; the head as initialised from phi_0
        assert moved == [True, False, False] and not learner.capabilities.adapts_context
        assert learner.capabilities.adapted_parts == ("context",)


@pytest.mark.parametrize("name", ["cavia", "simviable"])
def test_adapt_head_steps_the_class_means_with_phi(name):
    """CAVIA(adapt_head=True): the inner loop steps phi and the head's (kernel, bias)
    by the same rate, each by the inner loss's own gradient; the step is the one a hand
    step gives."""
    learner = _learner(name, num_inner_steps=1, adapt_head=True)
    assert (
        learner.capabilities.adapted_parts == ("context", "head")
        and learner.hparams()["adapt_head"]
    )
    batch = _episodes()
    support = (batch.support_x, batch.support_y, batch.support_mask)
    assert_one_inner_step_is_a_hand_step(learner, support, every_part_moves=True)


def test_adapt_head_needs_a_per_task_head():
    with pytest.raises(ValueError, match="adapt_head=True steps a per-task head"):
        CAVIA(input_dim=2, output_dim=3, task_loss="cross_entropy", adapt_head=True)


def test_an_empty_class_is_never_predicted_and_nothing_is_nan():
    learner = _learner("relviable")
    batch = _episodes(b=2)
    mask = batch.support_mask.numpy()
    mask[0, batch.support_y.numpy()[0] == 3] = False  # task 0 has no real point of class 3
    state = learner.adapt(batch.support_x, batch.support_y, tf.constant(mask))
    assert all(np.all(np.isfinite(s)) for s in tf.nest.flatten(state))
    np.testing.assert_array_equal(state.head[1][0, 3], EMPTY_CLASS_BIAS)
    logits = learner.predict(state, batch.query_x)
    probabilities = tf.nn.softmax(logits).numpy()
    assert np.all(np.isfinite(probabilities))
    assert np.all(probabilities[0, :, 3] == 0) and np.all(logits.numpy().argmax(-1)[0] != 3)
    assert np.any(logits.numpy().argmax(-1)[1] == 3)  # task 1 still has class 3


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: CAVIA(input_dim=1, output_dim=1, head=PrototypeHead()),
            "task_loss='cross_entropy'",
        ),
        (
            lambda: MAML(input_dim=2, output_dim=3, task_loss="cross_entropy", head="prototypes"),
            r"head must be a Head .*; got 'prototypes'",
        ),
        (
            lambda: CAVIA(
                input_dim=2,
                output_dim=3,
                task_loss="cross_entropy",
                head=PrototypeHead(),
                network=lambda **kw: PredictionNetwork(hidden_units=(), **kw),
            ),
            "needs a hidden layer",
        ),
    ],
)
def test_bad_head_configurations(make, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        make()


def test_export_serves_the_prototype_head_and_refuses_an_empty_class(tmp_path):
    """serving_default answers as the learner does; a support set without a class is one
    INVALID_ARGUMENT (gRPC) / 400 (REST) naming the class, from the server and from the
    graph alike (the official server runs the graph's check)."""
    learner = _learner("cavia")
    base = str(tmp_path / "proto")
    path = export_saved_model(learner, base)
    loaded = tf.saved_model.load(path)
    assert sorted(loaded.signatures) == ["serving_default", "serving_masked"]
    batch = _episodes(b=2)
    out = loaded.signatures["serving_default"](
        support_x=batch.support_x, support_y=batch.support_y, query_x=batch.query_x
    )
    state = learner.adapt(batch.support_x, batch.support_y, batch.support_mask)
    np.testing.assert_allclose(out["logits"], learner.predict(state, batch.query_x), atol=1e-4)
    labels = batch.support_y.numpy()
    labels[1, labels[1] == 2] = 1  # task 1: no point of class 2
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"of every class 0\.\.4"):
        loaded.signatures["serving_default"](
            support_x=batch.support_x, support_y=tf.constant(labels), query_x=batch.query_x
        )
    running = RunningServer(
        ServerOptions(models=[model_config("proto", base)], port=0, rest_api_port=0)
    )
    client = Client(running.grpc_target)
    try:
        good = client.predict(batch.support_x, batch.support_y, batch.query_x, model_name="proto")
        np.testing.assert_allclose(good["logits"], out["logits"], atol=1e-5)
        with pytest.raises(grpc.RpcError) as info:
            client.predict(batch.support_x, labels, batch.query_x, model_name="proto")
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        expected = "of every class 0..4 (this model's output layer starts at each class's "
        expected += "support mean): class 2 has none in task 1"
        assert expected in info.value.details()
        body = {
            "inputs": {
                "support_x": batch.support_x.numpy().tolist(),
                "support_y": labels.tolist(),
                "query_x": batch.query_x.numpy().tolist(),
            }
        }
        response = requests.post(
            f"{running.rest_url}/v1/models/proto:predict", data=json.dumps(body), timeout=60
        )
        assert response.status_code == 400 and expected in response.json()["error"]
    finally:
        client.close()
        running.stop()


@pytest.mark.parametrize("name", ["cavia", "maml_simviable"])
def test_skip_inputs_start_the_head_at_the_inputs_class_means(name):
    """With SkipInputs the features are [x; s relu(h)], s = 1e-3 at first: before any
    inner step the prediction is the nearest class mean of the inputs themselves (the
    reference without meta-learning), and s gets a meta-gradient."""
    keras.utils.set_random_seed(4)
    learner = PROTOTYPE_LEARNERS[name](
        input_dim=D,
        output_dim=N,
        num_inner_steps=0,
        task_loss="cross_entropy",
        head=PrototypeHead(),
        network=lambda **kw: PredictionNetwork(hidden_units=(24,), features=[SkipInputs()], **kw),
    )
    batch = _episodes()
    assert learner.network.feature_dim == D + 24
    with tf.GradientTape() as tape:
        state = learner.adapt(batch.support_x, batch.support_y, batch.support_mask)
        logits = learner.predict(state, batch.query_x)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(batch.query_y, logits))
    x, y, q = batch.support_x.numpy(), batch.support_y.numpy(), batch.query_x.numpy()
    means = np.stack([[s[t == c].mean(0) for c in range(N)] for s, t in zip(x, y, strict=True)])
    nearest = (((q[:, :, None, :] - means[:, None]) ** 2).sum(-1)).argmin(-1)
    np.testing.assert_array_equal(logits.numpy().argmax(-1), nearest)
    (grad,) = tape.gradient(loss, [learner.network.feature_scale])
    assert grad is not None and np.all(grad.numpy() != 0)
    with pytest.raises(
        ValueError,
        match=r"features \[SkipInputs\(context_scaled=False\)\] are for a network without",
    ):
        PredictionNetwork(input_dim=2, output_dim=3, context_dim=0, features=[SkipInputs()])


@pytest.mark.parametrize("name", ["cavia", "maml"])
def test_normalized_features_make_a_cosine_head_that_starts_at_the_normalized_class_means(name):
    """Normalize() l2-normalises the features: after SkipInputs() and with zero inner
    steps the prediction is the nearest class mean of the l2-normalised inputs, and the
    logits (before the temperature) are bounded: squared distances of unit vectors lie
    in [0, 4], so |logit| <= 4 + 1 = 5 whatever the inputs' scale."""
    keras.utils.set_random_seed(5)
    learner = PROTOTYPE_LEARNERS[name](
        input_dim=D,
        output_dim=N,
        num_inner_steps=0,
        task_loss="cross_entropy",
        head=PrototypeHead(),
        network=lambda **kw: PredictionNetwork(
            hidden_units=(24,), features=[SkipInputs(), Normalize()], **kw
        ),
    )
    batch = _episodes()
    scale = 100.0  # unnormalised features would give logits of order scale^2
    state = learner.adapt(scale * batch.support_x, batch.support_y, batch.support_mask)
    logits = learner.predict(state, scale * batch.query_x).numpy()
    assert np.abs(logits).max() <= 5.0 + 1e-4
    # The skip scale is 1e-3, so the features are the normalised inputs up to ~1e-3.
    x, y, q = (t.numpy() for t in (batch.support_x, batch.support_y, batch.query_x))
    x = x / np.linalg.norm(x, axis=-1, keepdims=True)
    q = q / np.linalg.norm(q, axis=-1, keepdims=True)
    means = np.stack([[s[t == c].mean(0) for c in range(N)] for s, t in zip(x, y, strict=True)])
    distances = ((q[:, :, None, :] - means[:, None]) ** 2).sum(-1)
    nearest = distances.argmin(-1)
    ordered = np.sort(distances, axis=-1)
    clear = ordered[..., 1] - ordered[..., 0] > 1e-2  # ties within the skip's 1e-3 excluded
    assert clear.mean() > 0.9
    np.testing.assert_array_equal(logits.argmax(-1)[clear], nearest[clear])
    with pytest.raises(ValueError, match=r"features \[Normalize\(\)\] are for a network without"):
        PredictionNetwork(input_dim=2, output_dim=3, context_dim=0, features=[Normalize()])


def test_the_context_scales_the_skipped_inputs_per_task():
    """SkipInputs(context_scaled=True): the features are [x * (1 + phi W_s); s relu(h)]. At
    phi_0 = 0 they are the features without it, exactly (same weights); at another phi
    they match NumPy, per task weights (MAML's form) too; CAVIA's inner loop moves phi
    and so the predictions, and W_s gets a meta-gradient."""
    keras.utils.set_random_seed(6)
    kw = dict(input_dim=D, output_dim=N, context_dim=8, hidden_units=(24,), output_layer=False)
    scaled = PredictionNetwork(features=[SkipInputs(context_scaled=True), Normalize()], **kw)
    plain = PredictionNetwork(features=[SkipInputs(), Normalize()], **kw)
    for weight, source in zip(plain.params, scaled.params, strict=False):
        weight.assign(source)
    batch = _episodes()
    x = batch.support_x
    zero = tf.zeros([x.shape[0], 8])
    np.testing.assert_array_equal(scaled(x, zero).numpy(), plain(x, zero).numpy())
    phi = np.random.default_rng(1).normal(size=(x.shape[0], 8)).astype("float32")
    raw = PredictionNetwork(features=[SkipInputs(context_scaled=True)], **kw)
    for weight, source in zip(raw.params, scaled.params, strict=True):
        weight.assign(source)
    gamma = 1.0 + phi @ scaled.kernel_input_scale.numpy()  # [B, D]
    got = raw(x, tf.constant(phi)).numpy()
    np.testing.assert_allclose(got[..., :D], x.numpy() * gamma[:, None, :], rtol=1e-5, atol=1e-6)
    hidden = PredictionNetwork(features=[SkipInputs()], **kw)
    for weight, source in zip(hidden.params, raw.params, strict=False):
        weight.assign(source)
    np.testing.assert_array_equal(got[..., D:], hidden(x, tf.constant(phi)).numpy()[..., D:])
    per_task = [tf.repeat(tf.convert_to_tensor(w)[None], x.shape[0], 0) for w in raw.params]
    np.testing.assert_allclose(
        raw.forward(per_task, x, tf.constant(phi)).numpy(), got, rtol=1e-5, atol=1e-6
    )

    learner = CAVIA(
        input_dim=D,
        output_dim=N,
        context_dim=8,
        num_inner_steps=2,
        task_loss="cross_entropy",
        head=PrototypeHead(temperature=0.1),
        network=lambda **k: PredictionNetwork(
            hidden_units=(24,),
            features=[SkipInputs(context_scaled=True), Normalize()],
            **k,
        ),
    )
    with tf.GradientTape() as tape:
        state = learner.adapt(batch.support_x, batch.support_y, batch.support_mask)
        logits = learner.predict(state, batch.query_x)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(batch.query_y, logits))
    start = learner.start_state(batch.support_x, batch.support_y, batch.support_mask)
    assert np.abs(state.context.numpy()).max() > 1e-3  # phi moved
    assert np.abs(logits.numpy() - learner.predict(start, batch.query_x).numpy()).max() > 1e-4
    (grad,) = tape.gradient(loss, [learner.network.kernel_input_scale])
    assert grad is not None and np.abs(grad.numpy()).max() > 0
    with pytest.raises(
        ValueError, match=r"context_scaled=True\) scales the skipped.*context_dim=0"
    ):
        PredictionNetwork(features=[SkipInputs(context_scaled=True)], **{**kw, "context_dim": 0})
    for bad in ([SkipInputs(), SkipInputs(context_scaled=True)], [Normalize(), Normalize()]):
        with pytest.raises(ValueError, match="each feature part at most once"):
            PredictionNetwork(features=bad, **kw)
    with pytest.raises(ValueError, match="features must be SkipInputs or Normalize parts"):
        PredictionNetwork(features=["normalize"], **kw)


def test_a_learned_head_temperature_divides_the_logits_and_is_meta_learned():
    keras.utils.set_random_seed(4)
    common = dict(
        input_dim=D,
        output_dim=N,
        context_dim=8,
        num_inner_steps=1,
        task_loss="cross_entropy",
        network=lambda **kw: PredictionNetwork(hidden_units=(24,), **kw),
    )
    plain = CAVIA(head=PrototypeHead(), **common)
    keras.utils.set_random_seed(4)
    warm = CAVIA(head=PrototypeHead(temperature=10.0, learn_temperature=True), **common)
    batch = _episodes()
    assert "log_head_temperature" in [v.name for v in warm.trainable_variables]
    start = [learner.start_state(*batch[:3]) for learner in (plain, warm)]
    np.testing.assert_allclose(
        warm.predict(start[1], batch.query_x),
        plain.predict(start[0], batch.query_x) / 10.0,
        rtol=1e-5,
    )
    with tf.GradientTape() as tape:
        loss, _ = warm.meta_loss(batch)
    (grad,) = tape.gradient(loss, [warm.head.log_temperature])
    assert grad is not None and float(grad) != 0.0
    # A softer softmax: the support loss is no longer saturated near 0 at the start.
    _, losses = warm.adapt(*batch[:3], return_inner_losses=True)
    assert float(losses[0].numpy().mean()) > float(
        plain.adapt(*batch[:3], return_inner_losses=True)[1][0].numpy().mean()
    )
    with pytest.raises(ValueError, match=r"PrototypeHead\.temperature must be > 0, got 0"):
        PrototypeHead(temperature=0.0)


@pytest.mark.parametrize("name", ["cavia", "relviable", "maml"])
def test_a_head_object_carries_its_options_into_the_learner(name):
    """`head=PrototypeHead(...)` (gin: `@PrototypeHead()`): its learned temperature is a
    weight of the learner, and the learner's hyper-parameters report the head's."""
    options = dict(temperature=0.5, learn_temperature=True, prototype="median")
    learner = _learner_with(name, head=PrototypeHead(**options))
    assert any("log_head_temperature" in v.name for v in learner.weights)
    batch = _episodes()
    logits = learner.predict(learner.adapt(*batch[:3]), batch.query_x).numpy()
    assert logits.shape == (3, batch.query_x.shape[1], N) and np.all(np.isfinite(logits))
    assert learner.hparams()["head"] == "prototypes"
    assert learner.hparams()["prototype"] == "median"


def test_a_head_is_an_object_that_checks_the_task_loss():
    with pytest.raises(ValueError, match=r"head must be a Head .*; got 'prototypes'"):
        CAVIA(input_dim=1, output_dim=1, task_loss="cross_entropy", head="prototypes")
    with pytest.raises(ValueError, match="task_loss='cross_entropy'"):
        CAVIA(input_dim=1, output_dim=1, head=PrototypeHead())
    with pytest.raises(ValueError, match=r"PrototypeHead\.temperature must be > 0"):
        PrototypeHead(temperature=0.0)
    plain = CAVIA(input_dim=1, output_dim=1)
    assert (
        plain.head.name == "linear"
        and plain.capabilities.adapts_context
        and plain.capabilities.every_class_reason is None
    )
    assert CAVIA(input_dim=1, output_dim=1, head=LinearHead()).head.name == "linear"


def _learner_with(name, **head):
    keras.utils.set_random_seed(4)
    return PROTOTYPE_LEARNERS[name](
        input_dim=D,
        output_dim=N,
        num_inner_steps=2,
        task_loss="cross_entropy",
        network=lambda **kw: PredictionNetwork(hidden_units=(24,), **kw),
        **head,
    )
