"""CAVIA (SPEC §1): adapt only a task context phi, from phi_0 = 0, by gradient steps."""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

from viable_tf.configurable import keras_configurable
from viable_tf.learners.base import Learner, State
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
        self.network = network(
            input_dim=input_dim, output_dim=output_dim, context_dim=context_dim
        )  # f_{phi, theta}

    def initial_state(self, batch_size: tf.Tensor) -> State:
        return [tf.zeros(tf.stack([batch_size, self.context_dim]))]  # phi_0 = 0, [B, C]

    def predict(self, state: State, x: tf.Tensor) -> tf.Tensor:
        (context,) = state
        return self.network(x, context)
