import math

import numpy as np
import pytest
import tensorflow as tf

from viable_tf.learners import CAVIA
from viable_tf.tasks import SineTasks, masked_mean, seed_for


def test_shapes_and_targets_follow_the_sine_law():
    tasks = SineTasks(num_support=10, num_query=7)
    batch, params = tasks.sample_tasks(seed_for(0, 0), 25)
    assert batch.support_x.shape == (25, 10, 1)
    assert batch.support_y.shape == (25, 10, 1)
    assert batch.support_mask.shape == (25, 10)
    assert batch.query_x.shape == (25, 7, 1)
    a = params.amplitude.numpy()[:, None, None]
    p = params.phase.numpy()[:, None, None]
    np.testing.assert_allclose(batch.query_y, a * np.sin(batch.query_x.numpy() - p), atol=1e-6)
    assert np.all(batch.support_mask.numpy())
    assert a.min() >= 0.1 and a.max() <= 5.0
    assert p.min() >= 0.0 and p.max() <= math.pi
    x = np.concatenate([batch.support_x.numpy().ravel(), batch.query_x.numpy().ravel()])
    assert x.min() >= -5.0 and x.max() <= 5.0


def test_same_seed_same_tasks_other_step_other_tasks():
    tasks = SineTasks()
    first, _ = tasks.sample_tasks(seed_for(3, 17), 5)
    again, _ = tasks.sample_tasks(seed_for(3, 17), 5)
    other, _ = tasks.sample_tasks(seed_for(3, 18), 5)
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b)
    assert not np.allclose(first.support_x, other.support_x)


def test_sampling_is_graph_only_and_seeded_by_a_tensor_step():
    tasks = SineTasks()
    step = tf.Variable(4, dtype=tf.int64)

    @tf.function
    def sample():
        return tasks.sample_tasks(seed_for(1, step), 3)[0].support_x

    eager = tasks.sample_tasks(seed_for(1, 4), 3)[0].support_x
    np.testing.assert_array_equal(sample(), eager)


def test_variable_support_size_mixes_k_from_zero_to_max():
    tasks = SineTasks(num_support=20, min_support=0)
    batch, _ = tasks.sample_tasks(seed_for(0, 1), 2000)
    mask = batch.support_mask.numpy()
    k = mask.sum(axis=1)
    assert set(k) == set(range(21))  # every K in {0..20} occurs
    # The mask is a prefix: real points first, then padding.
    np.testing.assert_array_equal(mask, np.arange(20)[None, :] < k[:, None])


def test_fixed_k_override_and_evaluation_grid():
    tasks = SineTasks(num_support=20, min_support=0)
    grid = tasks.evaluation_grid(100)
    batch, _ = tasks.sample_tasks(seed_for(0, 0), 4, num_support=3, query_x=grid)
    assert batch.support_x.shape == (4, 3, 1)
    assert np.all(batch.support_mask.numpy())
    np.testing.assert_allclose(batch.query_x[2, :, 0], np.linspace(-5, 5, 100), atol=1e-6)
    empty, _ = tasks.sample_tasks(seed_for(0, 0), 4, num_support=0)
    assert empty.support_x.shape == (4, 0, 1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_support": 10, "min_support": 11}, "min_support=11 is outside"),
        ({"num_support": -1}, "num_support must be >= 0"),
        ({"num_query": 0}, "num_query must be >= 1"),
        ({"amplitude_range": (5.0, 0.1)}, "amplitude_range"),
    ],
)
def test_bad_configuration_is_refused_with_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SineTasks(**kwargs)


def test_masked_mean_ignores_masked_entries_even_if_not_finite():
    values = tf.constant([[1.0, 3.0, np.nan], [np.inf, 2.0, 4.0], [7.0, 7.0, 7.0]])
    mask = tf.constant([[True, True, False], [False, True, True], [False, False, False]])
    np.testing.assert_allclose(masked_mean(values, mask, axis=1), [2.0, 3.0, 0.0])


def test_sine_tasks_meet_the_task_family_contract():
    from viable_tf.tasks.base import TaskFamily

    tasks = SineTasks()
    assert isinstance(tasks, TaskFamily)
    batch = tasks.sample(seed_for(2, 3), 4)  # the trainer's call: a TaskBatch alone
    full, _ = tasks.sample_tasks(seed_for(2, 3), 4)
    for a, b in zip(batch, full, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    # Its protocols are the evaluation layer's, dispatched on the family's type.
    from viable_tf.evaluation import figures, test_protocol, validation_protocol

    assert test_protocol(tasks).num_tasks == 1000
    assert test_protocol(tasks, num_support=4).num_support == 4
    assert validation_protocol(tasks).num_tasks == 100
    assert set(figures(tasks, CAVIA(input_dim=1, output_dim=1))) == {"adapted_fits"}
    inputs = tasks.warmup_inputs(np.random.default_rng(0), num_support=3, num_query=5)
    assert inputs["support_x"].shape == (1, 3, 1) and inputs["query_x"].shape == (1, 5, 1)
    assert np.all(np.abs(inputs["support_x"]) <= 5) and np.all(np.abs(inputs["support_y"]) <= 5)
