"""attVIABLE's loss network: order-free, padding-free, defined at K = 0 and K = 1."""

import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from viable_tf.cli import train as train_cli
from viable_tf.learners import VIABLE
from viable_tf.networks import AttentionLossNetwork
from viable_tf.tasks import SineTasks, TaskBatch, seed_for


def _learner(**kwargs):
    return VIABLE(
        input_dim=1,
        output_dim=1,
        loss_network=lambda: AttentionLossNetwork(**kwargs),
    )


def _permuted(batch: TaskBatch, order) -> TaskBatch:
    return batch._replace(
        support_x=tf.gather(batch.support_x, order, axis=1),
        support_y=tf.gather(batch.support_y, order, axis=1),
        support_mask=tf.gather(batch.support_mask, order, axis=1),
    )


def test_inner_loss_and_adapted_prediction_ignore_the_order_of_the_support_set():
    learner = _learner()
    batch = SineTasks(num_support=12, min_support=3).sample(seed_for(5, 0), 4)
    shuffled = _permuted(batch, np.random.default_rng(0).permutation(12))
    state = learner.initial_state(4)
    args = (batch.support_x, batch.support_y, batch.support_mask)
    args_shuffled = (shuffled.support_x, shuffled.support_y, shuffled.support_mask)
    np.testing.assert_allclose(
        learner.inner_loss(state, *args), learner.inner_loss(state, *args_shuffled), atol=1e-5
    )
    adapted = learner.predict(learner.adapt(*args), batch.query_x)
    again = learner.predict(learner.adapt(*args_shuffled), batch.query_x)
    np.testing.assert_allclose(adapted, again, atol=1e-5)


def test_padded_points_change_nothing():
    learner = _learner()
    batch = SineTasks(num_support=5).sample(seed_for(1, 0), 3)
    padded = TaskBatch(
        support_x=tf.concat([batch.support_x, tf.fill([3, 4, 1], 1e3)], axis=1),
        support_y=tf.concat([batch.support_y, tf.fill([3, 4, 1], -1e3)], axis=1),
        support_mask=tf.concat([batch.support_mask, tf.zeros([3, 4], tf.bool)], axis=1),
        query_x=batch.query_x,
        query_y=batch.query_y,
    )
    for a, b in ((batch, padded),):
        loss_a, _ = learner.meta_loss(a)
        loss_b, _ = learner.meta_loss(b)
        np.testing.assert_allclose(loss_a, loss_b, rtol=1e-6)


def test_pre_layer_norm_blocks_keep_order_and_padding_free():
    """norm='pre' (LayerNorm before each block and once before the head, the residual
    stream unnormalised; docs/RESULTS.md) keeps every property of the loss network."""
    learner = _learner(norm="pre")
    batch = SineTasks(num_support=12, min_support=3).sample(seed_for(5, 0), 4)
    shuffled = _permuted(batch, np.random.default_rng(0).permutation(12))
    adapted = learner.predict(
        learner.adapt(batch.support_x, batch.support_y, batch.support_mask), batch.query_x
    )
    again = learner.predict(
        learner.adapt(shuffled.support_x, shuffled.support_y, shuffled.support_mask),
        batch.query_x,
    )
    np.testing.assert_allclose(adapted, again, atol=1e-5)
    garbage = batch._replace(
        support_x=tf.where(batch.support_mask[..., None], batch.support_x, 1e3)
    )
    np.testing.assert_allclose(
        learner.meta_loss(garbage)[0], learner.meta_loss(batch)[0], rtol=1e-6
    )
    config = learner.loss_network.get_config()
    assert config["norm"] == "pre"
    assert AttentionLossNetwork.from_config(config).norm == "pre"
    with pytest.raises(ValueError, match="norm must be 'post' or 'pre', got 'middle'"):
        AttentionLossNetwork(norm="middle")


@pytest.mark.parametrize("k", [0, 1])
def test_k_zero_and_one(k):
    learner = _learner()
    batch = SineTasks(num_support=k).sample(seed_for(2, 0), 3)
    state = learner.adapt(batch.support_x, batch.support_y, batch.support_mask)
    prediction = learner.predict(state, batch.query_x)
    unadapted = learner.predict(learner.initial_state(3), batch.query_x)
    if k == 0:  # no support: no adaptation, and a zero (not NaN) inner loss
        np.testing.assert_array_equal(prediction, unadapted)
        inner = learner.inner_loss(state, batch.support_x, batch.support_y, batch.support_mask)
        np.testing.assert_array_equal(inner, np.zeros(3))
    else:  # one point attends to itself only
        assert np.all(np.isfinite(prediction)) and not np.allclose(prediction, unadapted)


@pytest.mark.slow
def test_a_bad_attention_config_is_one_line_on_the_console():
    """The whole process prints one line (no TensorFlow lines, no traceback)."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "viable_tf.cli.train",
            "--gin_file=sine/attviable.gin",
            "--gin_param=AttentionLossNetwork.num_heads=3",
            "--model_dir=/tmp/never-written",
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("viable-train: error:"), result.stderr
    assert "num_heads=3 does not divide width=32" in lines[0]


@pytest.mark.parametrize(
    ("config", "param", "message"),
    [
        ("sine/attviable.gin", "AttentionLossNetwork.width=30", "does not divide width=30"),
        ("sine/cavia.gin", "CAVIA.loss_network=@AttentionLossNetwork", "loss_network"),
    ],
    ids=["heads do not divide the width", "a learner without a learned loss"],
)
def test_a_bad_attention_config_is_one_line(config, param, message, run_cli, tmp_path):
    argv = [f"--gin_file={config}", f"--gin_param={param}", f"--model_dir={tmp_path}/run"]
    code, out = run_cli(train_cli, argv)
    assert code == 2, out.err[-2000:]
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("viable-train: error:"), out.err
    assert message in lines[0]
