"""The contract every learner meets, and the shared gradient-based inner loop.

A learner adapts to a task from its support set and predicts on its query set:

    state = learner.adapt(support_x, support_y, support_mask)   # inner loop
    y_hat = learner.predict(state, query_x)
    loss, metrics = learner.meta_loss(batch)                    # outer objective

The adapted `state` is an `AdaptedState`, read by name: the context phi for CAVIA and
VIABLE, the per-task weights for MAML, a per-task output layer for the prototype head
and LEO, each with a leading task axis B. Subclasses define only `initial_state` and
`predict`, and `inner_loss` where it is not the task loss; the inner loop (S steps of
state <- state - alpha * d inner_loss / d state over the parts in `adapted_parts`) is
shared.

Shape legend: B tasks, K support, Q query, D input dim, Y output dim.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

import keras
import tensorflow as tf

from viable_tf.learners.heads import Head, LinearHead
from viable_tf.learners.task_losses import get_inner_loss, get_task_loss
from viable_tf.ops import masked_mean, real_labels
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


class Learner(keras.layers.Layer, abc.ABC):
    """A meta-learner: adapt on a support set, predict on a query set, meta-loss."""

    #: The method's short name ("cavia", "maml", "simviable", "relviable", ...).
    base_name: str = ""
    #: Meta-SGD's learned step sizes (`learned_inner_lr=True`), or the one alpha.
    learned_inner_lr: bool = False

    @property
    def method_name(self) -> str:
        """The name in results: the base name, 'metasgd_' before it where the inner loop's
        step sizes are meta-learned; with no inner steps, the method its head is alone
        (a CAVIA with a prototype head and no steps is a Prototypical Network)."""
        if not self.num_inner_steps and self.head.method_without_steps:
            return self.head.method_without_steps
        return ("metasgd_" if self.learned_inner_lr else "") + self.base_name

    #: Whether the adapted state is a task context phi [B, C] alone (CAVIA, VIABLE),
    #: which a server can return and reuse; MAML adapts weights.
    adapts_context: bool = False
    #: Whether the inner loop steps a task context phi [B, C] under any head (CAVIA and
    #: VIABLE on it; with a per-task head the state holds the head too).
    steps_context: bool = False
    # What every learner exposes, declared here with the value of a learner that does
    # not have it; a learner that has one sets it in its own constructor.
    #: C, the size of the task context phi the learner adapts (0: none).
    context_dim: int = 0
    #: The output layer (learners/heads.py): the network's own, or a per-task one such as
    #: the prototype head, which owns its options (temperature, prototype).
    head: Head = LinearHead()
    #: The prediction network f (None for a learner without one of its own, e.g. LEO).
    network: keras.layers.Layer | None = None

    def __init__(
        self,
        *,
        input_dim: int,
        output_dim: int,
        num_inner_steps: int,
        inner_lr: float,
        first_order: bool = False,
        task_loss: str = "mse",
        inner_task_loss: str | None = None,
        learned_inner_lr: bool = False,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        if num_inner_steps < 0:
            raise ValueError(f"num_inner_steps must be >= 0, got {num_inner_steps}")
        if not inner_lr > 0:
            raise ValueError(f"inner_lr must be > 0, got {inner_lr}")
        self.input_dim = input_dim
        self.output_dim = output_dim
        self.num_inner_steps = num_inner_steps  # S
        self.inner_lr = float(inner_lr)  # alpha
        self.first_order = first_order
        self.task_loss_name = task_loss
        self.task_loss = get_task_loss(task_loss)  # L_T, per point
        # What the inner loop minimises where no loss is learned: L_T, or a robust loss in
        # its place (e.g. 'huber'; task_losses.INNER_LOSSES). The outer loss is L_T.
        self.inner_task_loss_name = inner_task_loss
        self.inner_task_loss = get_inner_loss(inner_task_loss, task_loss)
        # Meta-SGD (Li et al. 2017): a meta-learned step size for every adapted number,
        # in place of the one alpha; built by the learner once it knows what it adapts.
        self.learned_inner_lr = learned_inner_lr
        self.inner_lrs: list[tf.Variable] = []

    def build_inner_lrs(self, shapes: Sequence[Sequence[int]]) -> None:
        """Meta-SGD's step sizes, one variable per adapted tensor of `shapes` (each without
        the task axis B, in the order the inner loop steps them), all starting at
        `inner_lr` and meta-learned with the rest. Nothing without `learned_inner_lr`."""
        if not self.learned_inner_lr:
            return
        for i, shape in enumerate(shapes):
            rate = self.add_weight(
                shape=tuple(shape),
                initializer=keras.initializers.Constant(self.inner_lr),
                name=f"inner_lr_{i}",
            )
            # An attribute of its own, so that checkpoints hold it (a list does not).
            setattr(self, f"inner_lr_{i}", rate)
            self.inner_lrs.append(rate)  # alpha_i, broadcast over the task axis

    @property
    def every_class_reason(self) -> str | None:
        """Why the learner needs a real support point of every class in a task, or None
        where it does not (an export then refuses a support set that leaves one out)."""
        return self.head.every_class_reason

    @property
    def is_classifier(self) -> bool:
        """Cross-entropy on N logits with integer labels, rather than regression."""
        return self.task_loss_name == "cross_entropy"

    def hparams(self) -> dict[str, str | int | float | bool]:
        """The learner's hyper-parameters, flat, for results and TensorBoard's HParams."""
        return {
            "method": self.method_name,
            "context_dim": int(self.context_dim),
            "inner_steps": self.num_inner_steps,
            "inner_lr": self.inner_lr,
            "first_order": self.first_order,
            "init": self._network_init(),
            "activation": "none",  # the loss network's; a fixed task loss has none
            "head": self.head.name,
            "inner_task_loss": self.inner_task_loss_name or self.task_loss_name,
            "prototype": self.head.prototype,
            **({"learned_inner_lr": True} if self.learned_inner_lr else {}),
        }

    def _network_init(self) -> str:
        """How the prediction network's weights started ('torch', 'keras'), or 'custom'
        for a user's network, which does not say."""
        try:
            return self.network.init
        except AttributeError:
            return "custom"

    @abc.abstractmethod
    def initial_state(self, batch_size: tf.Tensor) -> AdaptedState:
        """The state every task starts adapting from (e.g. phi_0 = 0), leading axis B."""

    def start_state(
        self, support_x: tf.Tensor, support_y: tf.Tensor, support_mask: tf.Tensor
    ) -> AdaptedState:
        """The state a task's inner loop starts from: `initial_state`, unless the learner
        starts it from the support set (the prototype head does)."""
        return self.initial_state(tf.shape(support_x)[0])

    #: The parts of the state the inner loop steps (AdaptedState's field names); the
    #: others stay as `start_state` made them (CAVIA's prototype head: stepped through
    #: phi only).
    adapted_parts: tuple[str, ...] = STATE_PARTS

    @abc.abstractmethod
    def predict(self, state: AdaptedState, x: tf.Tensor) -> tf.Tensor:
        """Predictions of the adapted model: x [B, P, D] -> y_hat [B, P, Y]."""

    def inner_loss(
        self,
        state: AdaptedState,
        support_x: tf.Tensor,
        support_y: tf.Tensor,
        support_mask: tf.Tensor,
    ) -> tf.Tensor:
        """The loss minimised in the inner loop, per task [B]: the true task loss (or the
        robust `inner_task_loss` in its place) unless a learner says otherwise (VIABLE's
        is learned)."""
        return self._support_mean(self.inner_task_loss, state, support_x, support_y, support_mask)

    def support_loss(
        self,
        state: AdaptedState,
        support_x: tf.Tensor,
        support_y: tf.Tensor,
        support_mask: tf.Tensor,
    ) -> tf.Tensor:
        """The true task loss L_T on the support set, per task [B]."""
        return self._support_mean(self.task_loss, state, support_x, support_y, support_mask)

    def _support_mean(self, point_loss_fn, state, support_x, support_y, support_mask):
        """A per-point loss of the adapted predictions, averaged over each task's real
        support points: [B]."""
        point_loss = point_loss_fn(self.predict(state, support_x), support_y)  # [B, K]
        return masked_mean(point_loss, support_mask, axis=1)

    def adapt(
        self,
        support_x: tf.Tensor,
        support_y: tf.Tensor,
        support_mask: tf.Tensor,
        *,
        return_inner_losses: bool = False,
    ):
        """Runs the inner loop from `initial_state` on the support set.

        Args:
          support_x: [B, K, D]; support_y: [B, K, Y] (or int [B, K]);
          support_mask: bool [B, K]. A task with no real support point is not adapted.
          return_inner_losses: also return the inner loss per step, [S, B]
            (the loss *before* each step).

        Returns:
          The adapted state (and the inner losses if asked).
        """
        support_y = real_labels(support_y, support_mask)
        state = self.start_state(support_x, support_y, support_mask)
        stepped = state.in_parts(self.adapted_parts)  # per tensor of the state

        def with_adapted(adapted: list[tf.Tensor]) -> AdaptedState:
            """The state with the tensors of its adapted parts replaced by `adapted`."""
            entries = iter(adapted)
            tensors = [
                next(entries) if step else t
                for t, step in zip(state.tensors(), stepped, strict=True)
            ]
            return tf.nest.pack_sequence_as(state, tensors)

        losses = []
        num_stepped = sum(stepped)
        lrs = self.inner_lrs if self.learned_inner_lr else [self.inner_lr] * num_stepped
        for _ in range(self.num_inner_steps):
            adapted, loss = self.inner_step(
                [t for t, step in zip(state.tensors(), stepped, strict=True) if step],
                lambda adapted: self.inner_loss(
                    with_adapted(adapted), support_x, support_y, support_mask
                ),
                lrs,
            )
            state = with_adapted(adapted)
            losses.append(loss)
        if return_inner_losses:
            stacked = tf.stack(losses) if losses else tf.zeros([0, tf.shape(support_x)[0]])
            return state, stacked
        return state

    def inner_step(
        self, values: list[tf.Tensor], loss_fn, lrs: Sequence[float | tf.Tensor]
    ) -> tuple[list[tf.Tensor], tf.Tensor]:
        """One gradient step of `values` on `loss_fn(values)` (per task, [B]): values -
        lr * d sum_b loss_b / d values (tasks are independent, so each task's values
        follow their own loss), the gradient stopped for a first-order learner. `lrs`
        has one rate per value: a number, or Meta-SGD's tensor shaped as the value
        without its task axis. Returns the stepped values and the loss before the step.
        The one inner step every learner takes (LEO's latent and fine-tuning steps too)."""
        with tf.GradientTape() as tape:
            tape.watch(values)
            loss = loss_fn(values)  # [B]
            total = tf.reduce_sum(loss)
        grads = tape.gradient(total, values)
        stepped = [
            v - lr * self._inner_gradient(g) for v, g, lr in zip(values, grads, lrs, strict=True)
        ]
        return stepped, loss

    def _inner_gradient(self, grad: tf.Tensor) -> tf.Tensor:
        return tf.stop_gradient(grad) if self.first_order else grad

    def query_loss(self, batch: TaskBatch, state: AdaptedState) -> tf.Tensor:
        """The true task loss on each task's query set, [B]."""
        point_loss = self.task_loss(self.predict(state, batch.query_x), batch.query_y)  # [B, Q]
        return tf.reduce_mean(point_loss, axis=1)

    def meta_loss(self, batch: TaskBatch) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        """Outer objective: mean over tasks of the query loss after adaptation.

        Returns:
          (scalar meta-loss, metrics) with metrics["inner_loss_pre"], the inner loss
          at the start of adaptation averaged over tasks.
        """
        state, inner_losses = self.adapt(
            batch.support_x, batch.support_y, batch.support_mask, return_inner_losses=True
        )
        per_task = self.query_loss(batch, state)  # [B]
        metrics = {}
        if self.num_inner_steps:
            metrics["inner_loss_pre"] = tf.reduce_mean(inner_losses[0])
        return tf.reduce_mean(per_task), metrics
