"""LEO and VIABLE on LEO: steps derived by hand, the penalties against NumPy,
the relation network's symmetries, padding, the learner contract, configs, export and a
served request."""

import glob
import json
import os

import grpc
import keras
import numpy as np
import pytest
import requests
import tensorflow as tf
from fake_leo import feature_episodes, write_fake_leo
from serving_harness import RunningServer, model_config

from serving.client import Client
from serving.server import ServerOptions
from viable_tf.cli.common import parse_gin
from viable_tf.export import export_saved_model
from viable_tf.learners import LEO, LEOVIABLE, Residual
from viable_tf.learners.leo_noise import Noise as _Noise
from viable_tf.learners.leo_noise import batch_seed
from viable_tf.learners.prototypes import EMPTY_CLASS_BIAS
from viable_tf.networks import RelationLossNetwork, SimpleLossNetwork
from viable_tf.training import (
    ClipEachNorm,
    ClipElementwise,
    EvaluationSpec,
    FallBackWhereNonfinite,
    OptimizerChain,
    PerformanceSpec,
    Trainer,
)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N, D = 4, 16


def _small(loss_network):
    return lambda: loss_network(hidden_units=(16,))


LEARNERS = {
    "leo": lambda **kw: LEO(**kw),
    "leo_simviable": lambda **kw: LEOVIABLE(loss_network=_small(SimpleLossNetwork), **kw),
    "leo_relviable": lambda **kw: LEOVIABLE(loss_network=_small(RelationLossNetwork), **kw),
    "leo_relviable_ft": lambda **kw: LEOVIABLE(
        loss_network=_small(RelationLossNetwork), learned_finetuning=True, **kw
    ),
}


def _learner(name="leo", seed=4, **kw):
    keras.utils.set_random_seed(seed)
    settings = {"num_latents": 8, "num_latent_steps": 2, "num_finetuning_steps": 2, **kw}
    return LEARNERS[name](input_dim=D, output_dim=N, **settings)


def _episodes(b=3, shots=2, queries=3, seed=0):
    return feature_episodes(b=b, shots=shots, queries=queries, seed=seed, ways=N, dim=D)


# -- one step of each kind, by hand ------------------------------------------------------


def _numpy_codes(learner, x, labels):
    """Encoder, relation network over every ordered pair, class means (no dropout)."""
    e, r0, r1, r2 = (w.numpy() for w in learner.kernels[:4])
    latents = learner.num_latents
    h = x @ e  # [K, L]
    relu = lambda a: np.maximum(a, 0.0)  # noqa: E731
    pairs = np.concatenate(
        [np.repeat(h[:, None], len(h), 1), np.repeat(h[None], len(h), 0)], axis=-1
    )  # [K, K, 2L]: [h_j; h_k]
    per_point = (relu(relu(pairs @ r0) @ r1) @ r2).mean(axis=1)  # [K, 2L]
    params = np.stack([per_point[labels == c].mean(0) for c in range(N)])  # [N, 2L]
    return params[:, :latents]  # the means: no sampling outside meta-training


def _numpy_loss_and_weight_gradient(w, x, labels):
    logits = x @ w.T  # [K, N]
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    onehot = np.eye(N)[labels]
    loss = -np.sum(np.log(p[np.arange(len(labels)), labels]))  # summed over the support set
    return loss, (p - onehot).T @ x  # dL/dw [N, D]


def _tiny_task():
    batch = _episodes(b=1, shots=2)
    return batch.support_x.numpy()[0].astype(np.float64), batch.support_y.numpy()[0], batch


def test_one_latent_step_by_hand():
    learner = _learner(num_latent_steps=1, num_finetuning_steps=0)
    learner.latent_lr.assign(np.linspace(0.5, 1.5, 8))  # a rate per latent
    x, labels, batch = _tiny_task()
    decoder = learner.decoder_kernel.numpy()[:, :D]  # the weights' means from a code
    z0 = _numpy_codes(learner, x, labels)
    loss, grad_w = _numpy_loss_and_weight_gradient(z0 @ decoder, x, labels)
    z1 = z0 - learner.latent_lr.numpy() * (grad_w @ decoder.T)  # dL/dz = dL/dw W_m^T
    state, losses = learner.adapt(*batch[:3], return_inner_losses=True)
    weights, class_bias = state.head
    np.testing.assert_allclose(weights[0], z1 @ decoder, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(losses[0, 0], loss, rtol=1e-5)
    np.testing.assert_array_equal(class_bias, np.zeros((1, N)))
    # The encoder penalty of that step: mean over classes and latents of (z1 - z0)^2.
    _, _, _, penalty = learner._adapt(*batch[:3])
    np.testing.assert_allclose(penalty[0], np.mean((z1 - z0) ** 2), rtol=1e-4)


def test_one_finetuning_step_by_hand():
    learner = _learner(num_latent_steps=0, num_finetuning_steps=1)
    learner.finetuning_lr_weights.assign(np.linspace(0.01, 0.2, D))  # a rate per feature
    x, labels, batch = _tiny_task()
    w0 = _numpy_codes(learner, x, labels) @ learner.decoder_kernel.numpy()[:, :D]
    loss, grad_w = _numpy_loss_and_weight_gradient(w0, x, labels)
    state, losses = learner.adapt(*batch[:3], return_inner_losses=True)
    weights, _ = state.head
    expected = w0 - learner.finetuning_lr_weights.numpy() * grad_w
    np.testing.assert_allclose(weights[0], expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(losses[0, 0], loss, rtol=1e-5)


# -- the penalties, against NumPy ------------------------------------------------------------


def test_l2_and_orthogonality_penalties_match_numpy():
    learner = _learner()
    kernels = [w.numpy().astype(np.float64) for w in learner.kernels]
    np.testing.assert_allclose(
        learner.l2_penalty(), sum(np.sum(w**2) / 2 for w in kernels), rtol=1e-5
    )
    w = kernels[-1]  # the decoder [L, 2D]
    norms = np.linalg.norm(w, axis=1, keepdims=True)
    correlation = (w @ w.T) / (norms @ norms.T)
    expected = np.mean((correlation - np.eye(len(w))) ** 2)
    np.testing.assert_allclose(learner.orthogonality_penalty(), expected, rtol=1e-4, atol=1e-7)


def test_kl_is_log_q_minus_log_prior_at_the_sample():
    learner = _learner()
    mean = tf.constant([[[0.3, -1.2], [2.0, 0.1]]])
    s = tf.constant([[[0.5, 1.0], [0.9, 2.0]]])
    z, log_ratio = learner._sample(mean, s, offset=0.0, noise=_Noise(tf.constant([1, 2], tf.int64)))
    sigma = np.exp(s.numpy()) - 1.0

    def log_normal(v, mu, sd):
        return -0.5 * ((v - mu) / sd) ** 2 - np.log(sd) - 0.5 * np.log(2 * np.pi)

    z = z.numpy()
    expected = log_normal(z, mean.numpy(), sigma) - log_normal(z, 0.0, 1.0)
    np.testing.assert_allclose(log_ratio, expected, rtol=1e-4, atol=1e-5)
    # Outside meta-training: the mean, no KL.
    z_eval, ratio_eval = learner._sample(mean, s, offset=0.0, noise=None)
    np.testing.assert_array_equal(z_eval, mean)
    np.testing.assert_array_equal(ratio_eval, np.zeros_like(mean))


def test_the_outer_objective_is_the_query_loss_plus_each_weighted_penalty():
    batch = _episodes()
    base = _learner(kl_weight=0.0, encoder_penalty_weight=0.0, l2_penalty_weight=0.0,
                    orthogonality_penalty_weight=0.0)  # fmt: skip
    loss0, metrics = base.meta_loss(batch)
    for name, term in (
        ("kl_weight", lambda m, learner: m["kl"]),
        ("encoder_penalty_weight", lambda m, learner: m["encoder_penalty"]),
        ("l2_penalty_weight", lambda m, learner: learner.l2_penalty()),
        ("orthogonality_penalty_weight", lambda m, learner: learner.orthogonality_penalty()),
    ):
        weights = {
            "kl_weight": 0.0,
            "encoder_penalty_weight": 0.0,
            "l2_penalty_weight": 0.0,
            "orthogonality_penalty_weight": 0.0,
            name: 0.5,
        }
        learner = _learner(**weights)
        loss, m = learner.meta_loss(batch)  # the same noise: drawn from the batch
        np.testing.assert_allclose(loss - loss0, 0.5 * term(m, learner), rtol=1e-4, atol=1e-6)
    assert float(metrics["kl"]) != 0.0 and float(metrics["encoder_penalty"]) > 0.0


# -- symmetries, padding, the contract ---------------------------------------------------------


@pytest.mark.parametrize("name", sorted(LEARNERS))
def test_the_support_sets_order_changes_nothing(name):
    learner = _learner(name)
    batch = _episodes()
    order = np.random.default_rng(1).permutation(batch.support_x.shape[1])
    shuffled = batch._replace(
        support_x=tf.gather(batch.support_x, order, axis=1),
        support_y=tf.gather(batch.support_y, order, axis=1),
    )
    for a, b in zip(learner.adapt(*batch[:3]).head, learner.adapt(*shuffled[:3]).head, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(LEARNERS))
def test_the_learner_contract(name):
    learner = _learner(name)
    assert learner.method_name == name
    batch = _episodes()
    state = learner.adapt(*batch[:3])
    assert [s.shape for s in state.head] == [(3, N, D), (3, N)]  # its decoded classifier
    assert state.context is None and not state.weights
    logits = learner.predict(state, batch.query_x)
    assert logits.shape == (3, 3 * N, N)
    # K = 0: no class has a code, every class is equally (un)likely.
    empty = learner.adapt(batch.support_x, batch.support_y, tf.zeros_like(batch.support_mask))
    np.testing.assert_allclose(
        tf.nn.softmax(learner.predict(empty, batch.query_x)), np.full((3, 3 * N, N), 1 / N)
    )
    # Every weight gets a meta-gradient, the learning rates included.
    with tf.GradientTape() as tape:
        loss, metrics = learner.meta_loss(batch)
    grads = tape.gradient(loss, learner.trainable_variables)
    assert np.isfinite(loss) and np.isfinite(metrics["inner_loss_pre"])
    for variable, grad in zip(learner.trainable_variables, grads, strict=True):
        if "bias" in variable.path and "network" in variable.path:
            continue  # a ReLU loss network's biases: zero, as on CAVIA (test_learners.py)
        assert grad is not None and np.any(grad.numpy() != 0), variable.path
    # Compiled by XLA: the same noise, the same loss up to rounding.
    compiled = tf.function(learner.meta_loss, jit_compile=True, autograph=False)(batch)[0]
    np.testing.assert_allclose(compiled, loss, rtol=1e-3)


def test_the_training_noise_travels_with_the_state_and_evaluation_has_none():
    """LEO keeps no mode: meta-training's noise is handed to _adapt and carried by the
    states adapted with it (predict's dropout reads it there); adapt, for evaluation,
    gives a state without noise, and its predictions do not change from call to call."""
    learner = _learner()
    batch = _episodes()
    noise = _Noise(batch_seed(batch))
    state, _, _, _ = learner._adapt(*batch[:3], noise=noise)
    assert state.noise is noise
    # tf.nest keeps it in the nesting's metadata, beside the tensors it rebuilds.
    assert tf.nest.map_structure(tf.identity, state).noise is noise
    assert state.replace(head=state.head).noise is noise
    drawn = noise.draws
    learner.predict(state, batch.query_x)  # dropout on the query: one more draw
    assert noise.draws == drawn + 1
    evaluated = learner.adapt(*batch[:3])
    assert evaluated.noise is None
    np.testing.assert_array_equal(
        learner.predict(evaluated, batch.query_x), learner.predict(evaluated, batch.query_x)
    )


def test_training_noise_is_a_function_of_the_tasks():
    batch, other = _episodes(seed=0), _episodes(seed=1)
    seeds = [batch_seed(b).numpy() for b in (batch, batch, other)]
    np.testing.assert_array_equal(seeds[0], seeds[1])
    assert not np.array_equal(seeds[0], seeds[2])
    zero = {
        "kl_weight": 0.0,
        "encoder_penalty_weight": 0.0,
        "l2_penalty_weight": 0.0,
        "orthogonality_penalty_weight": 0.0,
    }
    learner = _learner(**zero)
    np.testing.assert_array_equal(learner.meta_loss(batch)[0], learner.meta_loss(batch)[0])
    # Meta-training samples and drops out; adaptation for evaluation takes the means.
    evaluated = tf.reduce_mean(learner.query_loss(batch, learner.adapt(*batch[:3])))
    assert abs(float(learner.meta_loss(batch)[0]) - float(evaluated)) > 1e-3
    deterministic = _learner(**zero, dropout_rate=0.0)
    deterministic_eval = tf.reduce_mean(
        deterministic.query_loss(batch, deterministic.adapt(*batch[:3]))
    )
    np.testing.assert_allclose(deterministic_eval, evaluated, rtol=1e-6)  # dropout: training only


def test_an_empty_class_is_never_predicted_and_nothing_is_nan():
    learner = _learner()
    batch = _episodes(b=1)
    mask = batch.support_mask.numpy()
    mask[0, batch.support_y.numpy()[0] == 2] = False  # no real point of class 2
    state = learner.adapt(batch.support_x, batch.support_y, tf.constant(mask))
    weights, class_bias = state.head
    np.testing.assert_array_equal(class_bias[0], [0, 0, EMPTY_CLASS_BIAS, 0])
    probabilities = tf.nn.softmax(learner.predict(state, batch.query_x))
    assert np.all(np.isfinite(weights)) and np.all(probabilities[..., 2] == 0)


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"num_latents": 0}, "LEO.num_latents must be >= 1, got 0"),
        ({"num_latent_steps": -1}, "LEO.num_latent_steps must be >= 0, got -1"),
        ({"num_finetuning_steps": -2}, "LEO.num_finetuning_steps must be >= 0, got -2"),
        ({"kl_weight": -0.1}, "LEO.kl_weight must be >= 0, got -0.1"),
        ({"encoder_penalty_weight": -1.0}, "LEO.encoder_penalty_weight must be >= 0"),
        ({"l2_penalty_weight": -1e-8}, "LEO.l2_penalty_weight must be >= 0"),
        ({"orthogonality_penalty_weight": -1.0}, "LEO.orthogonality_penalty_weight must be >= 0"),
        ({"dropout_rate": 1.0}, "LEO.dropout_rate must be < 1, got 1.0"),
        ({"finetuning_lr": 0.0}, "LEO.finetuning_lr must be > 0, got 0.0"),
        ({"task_loss": "mse"}, "LEO is a classifier: task_loss must be 'cross_entropy'"),
    ],
)
def test_bad_configurations_are_one_line(kw, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        LEO(input_dim=D, output_dim=N, **kw)


# -- configs ------------------------------------------------------------------------------

LEO_CONFIGS = sorted(
    os.path.relpath(p, REPO)
    for dataset in ("mini_imagenet", "omniglot")
    for p in glob.glob(os.path.join(REPO, "gin", dataset, "leo*shot.gin"))
)


@pytest.fixture(scope="module")
def config_data(tmp_path_factory):
    split_classes = {"train": 21, "val": 20, "test": 20}
    return {
        dim: write_fake_leo(
            tmp_path_factory.mktemp(dataset), dataset=dataset, dim=dim, split_classes=split_classes
        )
        for dataset, dim in (("miniImageNet", 640), ("omniglot", 64))
    }


def test_every_leo_method_and_setting_has_a_config():
    names = {os.path.relpath(c, "gin") for c in LEO_CONFIGS}
    for method in ("leo", "leo_simviable", "leo_relviable"):
        for setting in ("5way1shot", "5way5shot", "20way1shot"):
            assert f"omniglot/{method}_{setting}.gin" in names
        for setting in ("5way1shot", "5way5shot"):
            assert f"mini_imagenet/{method}_{setting}.gin" in names


# LEO's README table (google-deepmind/leo), Mini-ImageNet.
LEO_TABLE = {
    1: dict(outer_lr=2.739071e-4, l2=3.623413e-10, orthogonality=0.188103, dropout=0.307651,
            kl=0.756143, encoder=5.756821e-6),
    5: dict(outer_lr=4.102361e-4, l2=8.540338e-9, orthogonality=1.523998e-3, dropout=0.300299,
            kl=0.466387, encoder=2.661608e-7),
}  # fmt: skip


@pytest.mark.parametrize("config", LEO_CONFIGS)
def test_leo_configs_build(config, config_data, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    dim = 640 if "mini_imagenet" in config else 64
    parse_gin([config], [f"DATA_DIR={config_data[dim]!r}", "Trainer.show_progress=False"])
    trainer = Trainer(model_dir=str(tmp_path / "run"))
    learner = trainer.learner
    method, setting = os.path.basename(config).removesuffix(".gin").rsplit("_", 1)
    ways, shots = (int(n) for n in setting.removesuffix("shot").split("way"))
    assert learner.method_name == method and isinstance(learner, LEO)
    assert (learner.input_dim, learner.output_dim, trainer.tasks.num_shots) == (dim, ways, shots)
    assert (learner.num_latents, learner.num_latent_steps, learner.num_finetuning_steps) == (
        64,
        5,
        5,
    )
    assert trainer.chain.transforms == (
        ClipElementwise(0.1),
        ClipEachNorm(0.1),
        FallBackWhereNonfinite(penalty_weight=1e-4),
    )
    if dim == 640:
        table = LEO_TABLE[shots]
        assert trainer.meta_batch_size == 12
        assert float(trainer.lr_schedule(10**6)) == pytest.approx(table["outer_lr"])  # constant
        assert learner.l2_penalty_weight == table["l2"]
        assert learner.orthogonality_penalty_weight == table["orthogonality"]
        assert learner.dropout_rate == table["dropout"]
        assert learner.kl_weight == table["kl"]
        assert learner.encoder_penalty_weight == table["encoder"]


@pytest.mark.slow
def test_a_leo_config_trains(config_data, tmp_path, monkeypatch):
    """LEO + relVIABLE under XLA, two meta-updates of the trainer's compiled chunk (the
    other configs build above). One latent and one fine-tuning step instead of 5 + 5: each
    unrolled step adds to XLA's compile (37 s at 5 + 5 in the whole suite, 14 s at 1 + 1 alone),
    and every op of a step is compiled either way."""
    monkeypatch.chdir(REPO)
    parse_gin(
        ["gin/omniglot/leo_relviable_5way1shot.gin"],
        [
            f"DATA_DIR={config_data[64]!r}",
            "Trainer.show_progress=False",
            "RelationLossNetwork.hidden_units=(16, 16)",
            "LATENT_STEPS=1",
            "FINETUNING_STEPS=1",
        ],
    )
    trainer = Trainer(model_dir=str(tmp_path / "run"))
    assert trainer.jit_compile and trainer.learner.loss_network.hidden_units == (16, 16)
    assert (trainer.learner.num_latent_steps, trainer.learner.num_finetuning_steps) == (1, 1)
    ran, loss_sums, *_, first_bad = trainer.train_chunk(tf.constant(2))
    assert int(ran) == 2 and int(first_bad) == -1 and np.all(np.isfinite(loss_sums.numpy()))


# -- export and serving ------------------------------------------------------------------------


def test_export_serves_leo_and_refuses_an_empty_class(tmp_path):
    """serving_default answers as the learner's means do; a support set without a class is
    one INVALID_ARGUMENT (gRPC) / 400 (REST) naming the class; the same over both."""
    learner = _learner("leo_relviable")
    base = str(tmp_path / "leo")
    path = export_saved_model(learner, base)
    with open(os.path.join(path, "assets.extra", "viable_model.json")) as f:
        description = json.load(f)
    assert description["method"] == "leo_relviable" and "decodes" in description["every_class"]
    loaded = tf.saved_model.load(path)
    assert sorted(loaded.signatures) == ["serving_default", "serving_masked"]
    batch = _episodes(b=2)
    out = loaded.signatures["serving_default"](
        support_x=batch.support_x, support_y=batch.support_y, query_x=batch.query_x
    )
    state = learner.adapt(*batch[:3])
    np.testing.assert_allclose(out["logits"], learner.predict(state, batch.query_x), atol=1e-4)
    labels = batch.support_y.numpy()
    labels[1, labels[1] == 3] = 0  # task 1: no point of class 3
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"of every class 0\.\.3"):
        loaded.signatures["serving_default"](
            support_x=batch.support_x, support_y=tf.constant(labels), query_x=batch.query_x
        )
    options = ServerOptions(models=[model_config("leo", base)], port=0, rest_api_port=0)
    running = RunningServer(options)
    client = Client(running.grpc_target)
    try:
        good = client.predict(batch.support_x, batch.support_y, batch.query_x, model_name="leo")
        np.testing.assert_allclose(good["logits"], out["logits"], atol=1e-5)
        body = {
            "inputs": {
                "support_x": batch.support_x.numpy().tolist(),
                "support_y": batch.support_y.numpy().tolist(),
                "query_x": batch.query_x.numpy().tolist(),
            }
        }
        rest = requests.post(f"{running.rest_url}/v1/models/leo:predict", json=body, timeout=60)
        assert rest.status_code == 200
        np.testing.assert_array_equal(rest.json()["outputs"]["classes"], good["classes"])
        with pytest.raises(grpc.RpcError) as info:
            client.predict(batch.support_x, labels, batch.query_x, model_name="leo")
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        expected = "of every class 0..3 (this model decodes each class's weights from its "
        expected += "support points): class 3 has none in task 1"
        assert expected in info.value.details()
        body["inputs"]["support_y"] = labels.tolist()
        bad = requests.post(f"{running.rest_url}/v1/models/leo:predict", json=body, timeout=60)
        assert bad.status_code == 400 and expected in bad.json()["error"]
        # A malformed request is refused as by every other export.
        body["inputs"]["support_y"] = [[0.5] * labels.shape[1]] * 2
        url = f"{running.rest_url}/v1/models/leo:predict"
        assert requests.post(url, json=body, timeout=60).status_code == 400
    finally:
        client.close()
        running.stop()


# -- the public code's guard against a NaN meta-gradient -----------------------------------


class _SometimesNaN(LEO):
    """LEO whose meta-loss is NaN on every other meta-batch (by the batch's seed)."""

    def meta_loss(self, batch):
        loss, metrics = super().meta_loss(batch)
        return tf.where(batch_seed(batch)[0] % 2 == 0, np.nan, loss), metrics


@pytest.mark.slow
@pytest.mark.parametrize("fall_back", [True, False])
def test_a_nan_meta_update_takes_the_fallback_or_stops_training(fall_back, config_data, tmp_path):
    from viable_tf.tasks.classification import FewShotEpisodes

    tasks = FewShotEpisodes(
        data_dir=config_data[64], config="omniglot_center", num_ways=N, num_shots=1, num_queries=2
    )
    keras.utils.set_random_seed(0)
    trainer = Trainer(
        model_dir=str(tmp_path),
        tasks=tasks,
        learner=lambda **kw: _SometimesNaN(num_latents=8, num_latent_steps=1, **kw),
        meta_batch_size=2,
        optimizer=OptimizerChain(
            transforms=(FallBackWhereNonfinite(penalty_weight=1e-4),) if fall_back else ()
        ),
        evaluation=EvaluationSpec(summary_every=4),
        performance=PerformanceSpec(steps_per_call=12, jit_compile=False),
        show_progress=False,
    )
    before = [v.numpy() for v in trainer.variables]
    ran, loss_sums, _, counts, _, first_bad = trainer.train_chunk(tf.constant(12))
    if not fall_back:
        assert int(first_bad) >= 0 and int(ran) == int(first_bad) + 1
        return
    fallbacks = int(trainer.fallback_updates.numpy())
    assert int(ran) == 12 and int(first_bad) == -1 and 0 < fallbacks < 12
    assert np.all(np.isfinite(loss_sums.numpy())) and counts.numpy().sum() == 12
    after = {v.path: v.numpy() for v in trainer.variables}
    assert all(np.all(np.isfinite(value)) for value in after.values())
    assert not np.array_equal(after[trainer.learner.decoder_kernel.path], before[4])


def test_the_guard_falls_back_to_the_l2_penalty_gradient_as_leos_code():
    """LEO's fallback update: 1e-4 W for each kernel of its l2 penalty, zero for every
    other weight (the learning rates, the biases); zero throughout without a weight."""
    learner = _learner("leo")
    variables = learner.trainable_variables
    kernels = {id(w) for w in learner.kernels}
    assert 0 < len(kernels) < len(variables)
    fallback = FallBackWhereNonfinite(penalty_weight=1e-4).bind(learner).fallback(variables)
    for v, g in zip(variables, fallback, strict=True):
        expected = 1e-4 * v.numpy() if id(v) in kernels else np.zeros(v.shape)
        np.testing.assert_array_equal(g.numpy(), expected.astype(np.float32), err_msg=v.path)
    for g in FallBackWhereNonfinite().bind(learner).fallback(variables):
        assert not np.any(g.numpy())


def test_a_fallback_to_a_penalty_the_learner_lacks_is_refused_at_construction(tmp_path):
    """The l2 fallback on CAVIA (which has no penalized weights) fails in Trainer.__init__,
    in one line, not inside the compiled trace."""
    import gin

    from viable_tf.cli.common import parse_gin
    from viable_tf.training import Trainer

    parse_gin(
        ["sine/cavia.gin"],
        [
            "OptimizerChain.transforms = [@FallBackWhereNonfinite()]",
            "FallBackWhereNonfinite.penalty_weight = 1e-4",
        ],
    )
    try:
        with pytest.raises(ValueError, match="cavia has no penalized weights") as refused:
            Trainer(model_dir=str(tmp_path))
        assert "\n" not in str(refused.value).split("\n  In call to")[0]
    finally:
        gin.clear_config()


def test_a_residual_learned_loss_from_zero_steps_as_leo_does():
    """`form=Residual()` on LEO: the learned loss added to LEO's summed task loss, so with
    the loss network's output from zero the latent and fine-tuning steps are LEO's."""
    batch = _episodes()
    plain = _learner("leo")
    keras.utils.set_random_seed(4)
    residual = LEOVIABLE(
        loss_network=lambda: RelationLossNetwork(hidden_units=(16,), output_init="zeros"),
        form=Residual(),
        learned_finetuning=True,
        input_dim=D,
        output_dim=N,
        num_latents=8,
        num_latent_steps=2,
        num_finetuning_steps=2,
    )
    ours_state, theirs_state = residual.adapt(*batch[:3]), plain.adapt(*batch[:3])
    for ours, theirs in zip(ours_state.head, theirs_state.head, strict=True):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-6)
