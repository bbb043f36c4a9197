"""A task family's evaluation protocols and figures, dispatched on the family's type.

A task family samples and describes itself only; how it is validated, tested and drawn
is registered here by its evaluation module, one function each (functools.singledispatch):

    @validation_protocol.register
    def _(tasks: SineTasks): ...          # the meta-validation evaluator (early stopping)
    @test_protocol.register
    def _(tasks: SineTasks, *, num_support=None): ...   # the test evaluator at K
    @figures.register
    def _(tasks: SineTasks, learner): ...  # TensorBoard figures (optional)

`viable_tf.evaluation` imports every evaluation module, so importing anything from it
registers the shipped families. A new family adds its task module (tasks/) and its
evaluation module (evaluation/), imported in evaluation/__init__.py.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from viable_tf.tasks.base import TaskFamily


def _unregistered(what: str, tasks) -> TypeError:
    return TypeError(
        f"no {what} is registered for {type(tasks).__name__}; register one in its "
        f"evaluation module with viable_tf.evaluation.protocols.{what}.register"
    )


@functools.singledispatch
def validation_protocol(tasks: TaskFamily):
    """The meta-validation evaluator for `tasks` (early stopping)."""
    raise _unregistered("validation_protocol", tasks)


@functools.singledispatch
def test_protocol(tasks: TaskFamily, *, num_support: int | None = None):
    """The test evaluator for `tasks`; `num_support` is K (per class for episodes)."""
    raise _unregistered("test_protocol", tasks)


@functools.singledispatch
def figures(tasks: TaskFamily, learner) -> dict[str, Callable[[], bytes]] | None:
    """TensorBoard figures of `learner` as it is now, or None (a family without figures):
    what they show is computed at once, and each {name: draw} is a picklable function
    of those numbers alone (no TensorFlow) that returns the PNG, so that a worker
    process can draw it while the learner trains on."""
    return None
