"""MAML (SPEC §2): adapt all prediction-network weights (and the context, if any).

Each task gets its own copy of the weights, with a leading task axis B, so one
batched forward pass adapts all tasks at once.
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

from viable_tf.configurable import keras_configurable
from viable_tf.learners.base import Learner, State
from viable_tf.networks.prediction import PredictionNetwork


@keras_configurable
class MAML(Learner):
    """MAML: theta is both the meta-learned initialisation and what is adapted."""

    method_name = "maml"

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
        network: Callable[..., PredictionNetwork] = PredictionNetwork,
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
        if context_dim < 0:
            raise ValueError(f"context_dim must be >= 0, got {context_dim}")
        self.context_dim = context_dim  # C (0: plain MAML)
        self.network = network(input_dim=input_dim, output_dim=output_dim, context_dim=context_dim)

    def initial_state(self, batch_size: tf.Tensor) -> State:
        # theta copied per task: [B, *w.shape]; the tile keeps the meta-gradient path.
        weights = [
            tf.tile(w[None], tf.concat([[batch_size], tf.ones([len(w.shape)], tf.int32)], 0))
            for w in self.network.params
        ]
        if self.context_dim:
            weights.append(tf.zeros(tf.stack([batch_size, self.context_dim])))  # [B, C]
        return weights

    def predict(self, state: State, x: tf.Tensor) -> tf.Tensor:
        if self.context_dim:
            *weights, context = state
            return self.network.forward(weights, x, context)
        return self.network.forward(state, x)
