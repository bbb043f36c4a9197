"""Initialisation (docs/method.md §3.1): the code lineage's ±1/sqrt(fan_in), or Keras' defaults."""

import math

import numpy as np
import pytest
import tensorflow as tf

from viable_tf.cli import train as train_cli
from viable_tf.learners import VIABLE
from viable_tf.networks import PredictionNetwork, RelationLossNetwork, SimpleLossNetwork
from viable_tf.tasks import SineTasks
from viable_tf.training import PerformanceSpec, Trainer

F = 4  # per-point features (L_T, x, y_hat, y)


def _bounds(network) -> dict[str, float]:
    """The torch bound 1/sqrt(fan_in) of every weight, fan_in of its whole layer."""
    if isinstance(network, PredictionNetwork):
        widths = (*network.hidden_units, network.output_dim)
        first = network.input_dim + network.context_dim  # [x; phi]
        bounds = {"kernel_x": first, "kernel_context": first, "bias_0": first}
        for i, fan_in in enumerate(widths[:-1], 1):
            bounds[f"kernel_{i}"] = bounds[f"bias_{i}"] = fan_in
    else:
        units = network.hidden_units
        first = 2 * F if isinstance(network, RelationLossNetwork) else F
        if isinstance(network, RelationLossNetwork):
            bounds = {"kernel_first": first, "kernel_second": first, "bias_0": first}
        else:
            bounds = {"hidden_0/kernel": first, "hidden_0/bias": first}
        for i, fan_in in enumerate(units[:-1], 1):
            bounds[f"hidden_{i}/kernel"] = bounds[f"hidden_{i}/bias"] = fan_in
        bounds["output/kernel"] = units[-1]
    return {name: 1.0 / math.sqrt(fan_in) for name, fan_in in bounds.items()}


def _networks(init):
    prediction = PredictionNetwork(input_dim=1, output_dim=1, context_dim=5, init=init)
    simple = SimpleLossNetwork(hidden_units=(32, 32, 32), init=init)
    relation = RelationLossNetwork(hidden_units=(32, 32, 32), init=init)
    for loss_network in (simple, relation):
        loss_network.build((None, None, F))
    return prediction, simple, relation


def _named(network) -> dict[str, np.ndarray]:
    prefix = network.name + "/"
    return {v.path.removeprefix(prefix): v.numpy() for v in network.weights}


@pytest.mark.parametrize("index", [0, 1, 2], ids=["prediction", "simple", "relation"])
def test_torch_init_is_uniform_in_one_over_sqrt_fan_in(index):
    network = _networks("torch")[index]
    weights, bounds = _named(network), _bounds(network)
    assert set(weights) == set(bounds)
    for name, value in weights.items():
        bound = bounds[name]
        assert np.abs(value).max() <= bound, name
        # Many draws reach near the bound and spread evenly: the bound is the one used.
        if value.size >= 32:
            assert np.abs(value).max() > 0.8 * bound, name
            assert abs(np.mean(np.abs(value)) - bound / 2) < 0.25 * bound, name


def test_keras_init_has_glorot_kernels_and_zero_biases():
    prediction, _, relation = _networks("keras")
    weights = {**_named(prediction), **_named(relation)}
    for name, value in weights.items():
        if "bias" in name:
            assert not value.any(), name
    # The relation network's first layer is one [2F, H] Glorot kernel split in two.
    limit = math.sqrt(6.0 / (2 * F + 32))
    assert np.abs(relation.kernel_first.numpy()).max() <= limit


@pytest.mark.parametrize("init", ["torch", "keras"])
def test_every_weight_is_its_own_draw(init):
    """No two weights start equal (Keras reuses an unseeded initializer's draws)."""
    values = [v for network in _networks(init) for v in _named(network).values() if v.any()]
    flat = [tuple(np.ravel(v)[:8]) for v in values]
    assert len(set(flat)) == len(flat)


def _relu_loss(init):
    network = RelationLossNetwork(hidden_units=(32, 32, 32), init=init)
    network.build((None, None, F))
    features = tf.random.normal([3, 5, F])
    mask = tf.ones([3, 5], tf.bool)
    return network, features, mask


def test_relu_loss_network_is_homogeneous_under_keras_init_only():
    """Lhat(c f) = c Lhat(f) for c > 0 with zero biases and ReLU; not with torch biases."""
    for init, homogeneous in (("keras", True), ("torch", False)):
        network, features, mask = _relu_loss(init)
        base = network(features, mask).numpy()
        for c in (0.5, 3.0):
            scaled = network(c * features, mask).numpy()
            assert np.allclose(scaled, c * base, rtol=1e-5, atol=1e-6) == homogeneous, init


@pytest.mark.slow
def test_relu_loss_network_biases_never_change_in_meta_training(tmp_path):
    trainer = Trainer(
        model_dir=str(tmp_path),
        tasks=SineTasks(),
        learner=VIABLE,  # relVIABLE, ReLU, torch init
        meta_batch_size=5,
        performance=PerformanceSpec(steps_per_call=10),
        show_progress=False,
    )
    loss_network = trainer.learner.loss_network
    biases = {v.path: v.numpy() for v in loss_network.weights if "bias" in v.path}
    kernels = {v.path: v.numpy() for v in loss_network.weights if "kernel" in v.path}
    assert biases and all(b.any() for b in biases.values())  # non-zero: torch init
    trainer.train_chunk(tf.constant(10))
    for v in loss_network.weights:
        if "bias" in v.path:
            np.testing.assert_array_equal(v.numpy(), biases[v.path], err_msg=v.path)
        else:
            assert not np.array_equal(v.numpy(), kernels[v.path]), v.path


def test_unknown_init_is_one_line_naming_the_choices(run_cli, tmp_path):
    with pytest.raises(
        ValueError, match=r"unknown init 'xavier': expected one of 'torch', 'keras'"
    ):
        SimpleLossNetwork(init="xavier")
    argv = ["--gin_file=sine/relviable.gin", "--gin_param=INIT='xavier'", f"--model_dir={tmp_path}"]
    code, out = run_cli(train_cli, argv)
    assert code == 2
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("viable-train: error:"), out.err
    assert "'torch', 'keras'" in lines[0]


def test_symmetric_init_starts_the_pair_network_symmetric_in_j_and_k():
    network = RelationLossNetwork(hidden_units=(8, 8), symmetric_init=True)
    network.build((None, None, F))
    np.testing.assert_array_equal(network.kernel_first.numpy(), network.kernel_second.numpy())
    features = tf.random.normal([1, 4, F])
    pairs = network.pair_losses(features).numpy()[0]  # [K, K]
    np.testing.assert_allclose(pairs, pairs.T, atol=1e-6)
