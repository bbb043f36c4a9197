import numpy as np
import pytest
from scipy import stats

from viable_tf.evaluation import mean_confidence_interval, validation_evaluator
from viable_tf.evaluation import test_evaluator as make_test_evaluator
from viable_tf.learners import CAVIA
from viable_tf.tasks import SineTasks


def test_confidence_interval_is_student_t_by_hand():
    values = np.array([1.0, 2.0, 3.0, 4.0])
    result = mean_confidence_interval(values)
    # mean 2.5; sd = sqrt(5/3); sem = sd / 2; t(0.975, 3) = 3.182446...
    expected = 3.182446305284263 * np.sqrt(5.0 / 3.0) / 2.0
    assert result.mean == 2.5 and result.num == 4
    np.testing.assert_allclose(result.ci95, expected, rtol=1e-9)
    np.testing.assert_allclose(result.ci95, stats.sem(values) * stats.t.ppf(0.975, 3), rtol=1e-12)
    with pytest.raises(ValueError, match="at least one value"):
        mean_confidence_interval(np.array([]))


def test_test_tasks_are_fixed_and_follow_the_protocol():
    tasks = SineTasks(num_support=10)
    evaluator = make_test_evaluator(tasks, num_tasks=250)
    batch, _ = evaluator.batch(0, 100)
    again, _ = make_test_evaluator(tasks, num_tasks=250).batch(0, 100)
    np.testing.assert_array_equal(batch.support_x, again.support_x)
    np.testing.assert_allclose(batch.query_x[0, :, 0], np.linspace(-5, 5, 100), atol=1e-6)
    assert batch.support_x.shape == (100, 10, 1)
    other_k, _ = make_test_evaluator(tasks, num_tasks=250, num_support=4).batch(0, 100)
    assert other_k.support_x.shape == (100, 4, 1)
    validation, _ = validation_evaluator(tasks).batch(0, 100)
    assert not np.allclose(validation.support_x, batch.support_x)


def test_same_weights_same_number_and_per_task_scores():
    tasks = SineTasks(num_support=10)
    learner = CAVIA(input_dim=1, output_dim=1)
    first = make_test_evaluator(tasks, num_tasks=250)(learner)
    second = make_test_evaluator(tasks, num_tasks=250)(learner)
    assert first.mean == second.mean and first.per_task.shape == (250,)
    # The summary is of the per-task scores, computed independently here with SciPy.
    scores = first.per_task.astype(np.float64)
    np.testing.assert_allclose(first.mean, np.mean(scores), rtol=1e-12)
    low, high = stats.t.interval(0.95, df=249, loc=np.mean(scores), scale=stats.sem(scores))
    np.testing.assert_allclose(first.ci95, (high - low) / 2, rtol=1e-9)
    assert first.inner_loss_pre.shape == first.inner_loss_post.shape == (250,)
    # A different learner gets a different number on the same tasks.
    assert (
        make_test_evaluator(tasks, num_tasks=250)(CAVIA(input_dim=1, output_dim=1)).mean
        != first.mean
    )


def test_k_above_the_padded_size_is_refused():
    with pytest.raises(ValueError, match="larger than the padded support size 10"):
        make_test_evaluator(SineTasks(num_support=10), num_support=11)


def test_a_small_task_set_is_drawn_once_and_scored_the_same(monkeypatch):
    from viable_tf.evaluation import core

    learner = CAVIA(input_dim=1, output_dim=1)
    for budget, draws in ((core.CACHE_BYTES, 1), (0, 2)):
        monkeypatch.setattr(core, "CACHE_BYTES", budget)
        evaluator = validation_evaluator(SineTasks())
        drawn = []

        def counted(batches=evaluator.batches, drawn=drawn):
            drawn.append(1)
            return batches()

        monkeypatch.setattr(evaluator, "batches", counted)
        first, second = evaluator(learner), evaluator(learner)
        np.testing.assert_array_equal(first.per_task, second.per_task)
        assert len(drawn) == draws
