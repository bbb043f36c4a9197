"""CAVIA (docs/method.md §1): adapt only a task context phi, from phi_0 = 0, by gradient steps.

Under a per-task head (`head=PrototypeHead()`, classification) the output layer starts,
per task, at the class means of the support features computed at phi_0
(learners/heads.py), and the inner loop adapts phi under that head: the state holds phi
and the head's (kernel, bias), stepped through phi only; with `adapt_head=True` the inner
loop steps the head's (kernel, bias) too, from the class means (as Proto-MAML fine-tunes
its prototype-initialised output layer), so that an inner loss can move a prototype away
from a class's mislabelled shots (docs/method.md §8). Under `head=SteppedLinearHead()` the output
layer starts, per task, at a meta-learned shared start, and `adapt_head=True` steps it
as MAML steps its own.
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

from viable_tf.configurable import keras_configurable
from viable_tf.learners.base import AdaptedState, Capabilities
from viable_tf.learners.gradient import GradientLearner
from viable_tf.learners.heads import Head, build_network, make_head
from viable_tf.networks.prediction import PredictionNetwork


@keras_configurable
class CAVIA(GradientLearner):
    """CAVIA: the shared weights theta are meta-learned; phi [B, C] is adapted per task.

    `head` is a Head (learners/heads.py; None: the network's own output layer);
    `inner_task_loss` a robust loss in the inner loop's place of the task loss
    (task_losses.INNER_LOSSES); `learned_inner_lr` Meta-SGD's step size per context number.
    """

    base_name = "cavia"

    def __init__(
        self,
        *,
        input_dim: int,
        output_dim: int,
        context_dim: int = 5,
        num_inner_steps: int = 1,
        inner_lr: float = 1.0,
        first_order: bool = False,
        task_loss: str = "mse",
        inner_task_loss: str | None = None,
        learned_inner_lr: bool = False,
        network: Callable[..., PredictionNetwork] = PredictionNetwork,
        head: Head | None = None,
        adapt_head: bool = False,
    ) -> None:
        super().__init__(
            input_dim=input_dim,
            output_dim=output_dim,
            num_inner_steps=num_inner_steps,
            inner_lr=inner_lr,
            first_order=first_order,
            task_loss=task_loss,
            inner_task_loss=inner_task_loss,
            learned_inner_lr=learned_inner_lr,
            head=make_head(head, task_loss),
        )
        if context_dim < 1:
            raise ValueError(f"CAVIA needs context_dim >= 1, got {context_dim}")
        self.context_dim = context_dim  # C
        self.head.build(self)  # its weights before the network's, as they always were
        # f_{phi, theta}; under a per-task head g_{phi, theta}, the features under it.
        self.network = build_network(self, network, self.head)
        if adapt_head and not self.head.per_task:
            raise ValueError(
                "adapt_head=True steps a per-task head (PrototypeHead, SteppedLinearHead); "
                "the linear head's weights are shared, not adapted"
            )
        self.adapt_head = adapt_head
        self.capabilities = Capabilities(
            adapts_context=not self.head.per_task,  # else the state holds the head too
            steps_context=True,
            # A per-task head stays as the support set made it, unless adapt_head.
            adapted_parts=("context", "head") if adapt_head else ("context",),
            every_class_reason=self.head.every_class_reason,
            steps_state=True,
        )
        if adapt_head and self.learned_inner_lr:
            raise ValueError(
                "learned_inner_lr=True (Meta-SGD) learns a step size per context number; "
                "with adapt_head=True the stepped head would need its own: not supported"
            )
        self.build_inner_lrs([(self.context_dim,)])  # Meta-SGD: alpha [C]

    def initial_state(self, batch_size: tf.Tensor) -> AdaptedState:
        context = tf.zeros(tf.stack([batch_size, self.context_dim]))  # phi_0 = 0, [B, C]
        head = self.head.empty(batch_size, self.network, self.output_dim)
        return AdaptedState(context=context, head=head)

    def start_state(self, support_x, support_y, support_mask) -> AdaptedState:
        context = tf.zeros(tf.stack([tf.shape(support_x)[0], self.context_dim]))  # phi_0
        head = self.head.start(
            lambda: self.network(support_x, context),  # [B, K, H]
            support_y,
            support_mask,
            self.output_dim,
        )
        return AdaptedState(context=context, head=head)

    def hparams(self) -> dict[str, str | int | float | bool]:
        return {**super().hparams(), "adapt_head": self.adapt_head}

    def predict(self, state: AdaptedState, x: tf.Tensor) -> tf.Tensor:
        return self.head.apply(self.network(x, state.context), state.head)
