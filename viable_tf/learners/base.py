"""The contract every learner meets: adapt, predict, meta_loss, and what it adapts.

A learner adapts to a task from its support set and predicts on its query set:

    state = learner.adapt(support_x, support_y, support_mask)   # inner loop
                                    # (query_x=... for a transductive learner)
    y_hat = learner.predict(state, query_x)
    loss, metrics = learner.meta_loss(batch)                    # outer objective

The adapted `state` is an `AdaptedState`, read by name: the context phi for CAVIA and
VIABLE, the per-task weights for MAML, a per-task output layer for the prototype head
and LEO, each with a leading task axis B. What a learner's state is and what it needs
of a task is one value, `capabilities` (a `Capabilities`), declared in its constructor.
The gradient-based inner loop that CAVIA, MAML and VIABLE share is `GradientLearner`
(learners/gradient.py); LEO meets this contract alone.

Shape legend: B tasks, K support, Q query, D input dim, Y output dim.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Sequence

import keras
import tensorflow as tf

from viable_tf.learners.task_losses import get_task_loss
from viable_tf.ops import masked_mean
from viable_tf.tasks.base import TaskBatch


class AdaptedState:
    """What a learner adapted for each task, by name; every tensor has a leading task
    axis B, and a part the learner does not have is absent (None, or empty).

    context: phi [B, C] (CAVIA, VIABLE; MAML with a context).
    weights: per-task copies of the prediction network's weights, in the order of
      `network.params` (MAML).
    head: a per-task output layer: (kernel [B, H, N], bias [B, N]) for the prototype
      head (learners/prototypes.py), LEO's decoded classifier (weights [B, N, D],
      class bias [B, N]).

    noise: the training noise the state was adapted with and predicts with (LEO's
      dropout and sampled weights, an object of the learner's), None for a state
      adapted for evaluation; not a tensor, it travels in the nesting's metadata.

    It nests (tf.nest, tf.cond) as its tensors, flat in the order `weights`, `context`,
    `head` (`tensors()`); its parts are read by name.
    """

    __slots__ = ("context", "head", "noise", "weights")

    def __init__(
        self,
        *,
        context: tf.Tensor | None = None,
        weights: Sequence[tf.Tensor] = (),
        head: Sequence[tf.Tensor] = (),
        noise: object | None = None,
    ) -> None:
        self.context = context
        self.weights = tuple(weights)
        self.head = tuple(head)
        self.noise = noise

    def replace(self, **parts) -> AdaptedState:
        """A copy with the named parts replaced."""
        fields = {
            "context": self.context,
            "weights": self.weights,
            "head": self.head,
            "noise": self.noise,
        }
        return AdaptedState(**{**fields, **parts})

    def tensors(self) -> list[tf.Tensor]:
        """The state's tensors, flat: weights, context, head."""
        context = [] if self.context is None else [self.context]
        return [*self.weights, *context, *self.head]

    def in_parts(self, names: Sequence[str]) -> list[bool]:
        """For each of `tensors()`, whether it belongs to one of the parts `names`."""
        context = [] if self.context is None else ["context" in names]
        return [
            *(["weights" in names] * len(self.weights)),
            *context,
            *(["head" in names] * len(self.head)),
        ]

    def __repr__(self) -> str:
        return (
            f"AdaptedState(context={self.context!r}, weights={self.weights!r}, head={self.head!r})"
        )

    # tf.nest's protocol for a class of one's own (tensorflow/python/util/custom_nest_protocol.py):
    # the metadata says which parts there are and how many tensors each holds.
    def __tf_flatten__(self):
        layout = (self.context is not None, len(self.weights), len(self.head), self.noise)
        return layout, tuple(self.tensors())

    @classmethod
    def __tf_unflatten__(cls, layout, tensors) -> AdaptedState:
        has_context, num_weights, num_head, noise = layout
        tensors = list(tensors)
        weights, tensors = tensors[:num_weights], tensors[num_weights:]
        context = tensors.pop(0) if has_context else None
        return cls(context=context, weights=weights, head=tensors[:num_head], noise=noise)


#: The parts of an AdaptedState.
STATE_PARTS = ("weights", "context", "head")


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What a learner's adapted state is, and what it needs of a task.

    adapts_context: the state is a task context phi [B, C] alone (CAVIA, VIABLE with the
      network's own output layer), which a server can return and reuse.
    steps_context: the inner loop steps a context phi under any head (CAVIA and VIABLE;
      with a per-task head the state holds the head too).
    adapted_parts: the parts of the state the inner loop steps (AdaptedState's field
      names); the others stay as the learner's start made them.
    every_class_reason: why a task needs a real support point of every class, or None
      where it does not (an export then refuses a support set that leaves one out).
    steps_state: the inner loop takes gradient steps on the state's adapted parts
      themselves (CAVIA, MAML; not LEO, whose steps move a latent code the state does not
      hold), so that a loss may read what it adapts (MeTAL's task state).
    reads_queries: adapting a task reads its query inputs as well as its support set
      (MeTAL's transductive term): `adapt` refuses to run without `query_x`, and an
      export offers no signature that adapts without queries.
    """

    adapts_context: bool = False
    steps_context: bool = False
    adapted_parts: tuple[str, ...] = STATE_PARTS
    every_class_reason: str | None = None
    steps_state: bool = False
    reads_queries: bool = False


class Learner(keras.layers.Layer, abc.ABC):
    """A meta-learner: adapt on a support set, predict on a query set, meta-loss; its
    `capabilities`, and its task loss L_T (`task_loss`, per point) with the support and
    query losses built on it."""

    #: The method's short name ("cavia", "maml", "simviable", "relviable", ...).
    base_name: str = ""
    #: C, the size of the task context phi the learner adapts (0: none).
    context_dim: int = 0

    def __init__(self, *, input_dim: int, output_dim: int, task_loss: str) -> None:
        super().__init__()
        self.input_dim = input_dim
        self.output_dim = output_dim
        self.task_loss_name = task_loss
        self.task_loss = get_task_loss(task_loss)  # L_T, per point
        self.capabilities = Capabilities()  # a learner declares its own in its constructor

    @property
    def method_name(self) -> str:
        """The name in results and exports."""
        return self.base_name

    @property
    def penalized_weights(self) -> tuple:
        """The weights under the learner's own l2 penalty, which a fallback update pulls
        back (training/meta_gradient.py): none, unless a learner has one (LEO)."""
        return ()

    @property
    def is_classifier(self) -> bool:
        """Cross-entropy on N logits with integer labels, rather than regression."""
        return self.task_loss_name == "cross_entropy"

    @abc.abstractmethod
    def hparams(self) -> dict[str, str | int | float | bool]:
        """The learner's hyper-parameters, flat, for results and TensorBoard's HParams."""

    @abc.abstractmethod
    def adapt(
        self,
        support_x: tf.Tensor,
        support_y: tf.Tensor,
        support_mask: tf.Tensor,
        *,
        query_x: tf.Tensor | None = None,
        return_inner_losses: bool = False,
    ):
        """The adapted state of each task from its support set (and, if asked, the inner
        loss before each step, [S, B]).

        Args:
          support_x: [B, K, D]; support_y: [B, K, Y] (or int [B, K]);
          support_mask: bool [B, K]. A task with no real support point is not adapted.
          query_x: [B, Q, D], the task's unlabelled query inputs: read only by a learner
            whose `capabilities.reads_queries` (which refuses None); others ignore it.
        """

    @abc.abstractmethod
    def start_state(
        self, support_x: tf.Tensor, support_y: tf.Tensor, support_mask: tf.Tensor
    ) -> AdaptedState:
        """The state before any inner step: what a task with no support point (K = 0)
        predicts from, and where `adapt` starts."""

    @abc.abstractmethod
    def predict(self, state: AdaptedState, x: tf.Tensor) -> tf.Tensor:
        """Predictions of the adapted model: x [B, P, D] -> y_hat [B, P, Y]."""

    @abc.abstractmethod
    def meta_loss(self, batch: TaskBatch) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        """The outer objective on a meta-batch: (scalar meta-loss, metrics), with
        metrics["inner_loss_pre"], the inner loss at the start of adaptation averaged
        over tasks, where the learner has inner steps."""

    def support_loss(
        self,
        state: AdaptedState,
        support_x: tf.Tensor,
        support_y: tf.Tensor,
        support_mask: tf.Tensor,
    ) -> tf.Tensor:
        """The true task loss L_T on the support set, per task [B]."""
        return self.support_mean(self.task_loss, state, support_x, support_y, support_mask)

    def support_mean(self, point_loss_fn, state, support_x, support_y, support_mask):
        """A per-point loss of the adapted predictions, averaged over each task's real
        support points: [B]."""
        point_loss = point_loss_fn(self.predict(state, support_x), support_y)  # [B, K]
        return masked_mean(point_loss, support_mask, axis=1)

    def query_loss(self, batch: TaskBatch, state: AdaptedState) -> tf.Tensor:
        """The true task loss on each task's query set, [B]."""
        point_loss = self.task_loss(self.predict(state, batch.query_x), batch.query_y)  # [B, Q]
        return tf.reduce_mean(point_loss, axis=1)
