"""CAVIA (SPEC §1): adapt only a task context phi, from phi_0 = 0, by gradient steps.

With `head='prototypes'` (classification) the output layer starts, per task, at the
class means of the support features computed at phi_0 (learners/prototypes.py), and the
inner loop adapts phi under that head: the state holds phi and the head (kernel, bias),
stepped through phi only.
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

from viable_tf.configurable import keras_configurable
from viable_tf.learners import prototypes
from viable_tf.learners.base import AdaptedState, Learner, State
from viable_tf.networks.prediction import PredictionNetwork


@keras_configurable
class CAVIA(Learner):
    """CAVIA: the shared weights theta are meta-learned; phi [B, C] is adapted per task."""

    method_name = "cavia"
    adapts_context = True

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
        network: Callable[..., PredictionNetwork] = PredictionNetwork,
        head: str = "linear",
        head_temperature: float = 1.0,
        learn_temperature: bool = False,
        prototype: str = "mean",
        **kwargs,
    ) -> None:
        super().__init__(
            input_dim=input_dim,
            output_dim=output_dim,
            num_inner_steps=num_inner_steps,
            inner_lr=inner_lr,
            first_order=first_order,
            task_loss=task_loss,
            **kwargs,
        )
        if context_dim < 1:
            raise ValueError(f"CAVIA needs context_dim >= 1, got {context_dim}")
        self.context_dim = context_dim  # C
        # f_{phi, theta}; with the prototype head g_{phi, theta}, the features under it.
        self.head, self.temperature, self.network = prototypes.head_and_network(
            self,
            network,
            context_dim=context_dim,
            head=head,
            initial_temperature=head_temperature,
            learn_temperature=learn_temperature,
        )
        # How the head's class prototypes are made from the support features.
        self.prototype = prototypes.check_prototype(prototype)
        if self.head == "prototypes":
            self.adapts_context = False  # the adapted state holds the head too
            self.adapted_parts = ("context",)

    def initial_state(self, batch_size: tf.Tensor) -> State:
        context = tf.zeros(tf.stack([batch_size, self.context_dim]))  # phi_0 = 0, [B, C]
        if self.head == "linear":
            return AdaptedState(context=context)
        # No support set, no class means: every class is empty (uniform probabilities).
        kernel = tf.zeros(tf.stack([batch_size, self.network.feature_dim, self.output_dim]))
        bias = tf.fill(tf.stack([batch_size, self.output_dim]), prototypes.EMPTY_CLASS_BIAS)
        return AdaptedState(context=context, head=(kernel, bias))

    def start_state(self, support_x, support_y, support_mask) -> State:
        if self.head == "linear":
            return self.initial_state(tf.shape(support_x)[0])
        context = tf.zeros(tf.stack([tf.shape(support_x)[0], self.context_dim]))  # phi_0
        features = self.network(support_x, context)  # [B, K, H]
        head = prototypes.prototype_head(
            features, support_y, support_mask, self.output_dim, self.prototype
        )
        return AdaptedState(context=context, head=head)

    def predict(self, state: State, x: tf.Tensor) -> tf.Tensor:
        if self.head == "linear":
            return self.network(x, state.context)
        features = self.network(x, state.context)
        return prototypes.apply_head(features, *state.head, self.temperature)
