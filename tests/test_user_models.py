"""Your own Keras model under CAVIA, VIABLE and MAML (docs/GUIDE.md):
functional and subclassed models through adapt, the meta-loss, training, export and a
served request; the functional MAML path against the built-in one; the refusals."""

import glob
import os
import re

import gin
import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import unreached_by_design
from fake_omniglot import write_fake_omniglot
from serving_harness import RunningServer, model_config

from serving.client import Client
from serving.server import ServerOptions
from viable_tf.cli.common import parse_gin
from viable_tf.export import export_saved_model
from viable_tf.learners import CAVIA, MAML, MAMLVIABLE, VIABLE, PrototypeHead
from viable_tf.networks import (
    FiLM,
    PredictionNetwork,
    RelationLossNetwork,
    SimpleLossNetwork,
    UserNetwork,
    keras_network,
)
from viable_tf.tasks import SineTasks, seed_for
from viable_tf.tasks.images import ImageFolderEpisodes
from viable_tf.training import EvaluationSpec, PerformanceSpec, Trainer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def functional_mlp(input_dim, output_dim, context_dim, hidden=(40, 40)):
    """[x, phi] -> y_hat as a functional model (x alone when context_dim = 0)."""
    x = keras.Input((input_dim,))
    inputs, h = [x], x
    if context_dim:
        context = keras.Input((context_dim,))
        inputs.append(context)
        h = keras.layers.Concatenate()([x, context])
    for units in hidden:
        h = keras.layers.Dense(units, activation="relu")(h)
    out = keras.layers.Dense(output_dim)(h) if output_dim else h
    return keras.Model(inputs if context_dim else x, out)


class SubclassedModel(keras.Model):
    """A subclassed model: the context, where there is one, modulates the hidden layer
    (FiLM); without one (MAML) it is a plain two-layer network."""

    def __init__(self, output_dim, context_dim):
        super().__init__()
        self.hidden = keras.layers.Dense(32, activation="relu")
        self.film = FiLM() if context_dim else None
        self.out = keras.layers.Dense(output_dim)

    def call(self, inputs):
        if self.film is None:
            return self.out(self.hidden(inputs))
        x, context = inputs
        return self.out(self.film([self.hidden(x), context]))


LEARNERS = {
    "cavia": lambda network: CAVIA(input_dim=1, output_dim=1, context_dim=4, network=network),
    "simviable": lambda network: VIABLE(
        input_dim=1, output_dim=1, context_dim=4, network=network, loss_network=SimpleLossNetwork
    ),
    "relviable": lambda network: VIABLE(
        input_dim=1,
        output_dim=1,
        context_dim=4,
        network=network,
        loss_network=lambda: RelationLossNetwork(hidden_units=(16,)),
    ),
    "maml": lambda network: MAML(input_dim=1, output_dim=1, network=network),
    "maml_relviable": lambda network: MAMLVIABLE(
        input_dim=1,
        output_dim=1,
        network=network,
        loss_network=lambda: RelationLossNetwork(hidden_units=(16,)),
    ),
}


def _batch(b=3, seed=1):
    return SineTasks(num_support=5, num_query=7).sample(seed_for(seed, 0), b)


@pytest.mark.parametrize("name", sorted(LEARNERS))
@pytest.mark.parametrize("kind", ["functional", "subclassed"])
def test_a_user_model_adapts_and_gets_a_meta_gradient(name, kind):
    keras.utils.set_random_seed(0)
    if kind == "functional":
        network = keras_network(functional_mlp)
    else:
        network = keras_network(lambda d, y, c: SubclassedModel(y, c))
    learner = LEARNERS[name](network)
    assert isinstance(learner.network, UserNetwork)
    batch = _batch()
    state = learner.adapt(batch.support_x, batch.support_y, batch.support_mask)
    before = learner.predict(learner.initial_state(3), batch.query_x)
    after = learner.predict(state, batch.query_x)
    assert after.shape == (3, 7, 1) and np.all(np.isfinite(after.numpy()))
    assert not np.allclose(before.numpy(), after.numpy())  # adaptation moved something
    with tf.GradientTape() as tape:
        loss, _ = learner.meta_loss(batch)
    grads = tape.gradient(loss, learner.trainable_variables)
    user = {id(v) for v in learner.network.model.trainable_variables}
    assert user <= {id(v) for v in learner.trainable_variables}
    unreached = unreached_by_design(learner)
    for variable, grad in zip(learner.trainable_variables, grads, strict=True):
        assert (grad is None) == (id(variable) in unreached), variable.path
        if id(variable) in user:  # the user's weights are meta-learned
            assert np.any(grad.numpy() != 0), variable.path
    compiled = tf.function(lambda b: learner.meta_loss(b)[0], jit_compile=True, autograph=False)
    np.testing.assert_allclose(float(compiled(batch)), float(loss), rtol=1e-4)


@pytest.mark.float_sensitive
def test_functional_maml_equals_the_builtin_maml_on_the_same_mlp():
    """The same weights, the same batch: the functional path (stateless_call, one copy
    of the weights per task through map_fn) gives the built-in MAML's meta-loss and
    meta-gradient. Two float paths (Dense's matmul vs tensordot, per-task vs batched):
    agreement to 1e-4 relative, where a wrong weight order or a missing second-order
    term is off by far more."""
    keras.utils.set_random_seed(3)
    builtin = MAML(input_dim=1, output_dim=1, num_inner_steps=2, network=PredictionNetwork)
    user = MAML(input_dim=1, output_dim=1, num_inner_steps=2, network=keras_network(functional_mlp))
    assert [tuple(v.shape) for v in user.network.params] == [
        tuple(v.shape) for v in builtin.network.params
    ]
    for mine, theirs in zip(user.network.params, builtin.network.params, strict=True):
        mine.assign(theirs)
    batch = _batch(b=4, seed=5)
    results = []
    for learner in (builtin, user):
        with tf.GradientTape() as tape:
            loss, _ = learner.meta_loss(batch)
        results.append((float(loss), tape.gradient(loss, learner.network.params)))
    (loss_a, grads_a), (loss_b, grads_b) = results
    np.testing.assert_allclose(loss_b, loss_a, rtol=1e-5)
    for a, b in zip(grads_a, grads_b, strict=True):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_a_user_model_trains_exports_and_serves(tmp_path):
    keras.utils.set_random_seed(2)
    model_dir = tmp_path / "run"
    trainer = Trainer(
        model_dir=str(model_dir),
        tasks=SineTasks(),
        learner=lambda **kw: VIABLE(context_dim=4, network=keras_network(functional_mlp), **kw),
        num_steps=40,
        meta_batch_size=5,
        evaluation=EvaluationSpec(eval_every=20, summary_every=10, figure_every=0),
        performance=PerformanceSpec(steps_per_call=20),
        show_progress=False,
    )
    trainer.train()
    assert int(trainer.step.numpy()) == 40
    assert (model_dir / "best").is_dir() and any(model_dir.glob("events.out.tfevents*"))
    step = trainer.restore_best()
    assert step in (20, 40)
    base = str(tmp_path / "export")
    export_saved_model(trainer.learner, base, warmup_inputs=trainer.tasks.warmup_inputs)
    rng = np.random.default_rng(0)
    inputs, _ = SineTasks().request(rng, num_support=6, num_query=9)
    expected = trainer.learner.predict(
        trainer.learner.adapt(
            tf.constant(inputs["support_x"]),
            tf.constant(inputs["support_y"]),
            tf.ones([1, 6], tf.bool),
        ),
        tf.constant(inputs["query_x"]),
    ).numpy()
    running = RunningServer(
        ServerOptions(models=[model_config("mine", base)], port=0, rest_api_port=0)
    )
    try:
        client = Client(running.grpc_target)
        served = client.predict(
            inputs["support_x"], inputs["support_y"], inputs["query_x"], model_name="mine"
        )
        client.close()
    finally:
        running.stop()
    np.testing.assert_allclose(served["predictions"], expected, rtol=1e-5, atol=1e-6)


def test_film_leaves_features_alone_at_zero_and_modulates_each_channel():
    film = FiLM()
    features = tf.random.normal([2, 5, 5, 3])
    np.testing.assert_array_equal(film([features, tf.zeros([2, 4])]).numpy(), features.numpy())
    assert np.any(film.dense.kernel.numpy() != 0)  # phi has a gradient from the start
    film.dense.kernel.assign(tf.ones([4, 6]))
    out = film([features, tf.ones([2, 4])]).numpy()  # gamma = beta = 4 on every channel
    np.testing.assert_allclose(out, features.numpy() * 5.0 + 4.0, rtol=1e-6)


def test_a_conv_net_with_film_adapts_its_context_on_images():
    """An image model: 8 x 8 images as 64 numbers, reshaped inside the model, conv
    blocks modulated by phi through FiLM (the CAVIA code's conv nets)."""

    def conv_film(input_dim, output_dim, context_dim):
        x = keras.Input((input_dim,))
        context = keras.Input((context_dim,))
        h = keras.layers.Reshape((8, 8, 1))(x)
        for _ in range(2):
            h = keras.layers.Conv2D(8, 3, padding="same")(h)
            h = FiLM()([h, context])
            h = keras.layers.MaxPooling2D(2)(keras.layers.ReLU()(h))
        h = keras.layers.Flatten()(h)
        return keras.Model([x, context], keras.layers.Dense(output_dim)(h) if output_dim else h)

    keras.utils.set_random_seed(4)
    learner = CAVIA(
        input_dim=64,
        output_dim=3,
        context_dim=6,
        num_inner_steps=1,
        task_loss="cross_entropy",
        network=keras_network(conv_film),
    )
    rng = np.random.default_rng(0)
    support_x = tf.constant(rng.normal(size=(2, 6, 64)), tf.float32)
    support_y = tf.constant(np.tile(np.arange(3).repeat(2), (2, 1)), tf.int32)
    mask = tf.ones([2, 6], tf.bool)
    context = learner.adapt(support_x, support_y, mask).context
    assert context.shape == (2, 6) and np.any(context.numpy() != 0)
    # And with the prototype head: `build` gets output_dim=None and returns features.
    proto = CAVIA(
        input_dim=64,
        output_dim=3,
        context_dim=6,
        task_loss="cross_entropy",
        head=PrototypeHead(),
        network=keras_network(conv_film),
    )
    assert proto.network.feature_dim == 2 * 2 * 8  # 8 x 8 pooled twice, 8 channels
    state = proto.adapt(support_x, support_y, mask)
    assert proto.predict(state, support_x).shape == (2, 6, 3)


def _refusal(build, **learner_kwargs):
    with pytest.raises(ValueError) as info:
        CAVIA(input_dim=2, output_dim=3, network=keras_network(build), **learner_kwargs)
    # One line of ours (gin adds where it was called from on the next line).
    return str(info.value).splitlines()[0]


def test_a_model_that_does_not_fit_is_refused_with_one_line():
    def wrong_outputs(d, y, c):
        return functional_mlp(d, 5, c)

    message = _refusal(wrong_outputs, context_dim=4)
    assert "[2, 5]" in message and "expected [N, 3]" in message

    def no_context(d, y, c):
        return functional_mlp(d, y, 0)

    message = _refusal(no_context, context_dim=4)
    assert "must take [x [N, 2], phi [N, 4]]" in message

    def batch_norm(d, y, c):
        x, context = keras.Input((d,)), keras.Input((c,))
        h = keras.layers.Dense(8)(keras.layers.Concatenate()([x, context]))
        h = keras.layers.BatchNormalization(name="bn")(h)
        return keras.Model([x, context], keras.layers.Dense(y)(h))

    message = _refusal(batch_norm, context_dim=4)
    assert "bn" in message and "LayerNormalization" in message
    with pytest.raises(ValueError, match=r"takes? x \[N, 2\] \(no context"):
        MAML(
            input_dim=2,
            output_dim=3,
            network=keras_network(lambda d, y, c: functional_mlp(d, y, 4)),
        )


END_TO_END_CONFIGS = sorted(
    os.path.relpath(p, REPO)
    for p in glob.glob(os.path.join(REPO, "gin", "omniglot_conv", "*shot.gin"))
)


@pytest.mark.parametrize("config", [c for c in END_TO_END_CONFIGS if "5way1shot" in c])
def test_the_end_to_end_omniglot_configs_build_a_conv_film_learner(
    config, omniglot_images, tmp_path
):
    """gin/omniglot_conv/: the frozen-feature configs with the conv-FiLM network on 28 x 28
    images, read from a folder shaped as Omniglot's zips by the image-folder episodes.
    Each method's 5-way 1-shot config is built; its other settings differ from it by the
    frozen-feature config they include (each built in test_classification) and are
    checked below."""
    parse_gin([config], [f"IMAGE_DIR={omniglot_images!r}", "Trainer.show_progress=False"])
    trainer = Trainer(model_dir=str(tmp_path / "run"))
    learner = trainer.learner
    assert isinstance(trainer.tasks, ImageFolderEpisodes)
    # Omniglot's split by alphabet, the meta-training characters rotated.
    assert trainer.tasks.num_classes == {"train": 16, "val": 5, "test": 5}
    assert trainer.tasks.num_queries == 10 and trainer.tasks.image_shape == (28, 28, 1)
    assert isinstance(learner.network, UserNetwork) and learner.input_dim == 28 * 28
    assert not trainer.jit_compile  # oneDNN's convolutions (and MAML's per-task loop)
    convs = [layer for layer in learner.network.model.layers if "conv2d" in layer.name]
    films = [layer for layer in learner.network.model.layers if isinstance(layer, FiLM)]
    # FiLM wherever there is a context to adapt (MAML's, simVIABLE on MAML's: none).
    assert len(convs) == 4 and len(films) == (4 if learner.context_dim else 0)
    heads = {
        "proto": "prototypes",
        "_stepped_": "stepped_linear",
        "matching_fce": "matching_fce",
        "matching_": "matching",
        "r2d2": "ridge",
        "metaoptnet_svm": "svm",
    }
    assert learner.head.name == next((h for k, h in heads.items() if k in config), "linear")
    assert getattr(learner, "adapt_head", False) == ("_stepped_" in config)
    assert learner.learned_inner_lr == config.startswith("gin/omniglot_conv/metasgd_")
    # Results name a head with no inner steps by its own method, never "cavia".
    method = os.path.basename(config).rsplit("_5way1shot", 1)[0]
    # A variant's config (its options, e.g. a temperature) names the same method.
    variants = {"matching_tau": "matching", "matching_fce_tau": "matching_fce"}
    variants["metaoptnet_svm_normalized"] = "metaoptnet_svm"
    method = variants.get(method, method)
    alone = ("protonet", "matching", "matching_fce", "r2d2", "metaoptnet_svm")
    if method in alone or method.startswith("metasgd_"):
        assert learner.method_name == method
    else:  # e.g. cavia_proto: CAVIA's inner steps on a prototype head
        assert learner.num_inner_steps > 0 and learner.method_name == learner.base_name
    if os.path.basename(config) == "cavia_5way1shot.gin":  # one compiled chunk of updates
        ran, losses, *_ = trainer.train_chunk(tf.constant(2))
        assert int(ran) == 2 and np.isfinite(losses.numpy()).all()


@pytest.mark.parametrize("config", [c for c in END_TO_END_CONFIGS if "5way1shot" not in c])
def test_every_end_to_end_setting_is_its_5way1shot_config_at_other_ways_and_shots(config):
    """The same bindings as the method's 5-way 1-shot config but the episode's ways and
    shots (and the include that sets them)."""
    bindings = {}
    for name in (config, re.sub(r"_\d+way\d+shot", "_5way1shot", config)):
        parse_gin([name], [])
        bindings[name] = {
            line for line in gin.config_str().splitlines() if line and not line.startswith("#")
        }
    other, base = bindings.values()
    ways, shots = re.search(r"_(\d+)way(\d+)shot", config).groups()
    expected = {f"NUM_SHOTS = {shots}", f"NUM_WAYS = {ways}"} - base
    assert {line for line in other - base if line.startswith("NUM_")} == expected
    assert not {line for line in other ^ base if not line.startswith("NUM_")}


@pytest.mark.parametrize(
    ("binding", "message"),
    [
        ("NUM_SHOTS=15", r"has 12 images; 15-shot episodes with 10 queries need 25"),
        ("NUM_WAYS=17", r"the train split has 16 classes .*; 17-way episodes need 17"),
    ],
)
def test_an_end_to_end_episode_that_cannot_be_drawn_stops_at_start(
    binding, message, omniglot_images, tmp_path
):
    parse_gin(
        ["gin/omniglot_conv/cavia_5way1shot.gin"], [f"IMAGE_DIR={omniglot_images!r}", binding]
    )
    with pytest.raises(ValueError, match=message) as info:
        Trainer(model_dir=str(tmp_path / "run"))
    assert "np.str_" not in str(info.value)


@pytest.fixture(scope="module")
def omniglot_images(tmp_path_factory):
    return str(write_fake_omniglot(tmp_path_factory.mktemp("omniglot")))


def test_a_subclassed_model_gives_no_penultimate_features_and_says_so():
    """What a user's model offers is read in one place (task_stacked.is_graph_of_layers):
    a subclassed model has no graph of layers to take the penultimate features from."""
    from viable_tf.networks.keras_model import UserNetwork

    class Subclassed(keras.Model):
        def __init__(self, units):
            super().__init__()
            self.dense = keras.layers.Dense(units)

        def call(self, x):
            return self.dense(x)

    network = UserNetwork(Subclassed(1), input_dim=1, output_dim=1, context_dim=0)
    with pytest.raises(ValueError, match="this one is subclassed or has no layers"):
        _ = network.penultimate_dim
