"""The gradient-based inner loop CAVIA, MAML and VIABLE on either share (`GradientLearner`),
and the one gradient step every learner takes (`gradient_step`; LEO's latent and
fine-tuning steps too).

A gradient learner defines `initial_state` (and `start_state` where the support set
starts it) and `predict`, and `inner_loss` where it is not the task loss; the inner loop,
S steps of state <- state - alpha * d inner_loss / d state over the parts its
capabilities name (`adapted_parts`), at one alpha or at Meta-SGD's learned rates, is here.

Shape legend: B tasks, K support, Q query, D input dim, Y output dim.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

import keras
import tensorflow as tf

from viable_tf.learners.base import AdaptedState, Learner
from viable_tf.learners.heads import Head
from viable_tf.learners.task_losses import get_inner_loss
from viable_tf.networks.protocol import PredictionNetworkProtocol
from viable_tf.ops import real_labels
from viable_tf.tasks.base import TaskBatch


def gradient_step(
    values: list[tf.Tensor], loss_fn, lrs: Sequence[float | tf.Tensor], *, first_order: bool
) -> tuple[list[tf.Tensor], tf.Tensor]:
    """One gradient step of `values` on `loss_fn(values)` (per task, [B]): values -
    lr * d sum_b loss_b / d values (tasks are independent, so each task's values follow
    their own loss), the gradient stopped where `first_order`. `lrs` has one rate per
    value: a number, or Meta-SGD's tensor shaped as the value without its task axis.
    Returns the stepped values and the loss before the step."""
    with tf.GradientTape() as tape:
        tape.watch(values)
        loss = loss_fn(values)  # [B]
        total = tf.reduce_sum(loss)
    grads = tape.gradient(total, values)
    if first_order:
        grads = [tf.stop_gradient(g) for g in grads]
    stepped = [v - lr * g for v, g, lr in zip(values, grads, lrs, strict=True)]
    return stepped, loss


class GradientLearner(Learner):
    """A learner whose inner loop is S gradient steps on its inner loss, with a prediction
    network (`network`, networks/protocol.py) and an output layer (`head`) of its own."""

    network: PredictionNetworkProtocol

    def __init__(
        self,
        *,
        input_dim: int,
        output_dim: int,
        num_inner_steps: int,
        inner_lr: float,
        first_order: bool,
        task_loss: str,
        inner_task_loss: str | None,
        learned_inner_lr: bool,
        head: Head,
    ) -> None:
        super().__init__(input_dim=input_dim, output_dim=output_dim, task_loss=task_loss)
        if num_inner_steps < 0:
            raise ValueError(f"num_inner_steps must be >= 0, got {num_inner_steps}")
        if not inner_lr > 0:
            raise ValueError(f"inner_lr must be > 0, got {inner_lr}")
        self.num_inner_steps = num_inner_steps  # S
        self.inner_lr = float(inner_lr)  # alpha
        self.first_order = first_order
        # What the inner loop minimises where no loss is learned: L_T, or a robust loss in
        # its place (e.g. 'huber'; task_losses.INNER_LOSSES). The outer loss is L_T.
        self.inner_task_loss_name = inner_task_loss
        self.inner_task_loss = get_inner_loss(inner_task_loss, task_loss)
        # Meta-SGD (Li et al. 2017): a meta-learned step size for every adapted number,
        # in place of the one alpha; built by the learner once it knows what it adapts.
        self.learned_inner_lr = learned_inner_lr
        self.inner_lrs: list[tf.Variable] = []
        #: The output layer (learners/heads.py): the network's own, or a per-task one such
        #: as the prototype head, which owns its options (temperature, prototype).
        self.head = head

    @property
    def method_name(self) -> str:
        """The base name, 'metasgd_' before it where the inner loop's step sizes are
        meta-learned; with no inner steps, the method its head is alone (a CAVIA with a
        prototype head and no steps is a Prototypical Network)."""
        if not self.num_inner_steps and self.head.method_without_steps:
            return self.head.method_without_steps
        return ("metasgd_" if self.learned_inner_lr else "") + self.base_name

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

    def hparams(self) -> dict[str, str | int | float | bool]:
        return {
            "method": self.method_name,
            "context_dim": int(self.context_dim),
            "inner_steps": self.num_inner_steps,
            "inner_lr": self.inner_lr,
            "first_order": self.first_order,
            "init": self.network.init,
            "activation": "none",  # the loss network's; a fixed task loss has none
            "head": self.head.name,
            "inner_task_loss": self.inner_task_loss_name or self.task_loss_name,
            "prototype": self.head.prototype,
            **({"learned_inner_lr": True} if self.learned_inner_lr else {}),
        }

    @abc.abstractmethod
    def initial_state(self, batch_size: tf.Tensor) -> AdaptedState:
        """The state every task starts adapting from (e.g. phi_0 = 0), leading axis B."""

    def start_state(
        self, support_x: tf.Tensor, support_y: tf.Tensor, support_mask: tf.Tensor
    ) -> AdaptedState:
        """The state a task's inner loop starts from: `initial_state`, unless the learner
        starts it from the support set (the prototype head does)."""
        return self.initial_state(tf.shape(support_x)[0])

    def inner_loss(
        self,
        state: AdaptedState,
        support_x: tf.Tensor,
        support_y: tf.Tensor,
        support_mask: tf.Tensor,
        *,
        step: int = 0,
        query_x: tf.Tensor | None = None,
    ) -> tf.Tensor:
        """The loss minimised in the inner loop at inner step `step` (0, 1, ...), per task
        [B]: the true task loss (or the robust `inner_task_loss` in its place) unless a
        learner says otherwise (VIABLE's is learned; MeTAL's has a network per step and
        reads the queries `query_x`)."""
        return self.support_mean(self.inner_task_loss, state, support_x, support_y, support_mask)

    def adapt(
        self,
        support_x: tf.Tensor,
        support_y: tf.Tensor,
        support_mask: tf.Tensor,
        *,
        query_x: tf.Tensor | None = None,
        return_inner_losses: bool = False,
    ):
        """Runs the inner loop from `start_state` on the support set (Learner.adapt)."""
        if self.capabilities.reads_queries and query_x is None:
            raise ValueError(
                f"{self.method_name} adapts on the task's query inputs too (its inner loss "
                "has a query term): pass query_x"
            )
        support_y = real_labels(support_y, support_mask)
        state = self.start_state(support_x, support_y, support_mask)
        stepped = state.in_parts(self.capabilities.adapted_parts)  # per tensor of the state

        def with_adapted(adapted: list[tf.Tensor]) -> AdaptedState:
            """The state with the tensors of its adapted parts replaced by `adapted`."""
            entries = iter(adapted)
            tensors = [
                next(entries) if part else t
                for t, part in zip(state.tensors(), stepped, strict=True)
            ]
            return tf.nest.pack_sequence_as(state, tensors)

        losses = []
        num_stepped = sum(stepped)
        lrs = self.inner_lrs if self.learned_inner_lr else [self.inner_lr] * num_stepped
        for step in range(self.num_inner_steps):
            adapted, loss = gradient_step(
                [t for t, part in zip(state.tensors(), stepped, strict=True) if part],
                lambda adapted, step=step: self.inner_loss(
                    with_adapted(adapted),
                    support_x,
                    support_y,
                    support_mask,
                    step=step,
                    query_x=query_x,
                ),
                lrs,
                first_order=self.first_order,
            )
            state = with_adapted(adapted)
            losses.append(loss)
        if return_inner_losses:
            stacked = tf.stack(losses) if losses else tf.zeros([0, tf.shape(support_x)[0]])
            return state, stacked
        return state

    def meta_loss(self, batch: TaskBatch) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        """The mean over tasks of the query loss after adaptation (Learner.meta_loss)."""
        state, inner_losses = self.adapt(
            batch.support_x,
            batch.support_y,
            batch.support_mask,
            query_x=batch.query_x,
            return_inner_losses=True,
        )
        per_task = self.query_loss(batch, state)  # [B]
        metrics = {}
        if self.num_inner_steps:
            metrics["inner_loss_pre"] = tf.reduce_mean(inner_losses[0])
        return tf.reduce_mean(per_task), metrics
