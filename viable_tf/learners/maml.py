"""MAML (SPEC §2): adapt all prediction-network weights (and the context, if any).

Each task gets its own copy of the weights, with a leading task axis B, so one
batched forward pass adapts all tasks at once.

With `head='prototypes'` (classification, Proto-MAML) the output layer is not a
meta-learned weight: per task it starts at the class means of the support features
(learners/prototypes.py), and the inner loop adapts it with every other weight.
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

from viable_tf.configurable import keras_configurable
from viable_tf.learners import prototypes
from viable_tf.learners.base import AdaptedState, Learner, State
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
        if context_dim < 0:
            raise ValueError(f"context_dim must be >= 0, got {context_dim}")
        self.context_dim = context_dim  # C (0: plain MAML)
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

    def initial_state(self, batch_size: tf.Tensor) -> State:
        """Per-task copies of theta, (phi), (the head's kernel and bias)."""
        # theta copied per task: [B, *w.shape]; the tile keeps the meta-gradient path.
        weights = tuple(
            tf.tile(w[None], tf.concat([[batch_size], tf.ones([len(w.shape)], tf.int32)], 0))
            for w in self.network.params
        )
        context = tf.zeros(tf.stack([batch_size, self.context_dim])) if self.context_dim else None
        head = ()
        if self.head == "prototypes":  # no support set: every class empty (uniform)
            kernel = tf.zeros(tf.stack([batch_size, self.network.feature_dim, self.output_dim]))
            bias = tf.fill(tf.stack([batch_size, self.output_dim]), prototypes.EMPTY_CLASS_BIAS)
            head = (kernel, bias)
        return AdaptedState(context=context, weights=weights, head=head)

    def start_state(self, support_x, support_y, support_mask) -> State:
        state = self.initial_state(tf.shape(support_x)[0])
        if self.head == "linear":
            return state
        # The shared theta (not its per-task copies): [B, K, H].
        features = self.network.forward(self.network.params, support_x, self._context(state))
        head = prototypes.prototype_head(
            features, support_y, support_mask, self.output_dim, self.prototype
        )
        return state.replace(head=head)

    def _context(self, state: State) -> tf.Tensor | None:
        return state.context if self.context_dim else None

    def predict(self, state: State, x: tf.Tensor) -> tf.Tensor:
        out = self.network.forward(state.weights, x, self._context(state))
        if self.head == "linear":
            return out
        return prototypes.apply_head(out, *state.head, self.temperature)
