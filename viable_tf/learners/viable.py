"""VIABLE (docs/method.md §3): the inner loss is a learned loss network Lhat_psi; on CAVIA as in the
paper (`VIABLE`), and on MAML (`MAMLVIABLE`) and LEO (`LEOVIABLE`), which the paper's
authors name as future work: on MAML the learned loss drives the inner loop over all
prediction-network weights, on LEO its latent-space steps (learners/leo.py).

The loss network is frozen during adaptation; its weights psi are meta-learned
with theta from the same query loss (always the true task loss). The learned
loss's gradient reaches phi through y_hat and through L_T(y_hat, y).

Per-point features f_j (F numbers): (L_T(y_hat_j, y_j), y_hat_j, y_j), plus x_j
when the loss network asks for inputs (the relation network does). For
classification y_hat_j are the N logits and y_j the one-hot label.

`gradient_agreement=True` (beyond the paper; off by default) adds to f_j two numbers
that put the paper's own argument for the relation network ("an outlier with a large
disagreeing gradient compared to the other samples") into each point's features: the
cosine between the point's task-loss gradient with respect to phi and the mean gradient
of the other support points, and the point's gradient norm over the set's mean norm.
They are computed at the current state and given as constants (as x is), so a loss
network can learn to discount a point whose step disagrees with the rest; docs/method.md §8.

Two options exist for the reproduction study (docs/method.md §3.1), both off by
default, which is the paper's method: `include_task_loss=False` drops L_T from
f_j, and `input_scale=s` feeds x/s, y_hat/s, y/s and L_T/s^2 (s = 5 maps sine's
ranges to about [-1, 1]).

`residual=True` (beyond the paper; off by default) learns the inner loss as a correction
to the task loss: the inner loss is the support set's mean task loss plus Lhat_psi, so a
loss network whose output starts at zero (`output_init='zeros'`) starts as the base
learner's own step and meta-training learns what to change. Without it the learned step
carries no information until meta-training has aligned it with the task's, and end to
end at 20 ways the network's logits went deaf to phi first (docs/method.md §3.1, §9).

`class_order='canonical'` (classification) makes the learned loss invariant to the
episode's arbitrary numbering of the classes, as the cross-entropy is: the N logits
are given labelled class first, then the other N - 1 in decreasing order, and the
one-hot label (then always e_0) is dropped, so f_j holds (L_T, y_hat_{j,y_j}, the
sorted rest). With the paper's layout (`'episode'`, the default) an MLP on (logits,
one-hot label) weighs class 0, 1, ... differently: at initialisation its inner step
moves every query's logits by the same class-index bias, which on randomly relabelled
episodes only hurts, and end to end on images meta-training answered by switching
adaptation off (docs/method.md §3.1).
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
from viable_tf.ops import masked_mean

#: How a classifier's per-point features order the N classes: as the episode numbers
#: them (the paper's layout: N logits and the one-hot label) or canonically.
CLASS_ORDERS = ("episode", "canonical")
#: What a loss network that sees each point's input (relVIABLE's) is given of it: x as
#: it is (the paper: sine's x, LEO's 640 features), or the prediction network's
#: penultimate features at the current state (images end to end: 784 pixels are no
#: input for an MLP over pairs; docs/method.md §9 says why), with
#: the learned loss's gradient flowing through them or not ("_stopped": they inform the
#: loss as x does, and phi is reached through y_hat and L_T only).
PAIR_INPUTS = ("x", "penultimate", "penultimate_stopped")
#: What each point's features hold of the task loss L_T: its own (the paper's), the
#: support set's mean over the real points (what a loss averaged before it reaches the
#: loss network would give every point), or both.
TASK_LOSS_FEATURES = ("point", "mean", "both")


class LearnedInnerLoss:
    """The inner loss as a loss network on per-point features: mixed into a learner
    (before its base class) in place of the task loss."""

    def __init__(
        self,
        *,
        loss_network: Callable[[], keras.layers.Layer] = RelationLossNetwork,
        include_task_loss: bool = True,
        input_scale: float = 1.0,
        class_order: str = "episode",
        pair_inputs: str = "x",
        gradient_agreement: bool = False,
        residual: bool = False,
        task_loss_feature: str = "point",
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        if task_loss_feature not in TASK_LOSS_FEATURES:
            raise ValueError(
                f"task_loss_feature must be one of {TASK_LOSS_FEATURES}, got {task_loss_feature!r}"
            )
        self.task_loss_feature = task_loss_feature
        if not input_scale > 0:
            raise ValueError(f"input_scale must be > 0, got {input_scale}")
        if class_order not in CLASS_ORDERS:
            raise ValueError(f"class_order must be one of {CLASS_ORDERS}, got {class_order!r}")
        if class_order == "canonical" and not self.is_classifier:
            raise ValueError("class_order='canonical' needs a classifier (cross_entropy)")
        self.include_task_loss = include_task_loss
        self.input_scale = float(input_scale)
        self.class_order = class_order
        if pair_inputs not in PAIR_INPUTS:
            raise ValueError(f"pair_inputs must be one of {PAIR_INPUTS}, got {pair_inputs!r}")
        self.pair_inputs = pair_inputs
        if gradient_agreement and not self.steps_context:
            raise ValueError(
                "gradient_agreement=True needs a learner that adapts a context phi "
                "(VIABLE on CAVIA)"
            )
        self.gradient_agreement = gradient_agreement
        self.residual = residual
        self.loss_network = loss_network()  # Lhat_psi
        # Y, or N for a one-hot label; none when the label is the logits' first position.
        label_dim = 0 if class_order == "canonical" else self.output_dim
        task_loss_dim = int(include_task_loss) * (2 if task_loss_feature == "both" else 1)
        feature_dim = task_loss_dim + self.output_dim + label_dim
        if self.loss_network.include_inputs:
            feature_dim += self._input_feature_dim()
        feature_dim += 2 * int(gradient_agreement)
        self.feature_dim = feature_dim  # F
        self.loss_network.build((None, None, feature_dim))

    def _input_feature_dim(self) -> int:
        """How many numbers of each point's input the loss network sees: D, or H."""
        if self.pair_inputs == "x":
            return self.input_dim  # D
        if self.steps_context and self.head.per_task:
            return self.network.feature_dim  # H: the network ends where the head starts
        needs = (
            "pair_inputs='penultimate' needs VIABLE on CAVIA, with a per-task head "
            "(the network ends at its features) or with the plain output layer and a "
            "network that gives its penultimate features (keras_network of a "
            "functional model)"
        )
        if not self.adapts_context:
            raise ValueError(needs)
        try:
            return self.network.penultimate_dim  # H; builds the two-output model now
        except AttributeError:
            raise ValueError(needs) from None

    @property
    def variant(self) -> str:
        """'simviable', 'relviable' or 'attviable', after the loss network."""
        return f"{self.loss_network.variant}viable"

    def hparams(self) -> dict[str, str | int | float | bool]:
        activation = self.loss_network.activation.__name__
        return {
            **super().hparams(),
            "activation": activation,
            "class_order": self.class_order,
            "pair_inputs": self.pair_inputs,
            "gradient_agreement": self.gradient_agreement,
            "residual": self.residual,
            # Options of the reproduction study appear where they are set.
            **(
                {"task_loss_feature": self.task_loss_feature}
                if self.task_loss_feature != "point"
                else {}
            ),
            **(
                {"readout": "set"}
                if self.loss_network.variant == "rel" and self.loss_network.readout == "set"
                else {}
            ),
        }

    def point_features(
        self, x: tf.Tensor, y: tf.Tensor, y_hat: tf.Tensor, mask: tf.Tensor | None = None
    ) -> tf.Tensor:
        """x [B, K, D] (or the penultimate h [B, K, H]), y [B, K, Y] (or int [B, K]),
        y_hat [B, K, Y], mask bool [B, K] (None: every point is real) -> f [B, K, F]."""
        point_loss = self.task_loss(y_hat, y)  # [B, K]
        losses = [point_loss[..., None]]  # [B, K, 1]
        if self.task_loss_feature != "point":
            real = tf.ones_like(point_loss, tf.bool) if mask is None else mask
            mean = masked_mean(point_loss, real, axis=1)  # [B]
            mean = tf.broadcast_to(mean[:, None, None], tf.shape(losses[0]))  # [B, K, 1]
            losses = [mean] if self.task_loss_feature == "mean" else [losses[0], mean]
        if self.class_order == "canonical":
            y_hat, y = canonical_logits(y_hat, y), None  # [B, K, N]: the label's first
        elif self.is_classifier:
            y = tf.one_hot(y, self.output_dim, dtype=y_hat.dtype)  # [B, K, N]
        scale = self.input_scale
        parts = [y_hat / scale] + ([] if y is None else [y / scale])
        if self.include_task_loss:
            parts[:0] = [loss / scale**2 for loss in losses]
        if self.loss_network.include_inputs:
            parts.append(x / scale if scale != 1.0 else x)
        return tf.concat(parts, axis=-1)  # [B, K, F]

    def inner_loss(self, state, support_x, support_y, support_mask) -> tf.Tensor:
        if self.loss_network.include_inputs and self.pair_inputs != "x":
            # What the output layer sees, at the current state: h [B, K, H].
            if self.head.per_task:  # the network's output is h; the head maps it
                inputs = self.network(support_x, state.context)
                y_hat = self.head.apply(inputs, state.head)  # as predict(state, x)
            else:
                y_hat, inputs = self.network.call_with_penultimate(support_x, state.context)
            if self.pair_inputs == "penultimate_stopped":
                inputs = tf.stop_gradient(inputs)
        else:
            y_hat, inputs = self.predict(state, support_x), support_x  # [B, K, Y], [B, K, D]
        features = self.point_features(inputs, support_y, y_hat, support_mask)  # [B, K, F]
        if self.gradient_agreement:
            agreement = self.gradient_agreement_features(state, support_x, support_y, support_mask)
            features = tf.concat([features, agreement], axis=-1)  # [B, K, F]
        learned = self.loss_network(features, support_mask)  # [B]
        if not self.residual:
            return learned
        # The base learner's own inner loss (the task loss, or its robust stand-in) on the
        # same predictions, plus the learned correction.
        task = masked_mean(self.inner_task_loss(y_hat, support_y), support_mask, axis=1)
        return task + learned  # [B]

    def gradient_agreement_features(self, state, support_x, support_y, support_mask):
        """[B, K, 2], constants: for each support point j, the cosine between g_j, the
        gradient of its task loss with respect to phi at `state`, and the mean g of the
        other real points; and |g_j| over the mean |g| of the real points. Zero where
        the mask is 0 (and the cosine 0 for a point with no other)."""
        batch, points = tf.shape(support_x)[0], tf.shape(support_x)[1]
        # Each point as a task of its own, with its task's state: one pass gives every
        # point's gradient with respect to its own copy of phi.
        per_point = tf.nest.map_structure(
            lambda t: tf.repeat(tf.stop_gradient(t), points, axis=0), state
        )  # [B K, ...]
        x = tf.reshape(support_x, tf.concat([[batch * points, 1], tf.shape(support_x)[2:]], 0))
        y = tf.reshape(support_y, tf.concat([[batch * points, 1], tf.shape(support_y)[2:]], 0))
        with tf.GradientTape() as tape:
            tape.watch(per_point.context)
            loss = tf.reduce_sum(self.task_loss(self.predict(per_point, x), y))
        grads = tape.gradient(loss, per_point.context)  # [B K, C]
        mask = tf.cast(support_mask, grads.dtype)[..., None]  # [B, K, 1]
        grads = tf.reshape(grads, [batch, points, -1]) * mask  # [B, K, C]
        count = tf.reduce_sum(mask, axis=1, keepdims=True)  # [B, 1, 1]
        others = (tf.reduce_sum(grads, axis=1, keepdims=True) - grads) / tf.maximum(
            count - 1.0, 1.0
        )  # [B, K, C]
        cosine = tf.reduce_sum(
            tf.math.l2_normalize(grads, -1) * tf.math.l2_normalize(others, -1), -1
        )  # [B, K]
        norms = tf.norm(grads, axis=-1)  # [B, K]
        mean_norm = tf.reduce_sum(norms, 1, keepdims=True) / tf.maximum(count[..., 0], 1.0)
        relative = tf.math.divide_no_nan(norms, mean_norm)  # [B, K]
        return tf.stop_gradient(tf.stack([cosine, relative], -1) * mask)  # [B, K, 2]


def canonical_logits(logits: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
    """logits [B, K, N], int labels [B, K] -> [B, K, N]: each point's labelled class
    first, then its other N - 1 logits in decreasing order. The same for any numbering
    of the classes (a joint permutation of the logits' last axis and the labels); the
    gradient reaches every logit (a sort is a permutation of its input)."""
    n = logits.shape[-1]
    is_label = tf.one_hot(labels, n, on_value=True, off_value=False)  # [B, K, N]
    own = tf.reduce_sum(tf.where(is_label, logits, tf.zeros_like(logits)), -1, keepdims=True)
    # The labelled class sorted last: -inf never outranks a finite logit.
    others = tf.where(is_label, tf.fill(tf.shape(logits), -float("inf")), logits)
    rest = tf.sort(others, axis=-1, direction="DESCENDING")[..., : n - 1]  # [B, K, N - 1]
    return tf.concat([own, rest], axis=-1)  # [B, K, N]


@keras_configurable
class VIABLE(LearnedInnerLoss, CAVIA):
    """CAVIA whose inner loop descends a learned loss (simVIABLE, relVIABLE, attVIABLE)."""

    @property
    def base_name(self) -> str:  # type: ignore[override]
        return self.variant


@keras_configurable
class MAMLVIABLE(LearnedInnerLoss, MAML):
    """MAML whose inner loop over all prediction-network weights descends a learned loss.

    The loss network is frozen during adaptation and meta-learned with theta from the
    true query loss, second order unless `first_order`; its gradient reaches the weights
    through y_hat and L_T. Defaults as MAML's: `context_dim=0`, `inner_lr=0.1`.
    """

    @property
    def base_name(self) -> str:  # type: ignore[override]
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
    def base_name(self) -> str:  # type: ignore[override]
        return f"leo_{self.variant}" + ("_ft" if self.learned_finetuning else "")

    def inner_loss(self, state, support_x, support_y, support_mask) -> tf.Tensor:
        mean = super().inner_loss(state, support_x, support_y, support_mask)
        return leo.summed(mean, support_mask)

    def finetuning_loss(self, state, support_x, support_y, support_mask) -> tf.Tensor:
        if self.learned_finetuning:
            return self.inner_loss(state, support_x, support_y, support_mask)
        return self.summed_task_loss(state, support_x, support_y, support_mask)

    def hparams(self) -> dict[str, str | int | float | bool]:
        return {**super().hparams(), "learned_finetuning": self.learned_finetuning}
