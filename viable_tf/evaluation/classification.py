"""Few-shot classification evaluation (docs/method.md §5): accuracy over fixed, seeded episodes.

Each episode is adapted on its N*K support examples and scored by its accuracy on
its N*V queries; the result is the mean over episodes with a Student-t 95%
confidence interval. Episodes come from a seeded tf.data pipeline over the split's
classes, so the same checkpoint always gets the same number, and testing at
another K (trained at 5 shots, tested at 1..9) uses the same classes and seeds.

Shape legend: B episodes, P points (N*K or N*V), N way.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

import gin
import numpy as np
import tensorflow as tf

from viable_tf.evaluation import protocols
from viable_tf.evaluation.core import TEST_SEED, VALIDATION_SEED, Evaluation, Evaluator
from viable_tf.learners.base import Learner
from viable_tf.learners.prototypes import class_prototypes
from viable_tf.tasks.base import TaskBatch
from viable_tf.tasks.episodes import EpisodeFamily, EpisodeSampler


class ClassificationEvaluator(Evaluator):
    """Scores a learner on `num_episodes` fixed episodes of a sampler, B at a time."""

    metric = "accuracy"
    higher_is_better = True

    def __init__(
        self, sampler: EpisodeSampler, *, num_episodes: int, seed: int, batch_size: int = 50
    ) -> None:
        super().__init__()
        if num_episodes < 1:
            raise ValueError(f"num_episodes must be >= 1, got {num_episodes}")
        self.sampler = sampler
        self.num_episodes = self.num_tasks = num_episodes
        self.num_support = sampler.num_shots  # K per class
        self.seed = seed
        self.batch_size = min(batch_size, num_episodes)

    @functools.cached_property
    def dataset(self) -> tf.data.Dataset:
        """The episodes, B at a time: built when first read (a trainer builds its
        evaluators when it starts; a run that never evaluates does not trace them)."""
        return self.sampler.dataset(self.batch_size, self.seed, num_episodes=self.num_episodes)

    def batches(self) -> Iterable[TaskBatch]:
        return self.dataset

    def score(self, learner: Learner, state, batch: TaskBatch) -> tf.Tensor:
        return query_accuracy(learner, state, batch)


def nearest_mean_accuracy(
    evaluator: ClassificationEvaluator, prototype: str = "mean"
) -> Evaluation:
    """A reference without meta-learning on the same episodes: each query takes the
    label of the nearest class mean of its episode's support embeddings (Euclidean).
    It shows how much the embedding alone separates the classes. `prototype`: the class
    mean, or a robust aggregation in its place ('median', 'weighted';
    learners/prototypes.class_prototypes), for support sets with label noise."""
    ways = evaluator.sampler.num_ways
    accuracy = []
    for batch in evaluator.dataset:
        onehot = tf.one_hot(batch.support_y, ways)  # [B, N*K, N]
        means = class_prototypes(batch.support_x, onehot, prototype)  # [B, N, E]
        distance = tf.reduce_sum(
            tf.square(batch.query_x[:, :, None, :] - means[:, None, :, :]), axis=-1
        )  # [B, N*V, N]
        predicted = tf.argmin(distance, axis=-1, output_type=tf.int32)
        accuracy.append(_accuracy(predicted, batch.query_y).numpy())
    per_task = np.concatenate(accuracy)
    no_inner_loop = np.zeros_like(per_task)
    return evaluator.evaluation(per_task, no_inner_loop, no_inner_loop)


def query_accuracy(learner: Learner, state, batch) -> tf.Tensor:
    """The adapted learner's accuracy on each episode's queries, [B]."""
    logits = learner.predict(state, batch.query_x)  # [B, N*V, N]
    return _accuracy(tf.argmax(logits, -1, output_type=tf.int32), batch.query_y)


def _accuracy(predicted: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
    return tf.reduce_mean(tf.cast(tf.equal(predicted, labels), tf.float32), axis=1)  # [B]


@gin.configurable
def classification_test_evaluator(
    tasks: EpisodeFamily,
    *,
    num_episodes: int = 1000,
    num_shots: int | None = None,
    seed: int = TEST_SEED,
) -> ClassificationEvaluator:
    """The test protocol: `num_episodes` test-split episodes at K = `num_shots`
    (default: the training K)."""
    sampler = tasks.test if num_shots is None else tasks.test.with_shots(num_shots)
    return ClassificationEvaluator(sampler, num_episodes=num_episodes, seed=seed)


@gin.configurable
def classification_validation_evaluator(
    tasks: EpisodeFamily,
    *,
    num_episodes: int = 500,
    seed: int = VALIDATION_SEED,
) -> ClassificationEvaluator:
    """Meta-validation for early stopping: fixed episodes of the validation split."""
    return ClassificationEvaluator(tasks.validation, num_episodes=num_episodes, seed=seed)


@protocols.validation_protocol.register
def _(tasks: EpisodeFamily):
    return classification_validation_evaluator(tasks)


@protocols.test_protocol.register
def _(tasks: EpisodeFamily, *, num_support: int | None = None):
    return classification_test_evaluator(tasks, num_shots=num_support)
