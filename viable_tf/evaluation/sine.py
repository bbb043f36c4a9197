"""Sine evaluation protocol (docs/method.md §4): fixed test tasks, MSE on an evenly spaced grid.

Every task is adapted on K random support points and scored by the mean squared
error over 100 points evenly spaced on [-5, 5]. The tasks are a pure function of
(seed, K), so the same checkpoint always gets the same number.

Shape legend: B tasks, K support, Q grid points.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import gin

from viable_tf import plots
from viable_tf.evaluation import protocols
from viable_tf.evaluation.core import TEST_SEED, VALIDATION_SEED, Evaluator
from viable_tf.ops import seed_for
from viable_tf.tasks.base import TaskBatch
from viable_tf.tasks.sine import SineTasks, sine_curve

#: The seed of the tasks drawn in the TensorBoard figure (`adapted_fits`).
FIGURE_SEED = 20190303


class SineEvaluator(Evaluator):
    """Scores a learner on a fixed set of sine tasks, in batches of `batch_size`."""

    metric = "mse"
    higher_is_better = False

    def __init__(
        self,
        tasks: SineTasks,
        *,
        num_tasks: int,
        num_support: int | None,
        seed: int,
        num_grid_points: int = 100,
        batch_size: int = 100,
    ) -> None:
        super().__init__()
        if num_tasks < 1:
            raise ValueError(f"num_tasks must be >= 1, got {num_tasks}")
        if num_support is not None and num_support < 0:
            raise ValueError(f"num_support must be >= 0, got {num_support}")
        self.tasks = tasks
        self.num_tasks = num_tasks
        self.num_support = num_support
        self.seed = seed
        self.batch_size = min(batch_size, num_tasks)
        self.grid = tasks.evaluation_grid(num_grid_points)  # [Q]
        self._stream = 0 if num_support is None else num_support + 1

    def batch(self, index: int, size: int):
        """Batch `index` of the task set, with the tasks' parameters: drawn from
        (seed, K, index) alone."""
        seed = seed_for(self.seed, self._stream * 1_000_000 + index)
        return self.tasks.sample_tasks(seed, size, num_support=self.num_support, query_x=self.grid)

    def batches(self) -> Iterator[TaskBatch]:
        for index, start in enumerate(range(0, self.num_tasks, self.batch_size)):
            yield self.batch(index, min(self.batch_size, self.num_tasks - start))[0]


@gin.configurable
def test_evaluator(
    tasks: SineTasks,
    *,
    num_tasks: int = 1000,
    num_support: int | None = None,
    seed: int = TEST_SEED,
) -> SineEvaluator:
    """The test protocol: 1,000 tasks, K = `num_support` (default: the training K)."""
    k = tasks.num_support if num_support is None else num_support
    if k > tasks.num_support:
        raise ValueError(
            f"num_support={k} is larger than the padded support size {tasks.num_support} "
            f"(NUM_SUPPORT) of this run; expected K <= {tasks.num_support}, or raise the "
            f"bound with --gin_param=NUM_SUPPORT={k}"
        )
    return SineEvaluator(tasks, num_tasks=num_tasks, num_support=k, seed=seed)


@gin.configurable
def validation_evaluator(
    tasks: SineTasks, *, num_tasks: int = 100, seed: int = VALIDATION_SEED
) -> SineEvaluator:
    """Meta-validation for early stopping: 100 tasks with K drawn as in training."""
    return SineEvaluator(tasks, num_tasks=num_tasks, num_support=None, seed=seed)


@protocols.validation_protocol.register
def _(tasks: SineTasks):
    return validation_evaluator(tasks)


@protocols.test_protocol.register
def _(tasks: SineTasks, *, num_support: int | None = None):
    return test_evaluator(tasks, num_support=num_support)


@functools.lru_cache(maxsize=4)
def _figure_tasks(tasks: SineTasks, num_tasks: int, num_support: int):
    """The figure's fixed tasks, drawn once (eagerly, ~30 ms) per task family."""
    grid = tasks.evaluation_grid(200)
    batch, params = tasks.sample_tasks(
        seed_for(FIGURE_SEED, num_support), num_tasks, num_support=num_support, query_x=grid
    )
    return grid, batch, sine_curve(params, batch.query_x).numpy()


def adapted_fits(
    learner, tasks: SineTasks, *, num_tasks: int = 4, num_support: int = 10
) -> dict[str, functools.partial]:
    """For a few fixed tasks, the true curve, support points and the fits before and
    after adaptation: the fits are computed now, and {"adapted_fits": draw} is
    returned, `draw()` giving the PNG from those numbers alone (`plots.adapted_fits`)."""
    grid, batch, truth = _figure_tasks(tasks, num_tasks, num_support)
    unadapted = learner.predict(learner.initial_state(num_tasks), batch.query_x)
    adapted = learner.predict(
        learner.adapt(batch.support_x, batch.support_y, batch.support_mask, query_x=batch.query_x),
        batch.query_x,
    )
    draw = functools.partial(
        plots.adapted_fits,
        x=grid.numpy(),
        truth=truth,
        unadapted=unadapted.numpy(),
        adapted=adapted.numpy(),
        support_x=batch.support_x.numpy(),
        support_y=batch.support_y.numpy(),
        title=f"{learner.method_name}: adapted from K = {num_support} points",
    )
    return {"adapted_fits": draw}


@protocols.figures.register
def _(tasks: SineTasks, learner):
    return adapted_fits(learner, tasks)
