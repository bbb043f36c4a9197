"""End to end on images (docs/method.md §9): the rotated training classes, the learned loss that
starts flat, relVIABLE's pair network on penultimate features, the class-canonical
features, and a run's wall-clock across resumptions."""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from fake_omniglot import ALPHABETS, TRAIN_ALPHABETS, write_fake_omniglot

from viable_tf.learners import (
    CAVIA,
    MAMLVIABLE,
    VIABLE,
    AdaptedState,
    Inputs,
    Labels,
    MeTAL,
    Outputs,
    Residual,
    TaskLoss,
    TermNetwork,
)
from viable_tf.learners.loss_features import Support, canonical_logits
from viable_tf.networks import FiLM, RelationLossNetwork, SimpleLossNetwork, keras_network
from viable_tf.run_dir import RunDir
from viable_tf.training.checkpoints import TrainingCheckpoints, WallClock

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N, K, C = 3, 2, 6  # way, support points per task (one per class here: K = N below), context


def conv_film(input_dim, output_dim, context_dim):
    """A small conv-FiLM net on 8 x 8 images given as 64 numbers (conv4_film's shape)."""
    x, context = keras.Input((input_dim,)), keras.Input((context_dim,))
    h = keras.layers.Reshape((8, 8, 1))(x)
    for _ in range(2):
        h = keras.layers.Conv2D(8, 3, padding="same")(h)
        h = FiLM()([h, context])
        h = keras.layers.MaxPooling2D(2)(keras.layers.ReLU()(h))
    h = keras.layers.Flatten()(h)  # [N, 32]
    return keras.Model([x, context], keras.layers.Dense(output_dim)(h) if output_dim else h)


def _episode(b=2, seed=0):
    rng = np.random.default_rng(seed)
    support_x = tf.constant(rng.uniform(size=(b, N, 64)), tf.float32)
    support_y = tf.constant(np.tile(rng.permutation(N), (b, 1)), tf.int32)
    query_x = tf.constant(rng.uniform(size=(b, 4, 64)), tf.float32)
    return support_x, support_y, tf.ones([b, N], tf.bool), query_x


def _on_conv_film(learner_class, **kwargs):
    """A learner on the small conv-FiLM net, its weights drawn under seed 3."""
    keras.utils.set_random_seed(3)
    return learner_class(
        input_dim=64,
        output_dim=N,
        context_dim=C,
        num_inner_steps=2,
        task_loss="cross_entropy",
        network=keras_network(conv_film),
        **kwargs,
    )


def _viable(loss_network, **kwargs):
    return _on_conv_film(VIABLE, loss_network=loss_network, **kwargs)


def _ordered(class_order):
    """simVIABLE's point features with the logits in `class_order` (the label implied
    by the canonical order)."""
    label = (Labels(),) if class_order == "episode" else ()
    return (TaskLoss(), Outputs(class_order=class_order), *label)


def _pairs(source):
    """relVIABLE's point features with `source` as each point's input."""
    return (TaskLoss(), Outputs(), Labels(), Inputs(source=source))


def _features(learner, x, y, y_hat):
    """The learner's point features [B, K, F] of predictions `y_hat`."""
    return learner.point_features(Support(learner, None, x, y, None, y_hat, x))


# -- the data: rotations are training classes only -------------------------------------


def test_rotations_are_classes_of_their_own_for_meta_training_only(tmp_path):
    """gin/omniglot_conv/'s episodes (the image-folder family over a folder shaped as
    Omniglot's zips): each meta-training character also enters rotated by 90, 180 and
    270 degrees, each rotation a class of its own; validation and test never rotated."""
    from viable_tf.cli.common import parse_gin
    from viable_tf.tasks.images import ImageFolderEpisodes

    folder = write_fake_omniglot(tmp_path / "omniglot")
    parse_gin(["omniglot_conv/base.gin"], [f"IMAGE_DIR={str(folder)!r}"])
    tasks = ImageFolderEpisodes()  # as the end-to-end configs bind it
    train_characters = sum(n for a, n in ALPHABETS.items() if a in TRAIN_ALPHABETS)
    assert tasks.num_classes["train"] == 4 * train_characters
    assert tasks.num_classes["val"] + tasks.num_classes["test"] == sum(ALPHABETS.values()) - (
        train_characters
    )
    labels = list(tasks.train.classes)  # "<alphabet>/<character>@<degrees>"
    for degrees in (0, 90, 180, 270):
        assert sum(label.endswith(f"@{degrees}") for label in labels) == train_characters
    for sampler in (tasks.validation, tasks.test):
        assert all(label.endswith("@0") for label in sampler.classes)
    # The same drawings, rotated by 90 degrees counter-clockwise, under a class of their own.
    store = tasks.train._embeddings.numpy().reshape(-1, 28, 28)
    members = tasks.train._members.numpy()  # [C, M]: each class's rows, padded with -1

    def drawings(label):
        rows = members[labels.index(label)]
        return store[rows[rows >= 0]]

    first = labels[0].rsplit("@", 1)[0]
    image, turned = drawings(f"{first}@0"), drawings(f"{first}@90")
    assert len(image) == 12
    np.testing.assert_array_equal(turned, np.rot90(image, axes=(1, 2)))


# -- why simVIABLE collapsed, pinned -------------------------------------------------


def test_a_loss_network_from_zero_moves_nothing_at_first_and_still_gets_a_meta_gradient():
    """The cause of simVIABLE's end-to-end collapse: from the code lineage's random output
    layer the learned loss's first inner steps move the context in a direction unrelated
    to the task (meta-training then switched adaptation off). `output_init='zeros'`
    starts the loss flat: the adapted context is exactly phi_0 = 0, the query loss is
    CAVIA's unadapted one, and the meta-gradient reaches the output layer, so training
    shapes the loss before it moves anything. (This fails with the lineage's output.)"""
    support_x, support_y, mask, query_x = _episode()
    for network in (SimpleLossNetwork, RelationLossNetwork):
        flat = _viable(lambda n=network: n(hidden_units=(16, 16), output_init="zeros"))
        context = flat.adapt(support_x, support_y, mask).context
        np.testing.assert_array_equal(context.numpy(), 0.0)
        with tf.GradientTape() as tape:
            context = flat.adapt(support_x, support_y, mask).context
            query_y = tf.zeros(query_x.shape[:2], tf.int32)
            query_loss = tf.reduce_mean(
                flat.task_loss(flat.predict(AdaptedState(context=context), query_x), query_y)
            )
        grad = tape.gradient(query_loss, flat.loss_network._output.kernel)
        assert np.isfinite(grad.numpy()).all() and np.abs(grad.numpy()).max() > 0
        lineage = _viable(lambda n=network: n(hidden_units=(16, 16)))
        moved = lineage.adapt(support_x, support_y, mask).context
        assert np.abs(moved.numpy()).max() > 1e-4  # the random output moves phi at once


def test_a_residual_learned_loss_from_zero_starts_as_cavias_step_and_learns_a_correction():
    """`form=Residual()`: the inner loss is the task loss plus the learned one, so a loss
    network whose output starts at zero adapts exactly as CAVIA does at first (the step
    is the task's, informative from the first meta-update), and the meta-gradient still
    reaches the loss network's output layer. Without it the step is zero at first
    (above); end to end at 20 ways meta-training made the logits deaf to phi before the
    learned step aligned with the task's."""
    support_x, support_y, mask, query_x = _episode()
    cavia = _on_conv_film(CAVIA)
    expected = cavia.adapt(support_x, support_y, mask).context
    assert np.abs(expected.numpy()).max() > 1e-4
    for network in (SimpleLossNetwork, RelationLossNetwork):
        residual = _viable(
            lambda n=network: n(hidden_units=(16, 16), output_init="zeros"), form=Residual()
        )
        assert residual.hparams()["residual"] is True
        # The same prediction network as CAVIA's (both drawn first under seed 3).
        for ours, theirs in zip(
            residual.network.trainable_weights, cavia.network.trainable_weights, strict=True
        ):
            np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
        context = residual.adapt(support_x, support_y, mask).context
        np.testing.assert_allclose(context.numpy(), expected.numpy(), rtol=1e-5, atol=1e-7)
        with tf.GradientTape() as tape:
            context = residual.adapt(support_x, support_y, mask).context
            query_y = tf.zeros(query_x.shape[:2], tf.int32)
            query_loss = tf.reduce_mean(
                residual.task_loss(
                    residual.predict(AdaptedState(context=context), query_x), query_y
                )
            )
        grad = tape.gradient(query_loss, residual.loss_network._output.kernel)
        assert np.isfinite(grad.numpy()).all() and np.abs(grad.numpy()).max() > 0
    plain = _viable(lambda: SimpleLossNetwork(hidden_units=(16, 16), output_init="zeros"))
    assert plain.hparams()["residual"] is False


def test_output_init_is_checked_and_kept_in_the_config():
    with pytest.raises(ValueError, match="output_init must be one of"):
        SimpleLossNetwork(output_init="ones")
    network = RelationLossNetwork(hidden_units=(4,), output_init="zeros")
    assert RelationLossNetwork.from_config(network.get_config()).output_init == "zeros"


# -- why MeTAL on CAVIA collapsed, pinned ----------------------------------------------


def _context_gradients(learner, support_x, support_y, mask, query_x):
    """At phi_0 = 0, the gradient on the context of the cross-entropy and of the learned
    terms (the inner loss minus the cross-entropy), [B, C] each."""
    phi = tf.zeros([support_x.shape[0], C])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(phi)
        state = AdaptedState(context=phi)
        task = tf.reduce_sum(
            learner.support_mean(learner.task_loss, state, support_x, support_y, mask)
        )
        inner = tf.reduce_sum(
            learner.inner_loss(state, support_x, support_y, mask, step=0, query_x=query_x)
        )
    task_gradient = tape.gradient(task, phi)
    return task_gradient, tape.gradient(inner, phi) - task_gradient


def test_metals_terms_from_metals_start_outweigh_cavias_step_and_from_zero_leave_it_alone():
    """The cause of MeTAL on CAVIA's end-to-end collapse: from MeTAL's own start (every
    term layer Glorot-uniform) the terms' gradient on the context is several times the
    cross-entropy's, so CAVIA's first step at lr 1.0 goes where a random network points
    (end to end meta-training then made the predictions uniform). The end-to-end configs
    start the terms' output layers at zero (gin/omniglot_conv/metal_cavia_terms.gin):
    the adapted context is CAVIA's and the meta-gradient reaches both output layers."""
    support_x, support_y, mask, query_x = _episode()
    metal = _on_conv_film(MeTAL, inner_lr=1.0)
    task, terms = _context_gradients(metal, support_x, support_y, mask, query_x)
    assert float(tf.norm(terms)) > 3 * float(tf.norm(task)) > 0

    flat = _on_conv_film(MeTAL, inner_lr=1.0, term_network=TermNetwork(output_init="zeros"))
    task, terms = _context_gradients(flat, support_x, support_y, mask, query_x)
    np.testing.assert_array_equal(terms.numpy(), 0.0)
    expected = _on_conv_film(CAVIA, inner_lr=1.0).adapt(support_x, support_y, mask).context
    np.testing.assert_array_equal(
        flat.adapt(support_x, support_y, mask, query_x=query_x).context.numpy(), expected.numpy()
    )
    outputs = [flat.support_term.networks[0][-2], flat.query_network.networks[0][-2]]
    with tf.GradientTape() as tape:
        context = flat.adapt(support_x, support_y, mask, query_x=query_x).context
        query_y = tf.zeros(query_x.shape[:2], tf.int32)
        query_loss = tf.reduce_mean(
            flat.task_loss(flat.predict(AdaptedState(context=context), query_x), query_y)
        )
    for grad in tape.gradient(query_loss, outputs):
        assert np.isfinite(grad.numpy()).all() and np.abs(grad.numpy()).max() > 0


@pytest.mark.parametrize("setting", ["5way1shot", "5way5shot", "20way1shot"])
def test_the_end_to_end_metal_configs_start_cavias_terms_flat_and_mamls_as_metals(setting):
    import gin

    from viable_tf import config

    for base, start in (
        ("metal_cavia", "zeros"),
        ("relmetal_cavia", "zeros"),
        ("metal_maml", "init"),
        ("metal_maml_steps5", "init"),
    ):
        name = f"omniglot_conv/{base}_{setting}.gin"
        if not os.path.exists(os.path.join(REPO, "gin", name)):
            continue  # relmetal_cavia and metal_maml_steps5 are 5-way 1-shot cells only
        config.parse([name])
        try:
            bound = gin.query_parameter("TermNetwork.output_init")
        except ValueError:  # not bound: the class default, MeTAL's start
            bound = TermNetwork().output_init
        assert bound == start, name
    gin.clear_config()


def test_the_five_step_metal_cell_differs_from_its_pair_in_the_step_count_alone():
    """metal_maml_steps5 is paired with metal_maml on the same test episodes to measure
    MeTAL's own 5 inner steps against §9's 2: every other binding must be the same."""
    import gin

    from viable_tf import config

    def bindings(name):
        gin.clear_config()
        config.parse([f"omniglot_conv/{name}_5way1shot.gin"])
        text = gin.config_str()
        gin.clear_config()
        return set(text.splitlines())

    two, five = bindings("metal_maml"), bindings("metal_maml_steps5")
    assert two - five == {"MAMLMeTAL.num_inner_steps = 2"}
    assert five - two == {"MAMLMeTAL.num_inner_steps = 5"}


# -- class-canonical features ----------------------------------------------------------


def test_canonical_logits_put_the_label_first_and_the_rest_in_decreasing_order():
    logits = tf.constant([[[0.5, 2.0, -1.0, 1.0]]])
    out = canonical_logits(logits, tf.constant([[2]]))
    np.testing.assert_array_equal(out.numpy(), [[[-1.0, 2.0, 1.0, 0.5]]])
    with tf.GradientTape() as tape:
        tape.watch(logits)
        out = canonical_logits(logits, tf.constant([[2]]))
        weighted = tf.reduce_sum(out * tf.constant([1.0, 10.0, 100.0, 1000.0]))
    np.testing.assert_array_equal(tape.gradient(weighted, logits).numpy(), [[[1e3, 10, 1, 1e2]]])


def test_canonical_class_order_makes_the_learned_loss_blind_to_the_class_numbering():
    """Relabel the classes of an episode (permute the logits' axis and the labels
    together): the cross-entropy is unchanged, and so is the learned loss with
    Outputs(class_order='canonical'); with the paper's layout it is not."""
    rng = np.random.default_rng(1)
    logits = tf.constant(rng.normal(size=(2, 5, N)), tf.float32)
    labels = tf.constant(rng.integers(0, N, size=(2, 5)), tf.int32)
    x = tf.zeros([2, 5, 64])
    mask = tf.ones([2, 5], tf.bool)
    permutation = np.array([2, 0, 1])  # new class c is old class permutation[c]
    relabelled = tf.gather(logits, permutation, axis=-1)
    new_labels = tf.constant(np.argsort(permutation)[labels.numpy()], tf.int32)
    for order, invariant in (("canonical", True), ("episode", False)):
        learner = _viable(lambda: SimpleLossNetwork(hidden_units=(16,)), features=_ordered(order))
        losses = [
            learner.loss_network(_features(learner, x, y, y_hat), mask).numpy()
            for y_hat, y in ((logits, labels), (relabelled, new_labels))
        ]
        if invariant:
            np.testing.assert_allclose(losses[0], losses[1], rtol=1e-6)
        else:
            assert np.abs(losses[0] - losses[1]).max() > 1e-4
    assert learner.feature_dim == 1 + N + N  # the paper's layout: L_T, logits, one-hot
    canonical = _viable(
        lambda: SimpleLossNetwork(hidden_units=(4,)), features=_ordered("canonical")
    )
    assert canonical.feature_dim == 1 + N  # the label is the first logit's position
    with pytest.raises(ValueError, match="class_order must be one of"):
        Outputs(class_order="sorted")
    with pytest.raises(ValueError, match="drop Labels"):
        _viable(SimpleLossNetwork, features=[Outputs(class_order="canonical"), Labels()])


# -- relVIABLE's pair network on penultimate features ---------------------------------


def test_relviable_on_penultimate_features_is_order_invariant_and_respects_the_mask():
    learner = _viable(
        lambda: RelationLossNetwork(hidden_units=(32, 32)), features=_pairs("penultimate")
    )
    assert learner.network.penultimate_dim == 32  # 8 x 8 pooled twice, 8 channels
    assert learner.feature_dim == 1 + N + N + 32  # L_T, logits, one-hot, h
    support_x, support_y, mask, _ = _episode(b=1, seed=2)
    state = AdaptedState(context=tf.random.normal([1, C], seed=1))
    loss = learner.inner_loss(state, support_x, support_y, mask).numpy()
    # The points in another order: the mean over every ordered pair is the same.
    order = [2, 0, 1]
    shuffled = learner.inner_loss(
        state, tf.gather(support_x, order, axis=1), tf.gather(support_y, order, axis=1), mask
    )
    np.testing.assert_allclose(shuffled.numpy(), loss, rtol=1e-5)
    # A padded point, whatever it holds, takes part in no pair.
    padded_x = tf.concat([support_x, tf.fill([1, 1, 64], 1e3)], axis=1)
    padded_y = tf.concat([support_y, [[0]]], axis=1)
    padded_mask = tf.concat([mask, [[False]]], axis=1)
    padded = learner.inner_loss(state, padded_x, padded_y, padded_mask)
    np.testing.assert_allclose(padded.numpy(), loss, rtol=1e-5)
    # The features are the network's own at the current context: phi moves them.
    y_hat, h = learner.network.call_with_penultimate(support_x, state.context)
    np.testing.assert_allclose(y_hat.numpy(), learner.predict(state, support_x).numpy(), 1e-5)
    _, h0 = learner.network.call_with_penultimate(support_x, tf.zeros([1, C]))
    assert np.abs(h.numpy() - h0.numpy()).max() > 0
    # and the inner loss's gradient reaches phi through them and through y_hat.
    with tf.GradientTape() as tape:
        tape.watch(state)
        total = tf.reduce_sum(learner.inner_loss(state, support_x, support_y, mask))
    assert np.abs(tape.gradient(total, state.context).numpy()).max() > 0


def test_stopped_penultimate_features_inform_the_loss_but_pass_no_gradient():
    support_x, support_y, mask, _ = _episode(b=1, seed=3)
    state = AdaptedState(context=tf.random.normal([1, C], seed=2))
    values, grads = [], []
    for inputs in ("penultimate", "penultimate_stopped"):
        learner = _viable(lambda: RelationLossNetwork(hidden_units=(16,)), features=_pairs(inputs))
        with tf.GradientTape() as tape:
            tape.watch(state)
            loss = learner.inner_loss(state, support_x, support_y, mask)
        values.append(loss.numpy())
        grads.append(tape.gradient(loss, state.context).numpy())
        if inputs == "penultimate_stopped":  # by hand: h as a constant, the rest as is
            y_hat, h = learner.network.call_with_penultimate(support_x, state.context)
            with tf.GradientTape() as tape:
                tape.watch(state)
                y_hat = learner.predict(state, support_x)
                features = learner.point_features(
                    Support(learner, state, support_x, support_y, None, y_hat, tf.constant(h))
                )
                by_hand = learner.loss_network(features, mask)
            np.testing.assert_allclose(grads[-1], tape.gradient(by_hand, state.context), rtol=1e-5)
    np.testing.assert_array_equal(values[0], values[1])  # the same loss, the same weights
    assert np.abs(grads[0] - grads[1]).max() > 1e-6  # but not the same gradient


def test_penultimate_pair_inputs_need_cavia_with_a_functional_model():
    with pytest.raises(ValueError, match=r"Inputs\.source must be one of"):
        Inputs(source="pixels")
    with pytest.raises(ValueError, match="needs VIABLE on CAVIA, with a per-task head"):
        _on_conv_film(MAMLVIABLE, loss_network=RelationLossNetwork, features=_pairs("penultimate"))
    # The pair network's trainable weights are the learner's own, none twice.
    learner = _viable(
        lambda: RelationLossNetwork(hidden_units=(8,)), features=_pairs("penultimate")
    )
    ids = [id(v) for v in learner.trainable_variables]
    assert len(ids) == len(set(ids))
    plain = CAVIA(input_dim=64, output_dim=N, context_dim=C, network=keras_network(conv_film))
    assert len(plain.network.trainable_variables) == len(learner.network.trainable_variables)


# -- a run's wall-clock, across resumptions -------------------------------------------


def test_the_wall_clock_is_recorded_with_each_checkpoint_and_resumed(tmp_path):
    step = tf.Variable(0, dtype=tf.int64)

    def checkpoints():
        state = tf.train.Checkpoint(step=step)
        return TrainingCheckpoints(RunDir(str(tmp_path)), state, state, chief=True, keep=2)

    first = checkpoints()
    first.clock.before = 100.0  # as if this process had run 100 s already
    step.assign(500)
    first.latest.save(checkpoint_number=500)
    first.close()
    table = WallClock.read(os.path.join(tmp_path, "checkpoints"))
    assert set(table) == {"500"} and 100.0 <= table["500"] < 160.0
    second = checkpoints()  # a new process resumes from checkpoint 500
    assert second.restore() and int(step.numpy()) == 500
    assert second.clock.before == table["500"]
    assert second.clock.total() >= table["500"]
    with open(os.path.join(tmp_path, "checkpoints", WallClock.FILE)) as f:
        assert json.load(f) == table


def test_relviable_on_penultimate_features_exports_and_reloads_in_plain_tensorflow(tmp_path):
    """The export traces the two-output model inside the served graph: standard ops only,
    and the reloaded SavedModel answers as the learner does."""
    from viable_tf.export import export_saved_model

    learner = _viable(
        lambda: RelationLossNetwork(hidden_units=(16,), output_init="zeros"),
        features=_pairs("penultimate_stopped"),
    )
    learner.loss_network._output.kernel.assign(tf.fill([16, 1], 0.05))  # a loss that moves phi
    support_x, support_y, mask, query_x = _episode(b=1, seed=4)
    base = str(tmp_path / "export")
    export_saved_model(learner, base)
    (version,) = [name for name in os.listdir(base) if name.isdigit()]
    served = tf.saved_model.load(os.path.join(base, version)).signatures["serving_default"]
    out = served(support_x=support_x, support_y=support_y, query_x=query_x)
    state = learner.adapt(support_x, support_y, mask)
    assert np.abs(state.context.numpy()).max() > 0
    np.testing.assert_allclose(
        out["logits"].numpy(), learner.predict(state, query_x).numpy(), rtol=1e-5, atol=1e-6
    )


# -- the driver's report: every finished run of the work directory ---------------------


def _finished(work_dir, run, accuracy, validation, sweep=()):
    """A run directory as viable-train and viable-eval leave it."""
    run_dir = RunDir(os.path.join(work_dir, "runs", run))
    os.makedirs(run_dir.path)
    record = {
        "mean": accuracy,
        "ci95": 0.01,
        "best_validation_accuracy": validation,
        "steps_trained": 3000,
        "checkpoint_step": 2500,
        "train_and_eval_seconds": 60.0,
        "train_wall_clock_seconds": 50.0,
        "hparams": {"num_steps": 100000},
    }
    with open(run_dir.results, "w") as f:
        json.dump(record, f)
    for k in sweep:
        with open(run_dir.evaluation(k), "w") as f:
            json.dump({"mean": accuracy + k / 1000, "ci95": 0.01}, f)


def test_the_drivers_report_holds_every_finished_run_whichever_invocation_trained_it(
    tmp_path, monkeypatch
):
    """Invocations with disjoint --methods run at once, one per core, and each rewrites
    W/results.md: each must write the whole table (and pick the run to serve among all),
    not only its own runs."""
    from viable_tf.experiments import class_means, omniglot, omniglot_conv

    work_dir = str(tmp_path)
    _finished(work_dir, "protonet_5way5shot", 0.98, 0.97, sweep=range(1, 10))
    _finished(work_dir, "simviable_5way1shot", 0.88, 0.89)
    _finished(work_dir, "maml_5way5shot", 0.88, 0.89, sweep=(1, 2))  # its sweep unfinished
    os.makedirs(os.path.join(work_dir, "runs", "cavia_20way1shot"))  # training, no results
    trained = []

    images = tmp_path / "zips"
    images.mkdir()

    def train(work_dir, run, params, configs, data):  # this run, as its training ends
        assert data == (f"IMAGE_DIR={str(images)!r}",)  # the zips, as an absolute path
        trained.append(run)
        _finished(work_dir, run, 0.85, 0.87)

    monkeypatch.setattr(omniglot, "train", train)
    monkeypatch.setattr(omniglot, "sweep", lambda *args, **kwargs: None)
    monkeypatch.setattr(omniglot_conv, "export", lambda *args: None)
    monkeypatch.setattr(
        class_means, "reference", lambda *args, **kwargs: {"mean": 0.5, "ci95": 0.01}
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(
        "sys.argv",
        [
            "omniglot_conv",
            "--data_dir=zips",
            f"--work_dir={work_dir}",
            "--methods=cavia",
            "--settings=5way1shot",
        ],
    )
    assert omniglot_conv._main() == 0
    assert trained == ["cavia_5way1shot"]

    summary = omniglot.read_json(os.path.join(work_dir, "results.json"))
    assert sorted(summary["runs"]) == [
        "cavia_5way1shot",
        "maml_5way5shot",
        "protonet_5way5shot",
        "simviable_5way1shot",
    ]
    assert summary["settings"] == ["5way1shot", "5way5shot"]
    assert summary["methods"] == ["cavia", "simviable", "maml", "protonet"]
    # The run to serve per setting: the best on validation among every run of it.
    assert summary["served"] == {
        "5way1shot": "simviable_5way1shot",
        "5way5shot": "protonet_5way5shot",
    }
    assert "by_shots" in summary["runs"]["protonet_5way5shot"]
    assert "by_shots" not in summary["runs"]["maml_5way5shot"]
    with open(os.path.join(work_dir, "results.md")) as f:
        text = f.read()
    assert "| CAVIA | 85.0 ± 1.0 |  |" in text  # no 5-shot run: its cell stays empty
    assert "| Prototypical Network |  | 98.0 ± 1.0 |" in text
    assert "| Prototypical Network | 98.1 ± 1.0 |" in text  # the sweep at K = 1
    assert "| MAML | 88.1" not in text  # an unfinished sweep is no row


def test_every_method_the_driver_runs_has_a_label_in_its_report():
    """The report names each run's method (omniglot.LABELS); a method without a label
    would end a finished run's driver with a KeyError as it writes results.md."""
    from viable_tf.experiments import omniglot, omniglot_conv

    for method in (*omniglot_conv.METHODS, *omniglot_conv.MORE_METHODS):
        assert omniglot.LABELS.get(method), method
