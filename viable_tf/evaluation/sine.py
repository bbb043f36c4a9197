"""Sine evaluation protocol (SPEC §4): fixed test tasks, MSE on an evenly spaced grid.

Every task is adapted on K random support points and scored by the mean squared
error over 100 points evenly spaced on [-5, 5]. The tasks are a pure function of
(seed, K), so the same checkpoint always gets the same number.

Shape legend: B tasks, K support, Q grid points.
"""

from __future__ import annotations

from typing import NamedTuple

import gin
import numpy as np
import tensorflow as tf

from viable_tf.evaluation.statistics import mean_confidence_interval
from viable_tf.learners.base import Learner
from viable_tf.ops import seed_for
from viable_tf.tasks.sine import SineTasks

#: Seeds of the fixed task sets; never the training seed's stream.
TEST_SEED = 20190101
VALIDATION_SEED = 20190202


class Evaluation(NamedTuple):
    mean: float
    ci95: float
    num_tasks: int
    num_support: int | None  # None: K drawn per task as in training
    per_task: np.ndarray  # [num_tasks] MSE
    inner_loss_pre: np.ndarray  # [num_tasks], inner loss before the first step
    inner_loss_post: np.ndarray  # [num_tasks], inner loss after the last step
    metric: str = "mse"
    higher_is_better: bool = False


class SineEvaluator:
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
        self._learner: Learner | None = None
        self._score_batch = None

    def batch(self, index: int, size: int):
        """Batch `index` of the task set: drawn from (seed, K, index) alone."""
        seed = seed_for(self.seed, self._stream * 1_000_000 + index)
        return self.tasks.sample_tasks(seed, size, num_support=self.num_support, query_x=self.grid)

    def __call__(self, learner: Learner) -> Evaluation:
        if learner is not self._learner:  # trace once per learner, not per call
            self._learner = learner
            self._score_batch = tf.function(
                lambda batch: score_batch(learner, batch), reduce_retracing=True
            )
        scores, pre, post = [], [], []
        for index, start in enumerate(range(0, self.num_tasks, self.batch_size)):
            size = min(self.batch_size, self.num_tasks - start)
            batch, _ = self.batch(index, size)
            mse, loss_pre, loss_post = self._score_batch(batch)
            scores.append(mse.numpy())
            pre.append(loss_pre.numpy())
            post.append(loss_post.numpy())
        per_task = np.concatenate(scores)
        summary = mean_confidence_interval(per_task)
        return Evaluation(
            mean=summary.mean,
            ci95=summary.ci95,
            num_tasks=self.num_tasks,
            num_support=self.num_support,
            per_task=per_task,
            inner_loss_pre=np.concatenate(pre),
            inner_loss_post=np.concatenate(post),
        )


def score_batch(learner: Learner, batch, metric=None):
    """A metric per task [B] (default: the query loss, MSE for sine), and the inner loss
    before and after adaptation [B]; `metric(learner, state, batch)` -> [B]."""
    state, inner_losses = learner.adapt(
        batch.support_x, batch.support_y, batch.support_mask, return_inner_losses=True
    )
    score = learner.query_loss(batch, state) if metric is None else metric(learner, state, batch)
    post = learner.inner_loss(state, batch.support_x, batch.support_y, batch.support_mask)
    pre = inner_losses[0] if learner.num_inner_steps else post
    return score, pre, post


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
