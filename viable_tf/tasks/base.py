"""The batch of few-shot tasks every learner consumes, and the contract of a task family.

A task family (sine regression, N-way K-shot episodes, ...) samples and describes
itself: how to sample a training batch, what its hyper-parameters are, what inputs warm
a served model up. How it is validated, tested and drawn is the evaluation layer's
(`evaluation/protocols.py` dispatches on the family's type), so this layer imports
nothing above it. A new family is its task module here plus its evaluation module.

Shape legend (fixed project-wide): B tasks, K support points (padded), Q query
points, D input dim, Y output dim.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import tensorflow as tf

if TYPE_CHECKING:
    import keras


class TaskBatch(NamedTuple):
    """B few-shot tasks; support sets padded to a fixed K and masked.

    Attributes:
      support_x: float32 [B, K, D].
      support_y: float32 [B, K, Y] (regression) or int32 [B, K] (classification).
      support_mask: bool [B, K]; False marks padding. A task whose mask is all
        False has K = 0 and is not adapted.
      query_x: float32 [B, Q, D].
      query_y: float32 [B, Q, Y] or int32 [B, Q].
    """

    support_x: tf.Tensor
    support_y: tf.Tensor
    support_mask: tf.Tensor
    query_x: tf.Tensor
    query_y: tf.Tensor

    @property
    def num_bytes(self) -> int:
        """The batch's size in memory, from its static shapes (tensors or TensorSpecs)."""
        return sum(t.shape.num_elements() * t.dtype.size for t in self)


class TaskFamily(abc.ABC):
    """A source of few-shot tasks (see the module docstring).

    Attributes:
      input_dim: D, the size of one input x.
      output_dim: Y for regression, N (logits) for classification.
      task_loss: the true task loss L_T its tasks are scored with ('mse',
        'cross_entropy'); a learner must use the same.
    """

    input_dim: int
    output_dim: int
    task_loss: str

    @abc.abstractmethod
    def sample(self, seed: tf.Tensor, batch_size: int) -> TaskBatch:
        """B training tasks as a pure function of a stateless seed [2], in the graph."""

    @abc.abstractmethod
    def hparams(self) -> dict[str, int | float | str]:
        """The family's settings, flat, for results and TensorBoard's HParams."""

    def raw_inputs(self) -> tuple[keras.Model, tuple[int, ...]] | None:
        """What an export of a run on these tasks takes instead of the learner's inputs:
        (a featurizer from one raw input to the learner's input exactly as training took
        it, the raw input's shape; an export applies it with `normalize=False`), or None
        when the learner's inputs are what a client sends (the default)."""
        return None

    @abc.abstractmethod
    def warmup_inputs(
        self, rng: np.random.Generator, *, num_support: int, num_query: int
    ) -> dict[str, np.ndarray]:
        """One task's support_x [1, K, D], support_y and query_x [1, Q, D], values as
        the family's tasks have them: requests that warm a served model up."""
