"""The evaluation protocol of a task source: sine tasks or classification episodes."""

from __future__ import annotations

from viable_tf.evaluation.classification import (
    classification_test_evaluator,
    classification_validation_evaluator,
)
from viable_tf.evaluation.sine import test_evaluator, validation_evaluator
from viable_tf.tasks.classification import FewShotEpisodes


def validation_protocol(tasks):
    """The meta-validation evaluator for `tasks` (early stopping)."""
    if isinstance(tasks, FewShotEpisodes):
        return classification_validation_evaluator(tasks)
    return validation_evaluator(tasks)


def test_protocol(tasks, *, num_support: int | None = None):
    """The test evaluator for `tasks`; `num_support` is K (per class for episodes)."""
    if isinstance(tasks, FewShotEpisodes):
        return classification_test_evaluator(tasks, num_shots=num_support)
    return test_evaluator(tasks, num_support=num_support)
