"""The evaluation protocols of a task family (its own `validation_evaluator` and
`test_evaluator`), as functions for the trainer and the CLIs."""

from __future__ import annotations

from viable_tf.tasks.base import TaskFamily


def validation_protocol(tasks: TaskFamily):
    """The meta-validation evaluator for `tasks` (early stopping)."""
    return tasks.validation_evaluator()


def test_protocol(tasks: TaskFamily, *, num_support: int | None = None):
    """The test evaluator for `tasks`; `num_support` is K (per class for episodes)."""
    return tasks.test_evaluator(num_support=num_support)
