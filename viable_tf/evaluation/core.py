"""What every evaluation protocol shares: the fixed seeds, the record of a result, and
the loop that adapts a learner on each batch of a fixed task set and summarises.

A protocol (sine MSE, classification accuracy) specialises `Evaluator` with where its
batches come from (`batches`), how many tasks it has, and what it scores per task.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from viable_tf.evaluation.statistics import mean_confidence_interval
from viable_tf.learners.base import Learner
from viable_tf.tasks.base import TaskBatch

#: Seeds of the fixed task sets; never the training seed's stream.
TEST_SEED = 20190101
VALIDATION_SEED = 20190202

#: An evaluator keeps its task set after the first pass when it is at most this big
#: (meta-validation every 500 updates need not draw the same tasks again).
CACHE_BYTES = 64 * 2**20

#: A per-task score of an adapted learner: (learner, state, batch) -> [B].
Metric = Callable[[Learner, list, TaskBatch], tf.Tensor]


class Evaluation(NamedTuple):
    mean: float
    ci95: float
    num_tasks: int
    num_support: int | None  # None: K drawn per task as in training
    per_task: np.ndarray  # [num_tasks] metric
    inner_loss_pre: np.ndarray  # [num_tasks], inner loss before the first step
    inner_loss_post: np.ndarray  # [num_tasks], inner loss after the last step
    metric: str = "mse"
    higher_is_better: bool = False


def score_batch(learner: Learner, batch: TaskBatch, metric: Metric | None = None):
    """A metric per task [B] (default: the query loss, MSE for sine), and the inner loss
    before and after adaptation [B]."""
    state, inner_losses = learner.adapt(
        batch.support_x,
        batch.support_y,
        batch.support_mask,
        query_x=batch.query_x,
        return_inner_losses=True,
    )
    score = learner.query_loss(batch, state) if metric is None else metric(learner, state, batch)
    post = learner.inner_loss(  # as the last step's loss reads the state it made
        state,
        batch.support_x,
        batch.support_y,
        batch.support_mask,
        step=max(learner.num_inner_steps - 1, 0),
        query_x=batch.query_x,
    )
    pre = inner_losses[0] if learner.num_inner_steps else post
    return score, pre, post


class Evaluator(abc.ABC):
    """Scores a learner on a fixed task set; subclasses say where its batches come from."""

    metric: str = "mse"
    higher_is_better: bool = False
    num_tasks: int
    num_support: int | None

    def __init__(self) -> None:
        self._learner: Learner | None = None
        self._score_batch = None
        self._kept: list[TaskBatch] | None = None

    @abc.abstractmethod
    def batches(self) -> Iterable[TaskBatch]:
        """The task set, batch by batch, the same every time."""

    def score(self, learner: Learner, state, batch: TaskBatch) -> tf.Tensor | None:
        """The per-task metric [B]; None: the query loss."""
        return None

    def __call__(self, learner: Learner) -> Evaluation:
        if learner is not self._learner:  # trace once per learner, not per call
            self._learner = learner
            metric = None if type(self).score is Evaluator.score else self.score
            self._score_batch = tf.function(
                lambda batch: score_batch(learner, batch, metric),
                reduce_retracing=True,
                autograph=False,
            )
        scores, pre, post = [], [], []
        for batch in self._task_set():
            for values, out in zip(self._score_batch(batch), (scores, pre, post), strict=True):
                out.append(values.numpy())
        return self.evaluation(np.concatenate(scores), np.concatenate(pre), np.concatenate(post))

    def _task_set(self) -> Iterable[TaskBatch]:
        """`batches()`, drawn once and kept when they fit `CACHE_BYTES`."""
        if self._kept is not None:
            yield from self._kept
            return
        kept, size = [], 0
        for batch in self.batches():
            size += batch.num_bytes
            if size <= CACHE_BYTES:
                kept.append(batch)
            yield batch
        if size <= CACHE_BYTES:
            self._kept = kept

    def evaluation(self, per_task: np.ndarray, pre: np.ndarray, post: np.ndarray) -> Evaluation:
        """Per-task scores (and inner losses) summarised with their 95% CI."""
        summary = mean_confidence_interval(per_task)
        return Evaluation(
            mean=summary.mean,
            ci95=summary.ci95,
            num_tasks=self.num_tasks,
            num_support=self.num_support,
            per_task=per_task,
            inner_loss_pre=pre,
            inner_loss_post=post,
            metric=self.metric,
            higher_is_better=self.higher_is_better,
        )
