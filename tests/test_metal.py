"""MeTAL (learners/metal.py) against its definition: one inner step against a NumPy
computation of MeTAL's formulas (task state, standardised rows, affine adapter, support
and query terms, additive form), the base learner's step bit for bit with the learned
terms zeroed, the adapter the identity at initialisation, and the refusals."""

import dataclasses
import functools

import keras
import numpy as np
import pytest
import tensorflow as tf

from viable_tf.export.saved_model import AdaptThenPredict
from viable_tf.learners import (
    CAVIA,
    LEO,
    MAML,
    Learned,
    MAMLMeTAL,
    MeTAL,
    PrototypeHead,
    TermNetwork,
)
from viable_tf.learners.metal import TaskAdaptiveInnerLoss
from viable_tf.networks import keras_network
from viable_tf.networks.adaptive_loss import ModulatedTerm
from viable_tf.networks.keras_model import conv4_film
from viable_tf.networks.prediction import PredictionNetwork
from viable_tf.tasks import TaskBatch

B, K, Q, D, N, C = 2, 4, 3, 3, 3, 2


def _episode(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(B, K, D)).astype(np.float32)
    y = rng.integers(0, N, size=(B, K)).astype(np.int32)
    mask = np.ones((B, K), bool)
    mask[1, -1] = False  # one padded point
    query = rng.normal(size=(B, Q, D)).astype(np.float32)
    return x, y, mask, query


def _numpy_std(v):
    return (v - v.mean()) / (v.std(ddof=1) + 1e-12)


def _numpy_inner_loss(phi, x, y, mask, query, net, support_term, query_term):
    """MeTAL's inner loss of one task, in float64, from the formulas (docs/method.md §11)."""
    kx, kc, b0, k1, b1 = net

    def predict(inputs):
        return np.maximum(inputs @ kx + phi @ kc + b0, 0) @ k1 + b1

    def log_softmax(z):
        z = z - z.max(-1, keepdims=True)
        return z - np.log(np.exp(z).sum(-1, keepdims=True))

    logits = predict(x[mask])
    ce = -np.mean(log_softmax(logits)[np.arange(len(logits)), y[mask]])
    state = np.array([ce, phi.mean()])

    def term(weights, adapter, rows, adapter_input):
        a0, c0, a1, c1, scale_m, scale_o = adapter
        out = np.maximum(adapter_input @ a0 + c0, 0) @ a1 + c1
        m, o = out[:4], out[4:]
        w = [(1 + scale_m[i] * m[i]) * t + scale_o[i] * o[i] for i, t in enumerate(weights)]
        return np.mean(np.maximum(rows @ w[0] + w[1], 0) @ w[2] + w[3])

    one_hot = np.eye(N)[y[mask]]
    rows = np.concatenate([np.tile(state, (len(logits), 1)), logits, one_hot], axis=1)
    learned = term(*support_term, _numpy_std(rows), _numpy_std(state))
    q_logits = predict(query)
    log_p = log_softmax(q_logits)
    q_rows = np.concatenate(
        [np.full((len(query), 1), phi.mean()), q_logits, (np.exp(log_p) * log_p).sum(-1)[:, None]],
        axis=1,
    )
    q_rows = _numpy_std(q_rows)
    learned += term(*query_term, q_rows, q_rows.mean(0))
    return ce + learned


def _learner(**kw):
    keras.utils.set_random_seed(5)
    return MeTAL(
        input_dim=D,
        output_dim=N,
        context_dim=C,
        task_loss="cross_entropy",
        network=lambda **a: PredictionNetwork(hidden_units=(6,), **a),
        **kw,
    )


def _perturb_adapters(learner, rng):
    """a_i, b_i away from zero, so that the adapter modulates the terms."""
    for term in (learner.support_term, learner.query_network):
        for adapter in term.adapters:
            for w in adapter[-2:]:
                w.assign(rng.normal(size=w.shape).astype(np.float32))


def test_one_inner_step_matches_a_numpy_computation_of_the_formulas():
    learner = _learner(inner_lr=0.5)
    _perturb_adapters(learner, np.random.default_rng(1))
    x, y, mask, query = _episode()
    state, losses = learner.adapt(x, y, mask, query_x=query, return_inner_losses=True)
    net = [w.numpy().astype(np.float64) for w in learner.network.params]
    assert learner.network.param_names == (
        "kernel_x",
        "kernel_context",
        "bias_0",
        "kernel_1",
        "bias_1",
    )

    def weights(term):
        return (
            [w.numpy().astype(np.float64) for w in term.networks[0]],
            [w.numpy().astype(np.float64) for w in term.adapters[0]],
        )

    for b in range(B):
        args = (x[b], y[b], mask[b], query[b], net, weights(learner.support_term))
        args += (weights(learner.query_network),)
        phi = np.zeros(C)
        np.testing.assert_allclose(losses[0, b], _numpy_inner_loss(phi, *args), rtol=1e-5)
        grad = np.zeros(C)
        for c in range(C):  # central differences in float64
            step = np.eye(C)[c] * 1e-6
            grad[c] = (
                _numpy_inner_loss(phi + step, *args) - _numpy_inner_loss(phi - step, *args)
            ) / 2e-6
        np.testing.assert_allclose(state.context[b], phi - 0.5 * grad, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("base", ["cavia", "maml", "maml_prototypes"])
def test_with_the_learned_terms_zeroed_the_inner_step_is_the_base_learners(base):
    """Output layers at zero (a_i = b_i = 0 at the start): the terms are 0 and so is their
    gradient; the adapted state is the base learner's, bit for bit, over 3 steps."""
    kw = dict(input_dim=D, output_dim=N, task_loss="cross_entropy", num_inner_steps=3)
    if base == "cavia":
        kinds = (CAVIA, MeTAL)
        kw.update(context_dim=C)
    else:
        kinds = (MAML, MAMLMeTAL)
        kw.update(inner_lr=0.3, head=PrototypeHead() if base == "maml_prototypes" else None)
    keras.utils.set_random_seed(2)
    plain = kinds[0](**kw)
    keras.utils.set_random_seed(2)
    metal = kinds[1](**kw, term_network=TermNetwork(output_init="zeros"))
    for ours, theirs in zip(metal.network.params, plain.network.params, strict=True):
        ours.assign(theirs)
    x, y, mask, query = _episode(3)
    expected, expected_losses = plain.adapt(x, y, mask, return_inner_losses=True)
    got, losses = metal.adapt(x, y, mask, query_x=query, return_inner_losses=True)
    np.testing.assert_array_equal(losses, expected_losses)
    for a, b in zip(tf.nest.flatten(got), tf.nest.flatten(expected), strict=True):
        np.testing.assert_array_equal(a, b)


def test_the_adapter_is_the_identity_at_initialisation_and_modulates_once_trained():
    keras.utils.set_random_seed(0)
    term = ModulatedTerm(input_dim=5, num_networks=2, adapter_dim=3)
    state = tf.constant(np.random.default_rng(0).normal(size=(4, 3)), tf.float32)
    for n in range(2):
        for w, raw in zip(term.modulated(n, state), term.networks[n], strict=True):
            assert w.shape == (4, *raw.shape)
            np.testing.assert_array_equal(w, np.broadcast_to(raw.numpy(), w.shape))
    term.adapters[0][-2].assign(tf.ones_like(term.adapters[0][-2]))
    moved = term.modulated(0, state)[0]
    assert not np.allclose(moved[0], moved[1])  # per task, from its own state


def test_the_meta_gradient_reaches_the_adapter_scales_at_the_start():
    learner = _learner(num_inner_steps=2)
    x, y, mask, query = _episode(4)
    batch = TaskBatch(x, y, mask, query, np.zeros((B, Q), np.int32))
    scales = [
        a
        for t in (learner.support_term, learner.query_network)
        for ad in t.adapters
        for a in ad[-2:]
    ]
    with tf.GradientTape() as tape:
        loss, _ = learner.meta_loss(batch)
    for grad in tape.gradient(loss, scales):
        assert np.any(np.asarray(grad) != 0)


def test_without_the_query_term_the_queries_change_nothing():
    learner = _learner(query_term=False)
    x, y, mask, query = _episode()
    assert not learner.capabilities.reads_queries
    a = learner.adapt(x, y, mask).context
    b = learner.adapt(x, y, mask, query_x=query * 10).context
    np.testing.assert_array_equal(a, b)
    assert learner.method_name == "metal_support_cavia"


def test_the_query_term_reads_the_queries_and_refuses_without_them():
    learner = _learner()
    x, y, mask, query = _episode()
    moved = learner.adapt(x, y, mask, query_x=query * 3).context
    assert not np.allclose(learner.adapt(x, y, mask, query_x=query).context, moved)
    with pytest.raises(ValueError, match="pass query_x"):
        learner.adapt(x, y, mask)


def test_an_export_offers_no_signature_that_adapts_without_queries():
    module = AdaptThenPredict(_learner())
    assert sorted(module.signatures()) == ["serving_default", "serving_masked"]
    assert "adapt" in AdaptThenPredict(_learner(query_term=False)).signatures()
    x, y, mask, query = _episode()
    learner = module.learner
    served = module.serving_masked(x, y, mask, query)["logits"]
    expected = learner.predict(learner.adapt(x, y, mask, query_x=query), query)
    np.testing.assert_allclose(served, expected, rtol=1e-5, atol=1e-6)


def test_a_learner_with_no_adapted_parameters_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"^MeTAL's loss on cavia with 0 inner steps"):
        MeTAL(
            input_dim=D,
            output_dim=N,
            num_inner_steps=0,
            head=PrototypeHead(),
            task_loss="cross_entropy",
        )
    on_leo = type("LEOMeTAL", (TaskAdaptiveInnerLoss, LEO), {})
    with pytest.raises(ValueError, match=r"^MeTAL's loss on leo with \d+ inner steps"):
        on_leo(input_dim=D, output_dim=N, num_latents=4)


@pytest.mark.parametrize(
    "bad, message",
    [
        (dict(over="triples"), "over must be one of"),
        (dict(adapter="affine"), "adapter must be AffineAdapter"),
        (dict(term_network=(8,)), "term_network must be TermNetwork"),
        (dict(term_network=TermNetwork(activation="swish")), "activation must be one of"),
    ],
)
def test_bad_parts_are_refused_in_one_line(bad, message):
    with pytest.raises(ValueError, match=message) as error:
        _learner(**bad)
    # One line of ours (gin adds a line naming the configurable after it).
    assert message in str(error.value).splitlines()[0]


def test_names_and_hparams_say_which_parts():
    assert _learner(over="pairs").method_name == "relmetal_cavia"
    assert _learner(adapter=None, per_step=False).method_name == "metal_static_shared_cavia"
    hparams = _learner(learned_inner_lr=True).hparams()
    assert hparams["method"] == "metasgd_metal_cavia"
    assert dataclasses.asdict(TermNetwork()) == {
        "hidden_units": None,
        "activation": "relu",
        "init": "metal",
        "output_init": "init",
    }
    assert (hparams["over"], hparams["task_adaptive"], hparams["query_term"]) == (
        "points",
        True,
        True,
    )


def test_on_viables_rows_without_adapter_and_queries_the_term_is_a_relation_network():
    """rows='relviable' over pairs, no adapter, no query term: the inner loss is the mean
    over real pairs of an MLP on [f_j; f_k], f = (L_T, x, y_hat, y), as relVIABLE's."""
    learner = _learner(
        rows="relviable", over="pairs", adapter=None, query_term=False, form=Learned()
    )
    assert learner.method_name == "relviable"
    x, y, mask, _ = _episode()
    _, losses = learner.adapt(x, y, mask, return_inner_losses=True)
    kernel_0, bias_0, kernel_1, bias_1 = [w.numpy() for w in learner.support_term.networks[0]]
    logits = learner.predict(learner.start_state(x, y, mask), x).numpy()
    for b in range(B):
        real = mask[b]
        z = logits[b][real]
        log_p = z - z.max(-1, keepdims=True)
        log_p = log_p - np.log(np.exp(log_p).sum(-1, keepdims=True))
        point_loss = -log_p[np.arange(len(z)), y[b][real]]
        f = np.concatenate([point_loss[:, None], x[b][real], z, np.eye(N)[y[b][real]]], 1)
        pairs = np.concatenate(
            [np.repeat(f, len(f), 0), np.tile(f, (len(f), 1))], 1
        )  # every ordered pair (j, k)
        values = np.maximum(pairs @ kernel_0 + bias_0, 0) @ kernel_1 + bias_1
        np.testing.assert_allclose(losses[0, b], values.mean(), rtol=1e-5)


def test_names_on_viables_rows_say_what_is_on():
    assert _learner(rows="relviable", over="pairs").method_name == "relviable_adaptive_query"
    assert _learner(rows="relviable", adapter=None).method_name == "simviable_query"
    with pytest.raises(ValueError, match="rows must be one of"):
        _learner(rows="pixels")


def test_a_request_with_no_query_point_gets_an_empty_answer_on_a_conv_net():
    """The served signatures take any Q. With Q = 0 the query term is 0 and not run: on
    oneDNN, max-pooling's gradient over the empty query batch aborted the process (a
    request with no query drawing took viable-serve down). With queries, the served
    answer is the learner's own. (The term is TaskAdaptiveInnerLoss's, on either base.)"""
    keras.utils.set_random_seed(2)
    conv = keras_network(functools.partial(conv4_film, filters=4))
    learner = MAMLMeTAL(
        input_dim=784, output_dim=N, num_inner_steps=1, task_loss="cross_entropy", network=conv
    )
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(B, K, 784)).astype(np.float32)
    y = np.tile(np.arange(K) % N, (B, 1)).astype(np.int32)
    query = rng.uniform(size=(B, Q, 784)).astype(np.float32)
    module = AdaptThenPredict(learner)
    empty = module.serving_default(x, y, np.zeros((B, 0, 784), np.float32))
    assert empty["logits"].shape == (B, 0, N) and empty["classes"].shape == (B, 0)
    served = module.serving_default(x, y, query)["logits"]
    mask = np.ones((B, K), bool)
    expected = learner.predict(learner.adapt(x, y, mask, query_x=query), query)
    np.testing.assert_allclose(served, expected, rtol=1e-5, atol=1e-6)
