"""The paper's comparators: Meta-SGD's learned step sizes, Matching Networks' attention,
MetaOptNet's ridge and SVM output layers. Expected values come from NumPy and scipy,
independently of the TensorFlow code."""

import functools
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from scipy import optimize

from viable_tf.datasets import omniglot
from viable_tf.learners import CAVIA, MAML, VIABLE, MatchingHead, RidgeHead, SVMHead
from viable_tf.learners.metaoptnet import (
    crammer_singer_dual,
    project_capped_zero_sum,
    ridge_weights,
)
from viable_tf.networks import SimpleLossNetwork, keras_network, omniglot_encoder
from viable_tf.networks.keras_model import conv4_film
from viable_tf.tasks import SineTasks, seed_for

RNG = np.random.default_rng(7)


# -- MetaOptNet: the solvers ---------------------------------------------------------------


def test_ridge_weights_are_the_primal_closed_form():
    x = RNG.normal(size=(2, 6, 4)).astype(np.float32)  # [B, K, H]
    y = np.eye(3, dtype=np.float32)[RNG.integers(0, 3, size=(2, 6))]  # [B, K, N]
    w = ridge_weights(tf.constant(x), tf.constant(y), 0.5).numpy()
    for b in range(2):  # (X^T X + l2 I)^-1 X^T Y, the H x H form
        expected = np.linalg.solve(x[b].T @ x[b] + 0.5 * np.eye(4), x[b].T @ y[b])
        np.testing.assert_allclose(w[b], expected, rtol=1e-4, atol=1e-5)


def test_a_padded_point_changes_no_solved_head():
    features = RNG.normal(size=(1, 5, 4)).astype(np.float32)
    labels = np.array([[0, 1, 2, 0, 1]], np.int32)
    mask = np.array([[True] * 4 + [False]])
    for head in (RidgeHead(l2=1.0, learn_l2=False), SVMHead(num_iterations=200)):
        head.scale = 1.0
        (with_pad,) = head.start(lambda: tf.constant(features), labels, mask, 3)
        (without,) = head.start(lambda: tf.constant(features[:, :4]), labels[:, :4], mask[:, :4], 3)
        np.testing.assert_allclose(with_pad.numpy(), without.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cap", [1.0, 0.1])
def test_the_projection_is_the_nearest_point_under_the_caps_with_sum_zero(cap):
    values = RNG.normal(size=(20, 5))
    ceiling = cap * np.eye(5)[RNG.integers(0, 5, size=20)]  # the SVM's C [k = y_n]
    projected = project_capped_zero_sum(tf.constant(values), tf.constant(ceiling)).numpy()
    for v, top, p in zip(values, ceiling, projected, strict=True):
        found = optimize.minimize(
            lambda x, v=v: 0.5 * np.sum((x - v) ** 2),
            np.zeros(5),
            constraints=[{"type": "eq", "fun": np.sum}],
            bounds=[(None, t) for t in top],
            method="SLSQP",
            options={"ftol": 1e-12, "maxiter": 500},
        )
        np.testing.assert_allclose(p, found.x, atol=1e-5)
    # Values 1e-17 of the cap keep their digits (C - (C - x) would round them to 0), and a
    # row with no cap (a padded point) projects to zero.
    tiny = project_capped_zero_sum(
        tf.constant([[3e-18, -1e-18, -2e-18], [1.0, 2.0, 3.0]], tf.float64),
        tf.constant([[0.1, 0.0, 0.0], [0.0, 0.0, 0.0]], tf.float64),
    ).numpy()
    np.testing.assert_allclose(tiny[0], [3e-18, -1e-18, -2e-18], rtol=1e-12)
    np.testing.assert_array_equal(tiny[1], 0.0)


def _dual_objective(alpha, gram, one_hot, eps):
    return (
        0.5 * np.sum(alpha * (gram @ alpha))
        + 0.5 * eps * np.sum(alpha**2)
        - np.sum(alpha * one_hot)
    )


@pytest.mark.parametrize("c", [0.1, 1.0])
def test_the_svm_dual_matches_scipys_solution_of_the_same_qp(c):
    k, n, h, eps = 6, 3, 4, 1.0
    x = RNG.normal(size=(k, h))
    gram = x @ x.T
    labels = np.array([0, 1, 2, 0, 1, 2])
    one_hot = np.eye(n)[labels]
    alpha = crammer_singer_dual(
        tf.constant(gram[None], tf.float32),
        tf.constant(one_hot[None], tf.float32),
        tf.ones([1, k], tf.bool),
        c=c,
        eps=eps,
        num_iterations=400,
    ).numpy()[0]
    # The same QP, by scipy: alpha_nk <= C [k = y_n], sum_k alpha_nk = 0.
    found = optimize.minimize(
        lambda a: _dual_objective(a.reshape(k, n), gram, one_hot, eps),
        np.zeros(k * n),
        jac=lambda a: (gram @ a.reshape(k, n) + eps * a.reshape(k, n) - one_hot).ravel(),
        constraints=[{"type": "eq", "fun": lambda a: a.reshape(k, n).sum(1)}],
        bounds=[(None, c * one_hot.ravel()[i]) for i in range(k * n)],
        method="SLSQP",
        options={"ftol": 1e-14, "maxiter": 1000},
    )
    assert found.success, found.message
    np.testing.assert_allclose(alpha.ravel(), found.x, atol=2e-4)
    assert np.all(alpha <= c * one_hot + 1e-6) and np.allclose(alpha.sum(1), 0, atol=1e-5)


@pytest.mark.slow
def test_the_svm_head_separates_separable_classes_and_passes_gradients():
    x = tf.constant([[[2.0, 0.0], [0.0, 2.0], [-2.0, -2.0]]])  # [1, 3, 2]
    labels = tf.constant([[0, 1, 2]])
    head = SVMHead(c=10.0, num_iterations=300)
    head.scale = tf.Variable(1.0)
    with tf.GradientTape() as tape:
        tape.watch(x)
        state = head.start(lambda: x, labels, tf.ones([1, 3], tf.bool), 3)
        logits = head.apply(x, state)
        margin = tf.reduce_sum(logits * tf.one_hot(labels, 3))
    assert np.array_equal(tf.argmax(logits, -1).numpy(), [[0, 1, 2]])
    gradient = tape.gradient(margin, x)
    assert np.all(np.isfinite(gradient.numpy())) and np.abs(gradient.numpy()).max() > 0


@pytest.mark.parametrize(
    "make",
    [
        lambda n: SVMHead(num_iterations=100, normalize=n),
        lambda n: RidgeHead(learn_l2=False, normalize=n),
    ],
    ids=["svm", "ridge"],
)
def test_normalised_solved_heads_answer_alike_at_any_feature_scale(make):
    """`normalize`: the support and query features divided by their l2 norms, so the
    head's logits do not depend on the features' scale, where without it they do."""
    support = RNG.normal(size=(2, 6, 4)).astype(np.float32)
    labels = np.array([[0, 1, 2, 0, 1, 2]] * 2, np.int32)
    mask = np.array([[True] * 6, [True] * 5 + [False]])
    query = RNG.normal(size=(2, 3, 4)).astype(np.float32)

    def logits(normalize, support, query):
        head = make(normalize)
        head.scale = tf.Variable(1.0)
        state = head.start(lambda: tf.constant(support), labels, mask, 3)
        return head.apply(tf.constant(query), state).numpy()

    assert not np.allclose(
        logits(False, 1e3 * support, 1e3 * query), logits(False, support, query), rtol=1e-2
    )
    at_one = logits(True, support, query)
    for size in (1e-3, 1e3, 1e6):
        np.testing.assert_allclose(
            logits(True, size * support, size * query), at_one, rtol=1e-4, atol=1e-5
        )
    unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)  # noqa: E731
    # as if the features were the unit vectors themselves
    np.testing.assert_allclose(
        logits(False, unit(support), unit(query)), at_one, rtol=1e-4, atol=1e-5
    )


def test_heads_check_their_arguments():
    with pytest.raises(ValueError, match="l2 must be > 0"):
        RidgeHead(l2=0.0)
    with pytest.raises(ValueError, match="c > 0"):
        SVMHead(c=-1.0)
    with pytest.raises(ValueError, match="num_iterations"):
        SVMHead(num_iterations=0)
    with pytest.raises(ValueError, match="processing_steps"):
        MatchingHead(processing_steps=0)
    with pytest.raises(ValueError, match="cross_entropy"):
        CAVIA(input_dim=1, output_dim=1, head=MatchingHead())


# -- Matching Networks ---------------------------------------------------------------------


def test_matching_logits_give_the_attention_over_the_support_set_summed_per_class():
    support = RNG.normal(size=(1, 4, 3)).astype(np.float32)
    labels = np.array([[0, 1, 1, 2]], np.int32)
    query = RNG.normal(size=(1, 2, 3)).astype(np.float32)
    head = MatchingHead(temperature=0.5)
    state = head.start(lambda: tf.constant(support), labels, np.ones((1, 4), bool), 4)
    probabilities = tf.nn.softmax(head.apply(tf.constant(query), state)).numpy()[0]
    unit = lambda v: v / np.linalg.norm(v, axis=-1, keepdims=True)  # noqa: E731
    attention = np.exp(unit(query[0]) @ unit(support[0]).T / 0.5)  # [P, K]
    attention /= attention.sum(1, keepdims=True)
    expected = attention @ np.eye(4)[labels[0]]  # class 3 has no support point: 0
    np.testing.assert_allclose(probabilities, expected, rtol=1e-5, atol=1e-6)


def _fce_learner():
    keras.utils.set_random_seed(3)
    return CAVIA(
        input_dim=4,
        output_dim=3,
        context_dim=2,
        num_inner_steps=0,
        task_loss="cross_entropy",
        head=MatchingHead(full_context=True, processing_steps=2),
    )


def test_full_context_embeddings_read_the_whole_support_set_and_skip_padded_points():
    learner = _fce_learner()
    support = RNG.normal(size=(1, 4, 4)).astype(np.float32)
    labels = np.array([[0, 1, 2, 0]], np.int32)
    query = RNG.normal(size=(1, 2, 4)).astype(np.float32)
    mask = np.ones((1, 4), bool)
    logits = learner.predict(learner.adapt(support, labels, mask), query).numpy()
    # A padded point at the end changes nothing; a real one changes the embeddings.
    padded = np.concatenate([support, RNG.normal(size=(1, 1, 4)).astype(np.float32)], 1)
    labels5 = np.array([[0, 1, 2, 0, 1]], np.int32)
    with_pad = learner.predict(
        learner.adapt(padded, labels5, np.array([[True] * 4 + [False]])), query
    ).numpy()
    with_real = learner.predict(learner.adapt(padded, labels5, np.ones((1, 5), bool)), query)
    np.testing.assert_allclose(with_pad, logits, rtol=1e-5, atol=1e-6)
    assert np.abs(with_real.numpy() - logits).max() > 1e-4
    # The LSTMs' weights are the learner's: trained, checkpointed and exported with it.
    assert sum("lstm" in v.path for v in learner.trainable_variables) >= 9


# -- Meta-SGD ------------------------------------------------------------------------------


def test_meta_sgd_steps_each_context_number_at_its_own_learned_rate():
    keras.utils.set_random_seed(0)
    learner = CAVIA(input_dim=1, output_dim=1, context_dim=3, learned_inner_lr=True)
    (rates,) = learner.inner_lrs
    np.testing.assert_array_equal(rates.numpy(), [1.0, 1.0, 1.0])  # the shipped alpha
    rates.assign([0.5, 0.0, 2.0])
    batch = SineTasks().sample(seed_for(0, 0), 4)
    phi = tf.zeros([4, 3])
    with tf.GradientTape() as tape:
        tape.watch(phi)
        start = learner.initial_state(4).replace(context=phi)
        loss = tf.reduce_sum(learner.inner_loss(start, *_support(batch)))
    expected = -np.array([0.5, 0.0, 2.0]) * tape.gradient(loss, phi).numpy()
    with tf.GradientTape() as tape:
        state = learner.adapt(*_support(batch))
        query = tf.reduce_mean(learner.query_loss(batch, state))
    np.testing.assert_allclose(state.context.numpy(), expected, rtol=1e-5, atol=1e-7)
    assert np.abs(tape.gradient(query, rates).numpy()).max() > 0  # meta-learned


def _support(batch):
    return batch.support_x, batch.support_y, batch.support_mask


def test_meta_sgd_at_its_start_is_the_base_learner_and_maml_gets_a_rate_per_weight():
    batch = SineTasks().sample(seed_for(0, 1), 4)
    for make in (
        lambda **kw: CAVIA(input_dim=1, output_dim=1, **kw),
        lambda **kw: MAML(input_dim=1, output_dim=1, context_dim=2, **kw),
        lambda **kw: VIABLE(input_dim=1, output_dim=1, loss_network=SimpleLossNetwork, **kw),
    ):
        keras.utils.set_random_seed(1)
        plain = make()
        keras.utils.set_random_seed(1)
        learned = make(learned_inner_lr=True)  # the same draws: the rates are constants
        np.testing.assert_array_equal(
            learned.meta_loss(batch)[0].numpy(), plain.meta_loss(batch)[0].numpy()
        )
    maml = MAML(input_dim=1, output_dim=1, context_dim=2, learned_inner_lr=True)
    shapes = [tuple(r.shape) for r in maml.inner_lrs]
    assert shapes == [tuple(w.shape) for w in maml.network.params] + [(2,)]
    assert maml.hparams()["learned_inner_lr"] is True


def test_meta_sgd_rates_are_checkpointed_and_restored(tmp_path):
    """The learned rates are part of the learner's state: a trainer's checkpoint (best
    weights, resumption) holds them."""
    learner = MAML(input_dim=1, output_dim=1, context_dim=2, learned_inner_lr=True)
    for rate in learner.inner_lrs:
        rate.assign(tf.fill(rate.shape, 0.25))
    path = tf.train.Checkpoint(learner=learner).save(str(tmp_path / "ckpt"))
    names = [name for name, _ in tf.train.list_variables(path)]
    assert sum("inner_lr_" in name for name in names) == len(learner.inner_lrs)
    restored = MAML(input_dim=1, output_dim=1, context_dim=2, learned_inner_lr=True)
    tf.train.Checkpoint(learner=restored).restore(path).assert_existing_objects_matched()
    for rate in restored.inner_lrs:
        np.testing.assert_array_equal(rate.numpy(), np.full(rate.shape, 0.25, np.float32))


def test_meta_sgd_refuses_what_it_cannot_step():
    from viable_tf.learners import LEO, PrototypeHead

    with pytest.raises(ValueError, match="Meta-SGD"):
        MAML(
            input_dim=4,
            output_dim=3,
            task_loss="cross_entropy",
            head=PrototypeHead(),
            learned_inner_lr=True,
        )
    # LEO's latent and fine-tuning steps keep their own rates: it takes no such argument,
    # and a config binding one is refused as it is parsed.
    with pytest.raises(TypeError, match="learned_inner_lr"):
        LEO(input_dim=4, output_dim=3, task_loss="cross_entropy", learned_inner_lr=True)
    import gin

    with pytest.raises(ValueError, match="learned_inner_lr"):
        gin.parse_config("LEO.learned_inner_lr = True")
    gin.clear_config()


# -- every comparator in the learner contract, exported and served -------------------------


def _conv_learner(head=None, **kw):
    keras.utils.set_random_seed(0)
    options = {"head": head, "num_inner_steps": 0} if head is not None else {}
    return CAVIA(
        input_dim=784,
        output_dim=3,
        context_dim=4,
        task_loss="cross_entropy",
        network=keras_network(functools.partial(conv4_film, filters=4, blocks=2)),
        **options,
        **kw,
    )


#: Each comparator, and the outer learning rate at which it fits one episode in 20 steps
#: (a plain cosine attention kills the tiny conv's ReLUs at larger steps).
COMPARATORS = {
    "matching": (lambda: _conv_learner(MatchingHead()), 5e-3),
    "matching_fce": (
        lambda: _conv_learner(MatchingHead(full_context=True, processing_steps=2)),
        5e-3,
    ),
    "r2d2": (lambda: _conv_learner(RidgeHead()), 3e-2),
    "metaoptnet_svm": (lambda: _conv_learner(SVMHead(num_iterations=10)), 3e-2),
    "metasgd_cavia": (lambda: _conv_learner(learned_inner_lr=True), 3e-2),
}


def _drawings(rng, labels):
    """A drawing per label as read, [1, n, 105, 105, 1]: white (1), with a dark bar whose
    place says the class and random dark specks."""
    images = (rng.uniform(size=(1, len(labels), 105, 105, 1)) > 0.05).astype(np.float32)
    for i, label in enumerate(labels):
        images[0, i, 30 * label + 5 : 30 * label + 25, 20:85] = 0.0
    return images


def _pixels(drawings):
    """What the export makes of them, as the end-to-end episodes read them: [1, n, 784]
    strokes (1 on 0) at 28 x 28."""
    flat = omniglot_encoder.pixel_featurizer()(drawings.reshape(-1, 105, 105, 1))
    return tf.reshape(flat, [1, -1, 784])


def _episode():
    """One 3-way 2-shot episode of drawings: (support drawings, query drawings, batch)."""
    from viable_tf.tasks import TaskBatch

    rng = np.random.default_rng(0)
    labels = np.tile(np.arange(3, dtype=np.int32), 2)[None]  # [1, 6]
    query_y = np.array([[0, 1, 2, 1]], np.int32)
    support, query = _drawings(rng, labels[0]), _drawings(rng, query_y[0])
    mask = np.ones(labels.shape, bool)
    return support, query, TaskBatch(_pixels(support), labels, mask, _pixels(query), query_y)


@pytest.mark.float_sensitive  # a training outcome: CI checks it on the other float paths too
@pytest.mark.parametrize("name", sorted(COMPARATORS))
def test_each_comparator_fits_an_episode(name):
    """The contract: a few outer steps (Adam, as the Trainer steps) fit one episode."""
    make, learning_rate = COMPARATORS[name]
    learner = make()
    _, _, batch = _episode()
    optimizer = keras.optimizers.Adam(learning_rate)
    optimizer.build(learner.trainable_variables)

    @tf.function(autograph=False)
    def step():
        with tf.GradientTape() as tape:
            loss, _ = learner.meta_loss(batch)
        grads = tape.gradient(loss, learner.trainable_variables)
        optimizer.apply_gradients(zip(grads, learner.trainable_variables, strict=True))
        return loss

    losses = [float(step()) for _ in range(20)]
    # Fit: every query of the episode right, the loss well down (Matching Networks' plain
    # cosine softmax cannot go below about 0.55 here: the attention is a cosine over 1).
    state = learner.adapt(batch.support_x, batch.support_y, batch.support_mask)
    predicted = tf.argmax(learner.predict(state, batch.query_x), -1).numpy()
    np.testing.assert_array_equal(predicted, batch.query_y, err_msg=f"{name}: {losses}")
    assert losses[-1] < 0.75 * losses[0], (name, losses)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(COMPARATORS))
def test_each_comparator_exports_and_answers_as_the_learner(name, tmp_path):
    """serving_default and serving_png answer as the learner in memory (its weights after
    a meta-update, so that no weight is at its initial value), with standard ops only. Not
    a training outcome: the same on every float path, so run once."""
    from tensorflow.core.protobuf import saved_model_pb2
    from tensorflow.python.framework import op_def_registry

    from viable_tf.export import export_saved_model
    from viable_tf.export.pngs import encode_pngs

    make, learning_rate = COMPARATORS[name]
    learner = make()
    support, query, batch = _episode()
    labels, mask = batch.support_y, batch.support_mask
    with tf.GradientTape() as tape:
        loss, _ = learner.meta_loss(batch)
    grads = tape.gradient(loss, learner.trainable_variables)
    keras.optimizers.Adam(learning_rate).apply_gradients(
        zip(grads, learner.trainable_variables, strict=True)
    )
    path = export_saved_model(
        learner,
        str(tmp_path / name),
        featurizer=omniglot_encoder.pixel_featurizer(),
        normalize=False,
        input_shape=omniglot.IMAGE_SHAPE,
    )
    loaded = tf.saved_model.load(path)
    served = loaded.signatures["serving_default"](
        support_x=tf.constant(support), support_y=tf.constant(labels), query_x=tf.constant(query)
    )["logits"].numpy()
    state = learner.adapt(batch.support_x, labels, mask)
    expected = learner.predict(state, batch.query_x).numpy()
    np.testing.assert_allclose(served, expected, rtol=1e-4, atol=1e-5)
    as_pngs = loaded.signatures["serving_png"](
        support_png=tf.constant(encode_pngs(support)),
        support_y=tf.constant(labels),
        query_png=tf.constant(encode_pngs(query)),
    )["logits"].numpy()
    np.testing.assert_allclose(as_pngs, served, rtol=1e-4, atol=1e-5)
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        graph = saved_model_pb2.SavedModel.FromString(f.read()).meta_graphs[0].graph_def
    ops = {node.op for function in graph.library.function for node in function.node_def}
    ops -= {function.signature.name for function in graph.library.function}
    assert not {op for op in ops if op_def_registry.get(op) is None}  # standard ops only
    assert not ops & {"PyFunc", "EagerPyFunc", "XlaLaunch"}


@pytest.mark.parametrize("size", [1e-2, 1.0, 1e3, 1e4, 1e5, 1e8, 1e9])
def test_the_svm_dual_keeps_its_solution_whatever_the_features_scale(size):
    """The step is 1 / L, L ~ |x|^2: with features of a few thousand (as a conv net's
    grew while meta-training MetaOptNet-SVM), alpha is about 1e-8 of C, and in float32
    C - (C - alpha) is exactly 0, so w = 0, every logit equal and no meta-gradient; at
    1e8 (MetaOptNet-SVM's 5-way 5-shot run) alpha is 1e-17 of C, past float64 too. The
    projection never forms C - alpha: the classifier is the same at every scale."""
    x = tf.constant([[[2.0, 0.0], [0.0, 2.0], [-2.0, -2.0]]]) * size
    labels = tf.constant([[0, 1, 2]])
    head = SVMHead()  # the shipped c = 0.1, eps = 1, 50 iterations
    head.scale = tf.Variable(1.0)
    state = head.start(lambda: x, labels, tf.ones([1, 3], tf.bool), 3)
    logits = head.apply(x, state).numpy()
    assert np.abs(state[0].numpy()).max() > 0
    assert np.array_equal(np.argmax(logits, -1), [[0, 1, 2]])
