"""MAML (docs/method.md §2): adapt all prediction-network weights (and the context, if any).

Each task gets its own copy of the weights, with a leading task axis B, so one
batched forward pass adapts all tasks at once.

Under a per-task head (`head=PrototypeHead()`, classification, Proto-MAML) the output
layer is not a meta-learned weight: per task it starts at the class means of the
support features (learners/heads.py), and the inner loop adapts it with every other
weight.
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
class MAML(GradientLearner):
    """MAML: theta is both the meta-learned initialisation and what is adapted.

    `head`, `inner_task_loss` and `learned_inner_lr` (a step size per weight) as CAVIA's.
    """

    base_name = "maml"

    def __init__(
        self,
        *,
        input_dim: int,
        output_dim: int,
        context_dim: int = 0,
        num_inner_steps: int = 1,
        inner_lr: float = 0.1,
        first_order: bool = False,
        task_loss: str = "mse",
        inner_task_loss: str | None = None,
        learned_inner_lr: bool = False,
        network: Callable[..., PredictionNetwork] = PredictionNetwork,
        head: Head | None = None,
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
        if context_dim < 0:
            raise ValueError(f"context_dim must be >= 0, got {context_dim}")
        self.context_dim = context_dim  # C (0: plain MAML)
        self.capabilities = Capabilities(
            every_class_reason=self.head.every_class_reason, steps_state=True
        )
        self.head.build(self)  # its weights before the network's, as they always were
        self.network = build_network(self, network, self.head)
        if self.learned_inner_lr and self.head.per_task:
            raise ValueError(
                "learned_inner_lr=True (Meta-SGD) learns a step size per weight of the "
                "network; a per-task head's stepped output layer would need its own: "
                "not supported"
            )
        # Meta-SGD: alpha shaped as each weight, then [C] for the context.
        context = [(self.context_dim,)] if self.context_dim else []
        self.build_inner_lrs([tuple(w.shape) for w in self.network.params] + context)

    def initial_state(self, batch_size: tf.Tensor) -> AdaptedState:
        """Per-task copies of theta, (phi), (the head's kernel and bias)."""
        # theta copied per task: [B, *w.shape]; the tile keeps the meta-gradient path.
        weights = tuple(
            tf.tile(w[None], tf.concat([[batch_size], tf.ones([len(w.shape)], tf.int32)], 0))
            for w in self.network.params
        )
        context = tf.zeros(tf.stack([batch_size, self.context_dim])) if self.context_dim else None
        head = self.head.empty(batch_size, self.network, self.output_dim)
        return AdaptedState(context=context, weights=weights, head=head)

    def start_state(self, support_x, support_y, support_mask) -> AdaptedState:
        state = self.initial_state(tf.shape(support_x)[0])
        head = self.head.start(
            # The shared theta (not its per-task copies): [B, K, H].
            lambda: self.network.forward(self.network.params, support_x, state.context),
            support_y,
            support_mask,
            self.output_dim,
        )
        return state.replace(head=head)

    def predict(self, state: AdaptedState, x: tf.Tensor) -> tf.Tensor:
        out = self.network.forward(state.weights, x, state.context)  # phi, or None
        return self.head.apply(out, state.head)
