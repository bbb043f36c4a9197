"""VIABLE (docs/method.md §3): the inner loss is a learned loss network Lhat_psi; on CAVIA as in the
paper (`VIABLE`), and on MAML (`MAMLVIABLE`) and LEO (`LEOVIABLE`), which the paper's
authors name as future work: on MAML the learned loss drives the inner loop over all
prediction-network weights, on LEO its latent-space steps (learners/leo.py).

The loss network is frozen during adaptation; its weights psi are meta-learned
with theta from the same query loss (always the true task loss). The learned
loss's gradient reaches phi through y_hat and through L_T(y_hat, y).

What the loss network sees of each support point, and how its output becomes the inner
loss, are parts chosen in gin (learners/loss_features.py): `features`, by default the
paper's (L_T, y_hat, y, and x for a loss network that reads the inputs), and `form`,
by default the paper's (`Learned()`; `Residual()` adds the base learner's own loss).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import keras
import tensorflow as tf

from viable_tf.configurable import keras_configurable
from viable_tf.learners import leo, loss_features
from viable_tf.learners.cavia import CAVIA
from viable_tf.learners.heads import Head
from viable_tf.learners.leo import LEO
from viable_tf.learners.loss_features import Learned, Residual, Support
from viable_tf.learners.maml import MAML
from viable_tf.networks.loss_networks import RelationLossNetwork
from viable_tf.networks.prediction import PredictionNetwork


class LearnedInnerLoss:
    """The inner loss as a loss network on per-point features: mixed into a learner
    (before its base class) in place of the task loss. It takes its three arguments and
    hands the rest to the base learner; each learner made with it names them all."""

    def __init__(
        self,
        *,
        loss_network: Callable[[], keras.layers.Layer] = RelationLossNetwork,
        features: Sequence | None = None,
        form: Learned | Residual | None = None,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.loss_network = loss_network()  # Lhat_psi
        reads_inputs = self.loss_network.include_inputs
        if features is None:
            features = loss_features.paper_features(reads_inputs)
        self.features = loss_features.check_features(features, reads_inputs)
        self.form = Learned() if form is None else form
        self.feature_dim = sum(part.width(self) for part in self.features)  # F
        self.loss_network.build((None, None, self.feature_dim))

    @property
    def variant(self) -> str:
        """'simviable', 'relviable' or 'attviable', after the loss network."""
        return f"{self.loss_network.variant}viable"

    def hparams(self) -> dict[str, str | int | float | bool]:
        parts = {"class_order": "episode", "pair_inputs": "x", "gradient_agreement": False}
        for part in (*self.features, self.form):
            parts.update(part.hparams())
        return {
            **super().hparams(),
            "activation": self.loss_network.activation.__name__,
            **parts,
            # The relation network's set readout appears where it is set.
            **(
                {"readout": "set"}
                if self.loss_network.variant == "rel" and self.loss_network.readout == "set"
                else {}
            ),
        }

    def support(self, state, support_x, support_y, support_mask) -> Support:
        """The support sets at `state` as the feature parts read them."""
        if any(part.reads_penultimate for part in self.features):
            # What the output layer sees, at the current state: h [B, K, H].
            if self.head.per_task:  # the network's output is h; the head maps it
                inputs = self.network(support_x, state.context)
                y_hat = self.head.apply(inputs, state.head)  # as predict(state, x)
            else:
                y_hat, inputs = self.network.call_with_penultimate(support_x, state.context)
        else:
            y_hat, inputs = self.predict(state, support_x), support_x  # [B, K, Y], [B, K, D]
        return Support(self, state, support_x, support_y, support_mask, y_hat, inputs)

    def point_features(self, support: Support) -> tf.Tensor:
        """f [B, K, F]: the feature parts' numbers, in the order listed."""
        return tf.concat([part(support) for part in self.features], axis=-1)

    def inner_loss(
        self, state, support_x, support_y, support_mask, *, step=0, query_x=None
    ) -> tf.Tensor:
        """The loss network's inner loss (the same at every step; no queries read)."""
        support = self.support(state, support_x, support_y, support_mask)
        learned = self.loss_network(self.point_features(support), support_mask)  # [B]
        return self.form(learned, support)  # [B]


@keras_configurable
class VIABLE(LearnedInnerLoss, CAVIA):
    """CAVIA whose inner loop descends a learned loss (simVIABLE, relVIABLE, attVIABLE):
    CAVIA's arguments, and the loss network, the point features it reads and the form of
    the inner loss (LearnedInnerLoss)."""

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
        loss_network: Callable[[], keras.layers.Layer] = RelationLossNetwork,
        features: Sequence | None = None,
        form: Learned | Residual | None = None,
    ) -> None:
        super().__init__(
            input_dim=input_dim,
            output_dim=output_dim,
            context_dim=context_dim,
            num_inner_steps=num_inner_steps,
            inner_lr=inner_lr,
            first_order=first_order,
            task_loss=task_loss,
            inner_task_loss=inner_task_loss,
            learned_inner_lr=learned_inner_lr,
            network=network,
            head=head,
            adapt_head=adapt_head,
            loss_network=loss_network,
            features=features,
            form=form,
        )

    @property
    def base_name(self) -> str:  # type: ignore[override]
        return self.variant


@keras_configurable
class MAMLVIABLE(LearnedInnerLoss, MAML):
    """MAML whose inner loop over all prediction-network weights descends a learned loss.

    The loss network is frozen during adaptation and meta-learned with theta from the
    true query loss, second order unless `first_order`; its gradient reaches the weights
    through y_hat and L_T. MAML's arguments and defaults (`context_dim=0`, `inner_lr=0.1`),
    and the learned loss's (LearnedInnerLoss).
    """

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
        loss_network: Callable[[], keras.layers.Layer] = RelationLossNetwork,
        features: Sequence | None = None,
        form: Learned | Residual | None = None,
    ) -> None:
        super().__init__(
            input_dim=input_dim,
            output_dim=output_dim,
            context_dim=context_dim,
            num_inner_steps=num_inner_steps,
            inner_lr=inner_lr,
            first_order=first_order,
            task_loss=task_loss,
            inner_task_loss=inner_task_loss,
            learned_inner_lr=learned_inner_lr,
            network=network,
            head=head,
            loss_network=loss_network,
            features=features,
            form=form,
        )

    @property
    def base_name(self) -> str:  # type: ignore[override]
        return f"maml_{self.variant}"


@keras_configurable
class LEOVIABLE(LearnedInnerLoss, LEO):
    """LEO whose latent-space steps (and, with `learned_finetuning`, its fine-tuning steps)
    descend a learned loss network, meta-learned with the rest from the same outer
    objective. The learned loss is scaled by the number of real support points, so that
    it takes the place of LEO's summed task loss at the same learning rates."""

    def __init__(
        self,
        *,
        input_dim: int,
        output_dim: int,
        num_latents: int = 64,
        num_latent_steps: int = 5,
        num_finetuning_steps: int = 5,
        inner_lr: float = 1.0,
        finetuning_lr: float = 0.001,
        dropout_rate: float = 0.5,
        kl_weight: float = 1e-3,
        encoder_penalty_weight: float = 1e-9,
        l2_penalty_weight: float = 1e-8,
        orthogonality_penalty_weight: float = 1e-3,
        first_order: bool = False,
        task_loss: str = "cross_entropy",
        loss_network: Callable[[], keras.layers.Layer] = RelationLossNetwork,
        features: Sequence | None = None,
        form: Learned | Residual | None = None,
        learned_finetuning: bool = False,
    ) -> None:
        super().__init__(
            input_dim=input_dim,
            output_dim=output_dim,
            num_latents=num_latents,
            num_latent_steps=num_latent_steps,
            num_finetuning_steps=num_finetuning_steps,
            inner_lr=inner_lr,
            finetuning_lr=finetuning_lr,
            dropout_rate=dropout_rate,
            kl_weight=kl_weight,
            encoder_penalty_weight=encoder_penalty_weight,
            l2_penalty_weight=l2_penalty_weight,
            orthogonality_penalty_weight=orthogonality_penalty_weight,
            first_order=first_order,
            task_loss=task_loss,
            loss_network=loss_network,
            features=features,
            form=form,
        )
        self.learned_finetuning = learned_finetuning

    @property
    def base_name(self) -> str:  # type: ignore[override]
        return f"leo_{self.variant}" + ("_ft" if self.learned_finetuning else "")

    def inner_loss(
        self, state, support_x, support_y, support_mask, *, step=0, query_x=None
    ) -> tf.Tensor:
        mean = super().inner_loss(state, support_x, support_y, support_mask)
        return leo.summed(mean, support_mask)

    def finetuning_loss(self, state, support_x, support_y, support_mask) -> tf.Tensor:
        if self.learned_finetuning:
            return self.inner_loss(state, support_x, support_y, support_mask)
        return self.summed_task_loss(state, support_x, support_y, support_mask)

    def hparams(self) -> dict[str, str | int | float | bool]:
        return {**super().hparams(), "learned_finetuning": self.learned_finetuning}
