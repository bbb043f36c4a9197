"""VIABLE (SPEC §3): the inner loss is a learned loss network Lhat_psi; on CAVIA as in the
paper (`VIABLE`), and on MAML (`MAMLVIABLE`) and LEO (`LEOVIABLE`), which the paper's
authors name as future work: on MAML the learned loss drives the inner loop over all
prediction-network weights, on LEO its latent-space steps (learners/leo.py).

The loss network is frozen during adaptation; its weights psi are meta-learned
with theta from the same query loss (always the true task loss). The learned
loss's gradient reaches phi through y_hat and through L_T(y_hat, y).

Per-point features f_j (F numbers): (L_T(y_hat_j, y_j), y_hat_j, y_j), plus x_j
when the loss network asks for inputs (the relation network does). For
classification y_hat_j are the N logits and y_j the one-hot label.

Two options exist for the reproduction study (docs/RESULTS.md), both off by
default, which is the paper's method: `include_task_loss=False` drops L_T from
f_j, and `input_scale=s` feeds x/s, y_hat/s, y/s and L_T/s^2 (s = 5 maps sine's
ranges to about [-1, 1]).
"""

from __future__ import annotations

from collections.abc import Callable

import keras
import tensorflow as tf

from viable_tf.configurable import keras_configurable
from viable_tf.learners import leo
from viable_tf.learners.cavia import CAVIA
from viable_tf.learners.leo import LEO
from viable_tf.learners.maml import MAML
from viable_tf.networks.loss_networks import RelationLossNetwork


class LearnedInnerLoss:
    """The inner loss as a loss network on per-point features: mixed into a learner
    (before its base class) in place of the task loss."""

    def __init__(
        self,
        *,
        loss_network: Callable[[], keras.layers.Layer] = RelationLossNetwork,
        include_task_loss: bool = True,
        input_scale: float = 1.0,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        if not input_scale > 0:
            raise ValueError(f"input_scale must be > 0, got {input_scale}")
        self.include_task_loss = include_task_loss
        self.input_scale = float(input_scale)
        self.loss_network = loss_network()  # Lhat_psi
        label_dim = self.output_dim  # Y, or N for a one-hot label
        feature_dim = int(include_task_loss) + self.output_dim + label_dim
        if self.loss_network.include_inputs:
            feature_dim += self.input_dim
        self.feature_dim = feature_dim  # F
        self.loss_network.build((None, None, feature_dim))

    @property
    def variant(self) -> str:
        """'simviable', 'relviable' or 'attviable', after the loss network."""
        return f"{self.loss_network.variant}viable"

    def hparams(self) -> dict[str, str | int | float | bool]:
        activation = self.loss_network.activation.__name__
        return {**super().hparams(), "activation": activation}

    def point_features(self, x: tf.Tensor, y: tf.Tensor, y_hat: tf.Tensor) -> tf.Tensor:
        """x [B, K, D], y [B, K, Y] (or int [B, K]), y_hat [B, K, Y] -> f [B, K, F]."""
        point_loss = self.task_loss(y_hat, y)  # [B, K]
        if self.is_classifier:
            y = tf.one_hot(y, self.output_dim, dtype=y_hat.dtype)  # [B, K, N]
        scale = self.input_scale
        parts = [y_hat / scale, y / scale] if scale != 1.0 else [y_hat, y]
        if self.include_task_loss:
            parts.insert(0, point_loss[..., None] / scale**2)
        if self.loss_network.include_inputs:
            parts.append(x / scale if scale != 1.0 else x)
        return tf.concat(parts, axis=-1)  # [B, K, F]

    def inner_loss(self, state, support_x, support_y, support_mask) -> tf.Tensor:
        y_hat = self.predict(state, support_x)  # [B, K, Y]
        features = self.point_features(support_x, support_y, y_hat)  # [B, K, F]
        return self.loss_network(features, support_mask)  # [B]


@keras_configurable
class VIABLE(LearnedInnerLoss, CAVIA):
    """CAVIA whose inner loop descends a learned loss (simVIABLE, relVIABLE, attVIABLE)."""

    @property
    def method_name(self) -> str:  # type: ignore[override]
        return self.variant


@keras_configurable
class MAMLVIABLE(LearnedInnerLoss, MAML):
    """MAML whose inner loop over all prediction-network weights descends a learned loss.

    The loss network is frozen during adaptation and meta-learned with theta from the
    true query loss, second order unless `first_order`; its gradient reaches the weights
    through y_hat and L_T. Defaults as MAML's: `context_dim=0`, `inner_lr=0.1`.
    """

    @property
    def method_name(self) -> str:  # type: ignore[override]
        return f"maml_{self.variant}"


@keras_configurable
class LEOVIABLE(LearnedInnerLoss, LEO):
    """LEO whose latent-space steps (and, with `learned_finetuning`, its fine-tuning steps)
    descend a learned loss network, meta-learned with the rest from the same outer
    objective. The learned loss is scaled by the number of real support points, so that
    it takes the place of LEO's summed task loss at the same learning rates."""

    def __init__(self, *, learned_finetuning: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.learned_finetuning = learned_finetuning

    @property
    def method_name(self) -> str:  # type: ignore[override]
        return f"leo_{self.variant}" + ("_ft" if self.learned_finetuning else "")

    def inner_loss(self, state, support_x, support_y, support_mask) -> tf.Tensor:
        mean = super().inner_loss(state, support_x, support_y, support_mask)
        return leo.summed(mean, support_mask)

    def finetuning_loss(self, state, support_x, support_y, support_mask) -> tf.Tensor:
        if self.learned_finetuning:
            return self.inner_loss(state, support_x, support_y, support_mask)
        return LEO.inner_loss(self, state, support_x, support_y, support_mask)

    def hparams(self) -> dict[str, str | int | float | bool]:
        return {**super().hparams(), "learned_finetuning": self.learned_finetuning}
