"""The learned loss's parts (docs/method.md §3): what each support point's features f_j
hold, and how the loss network's output becomes the inner loss. Chosen in gin, as the
prediction network's feature parts are:

    VIABLE.features = [@TaskLoss(), @Outputs(), @Labels(), @Inputs()]
    VIABLE.form = @Residual()

The features are concatenated in the order listed, F numbers a point. The paper's are
(L_T(y_hat_j, y_j), y_hat_j, y_j), and x_j for a loss network that reads the inputs
(relVIABLE's pairs, attVIABLE's set); for classification y_hat_j are the N logits and
y_j the one-hot label. Each part's `width(learner)` says how many numbers it adds (and
refuses a learner it cannot serve), and calling it on a `Support` gives them, [B, K, w].

The parts beyond the paper (docs/method.md §3.1, §8, §9):
- `TaskLoss(of='mean')` gives each point the support set's mean task loss (what a loss
  averaged before it reaches the loss network would see), `'both'` the two.
- `Outputs(class_order='canonical')` makes the learned loss blind to the episode's
  numbering of the classes, as the cross-entropy is: each point's labelled logit first,
  then its other N - 1 in decreasing order; the label is then implied and `Labels()`
  is refused beside it. With the paper's layout an MLP on (logits, one-hot label)
  weighs class 0, 1, ... differently, and on randomly relabelled episodes that bias
  only hurts.
- `Inputs(source='penultimate')` gives the prediction network's penultimate features
  at the current state in place of x (on images 784 pixels are no input for an MLP
  over pairs); `'penultimate_stopped'` the same as constants, so the learned loss
  reaches phi through y_hat and L_T only.
- `GradientAgreement()` puts the paper's own argument for the relation network ("an
  outlier with a large disagreeing gradient") into each point's features: the cosine
  between the point's task-loss gradient with respect to phi and the mean gradient of
  the other support points, and its gradient norm over the set's mean norm, as
  constants.
- `scale` on each part divides its numbers by s (the task loss by s^2): s = 5 maps
  sine's ranges to about [-1, 1] (the reproduction study).

The form: `Learned()`, the paper's, descends the loss network's output alone;
`Residual()` adds it to the base learner's own inner loss, so a loss network whose
output starts at zero starts as the base learner's step and meta-training learns a
correction (end to end at 20 ways the plain form's logits went deaf to phi first).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import gin
import tensorflow as tf

from viable_tf.configurable import expect
from viable_tf.ops import masked_mean

#: How a classifier's logits are laid out: as the episode numbers the classes, or canonically.
CLASS_ORDERS = ("episode", "canonical")
#: What `Inputs` gives of each point's input: x as it is, or the penultimate features.
INPUT_SOURCES = ("x", "penultimate", "penultimate_stopped")
#: Which task loss `TaskLoss` gives: the point's own, the set's mean over real points, both.
TASK_LOSSES = ("point", "mean", "both")


@dataclasses.dataclass(frozen=True)
class Support:
    """What the parts read of one meta-batch's support sets at the current state:
    x [B, K, D], y [B, K, Y] (or int [B, K]), mask bool [B, K] (None: every point is
    real), y_hat [B, K, Y], and `inputs`, what `Inputs` gives: x, or the penultimate
    features h [B, K, H]."""

    learner: Any
    state: Any
    x: tf.Tensor
    y: tf.Tensor
    mask: tf.Tensor | None
    y_hat: tf.Tensor
    inputs: tf.Tensor


class FeaturePart:
    """What every feature part is: its `role` in a point's features (one part a role), and
    whether it reads the penultimate features (only `Inputs` may)."""

    role: str = ""
    reads_penultimate: bool = False


def _check(scale: float, name: str = "", value: str = "", choices: tuple[str, ...] = ()) -> None:
    """Refuses a scale <= 0 and, where given, a `value` of option `name` outside `choices`."""
    if choices and value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    if not scale > 0:
        raise ValueError(f"scale must be > 0, got {scale}")


@gin.configurable
@dataclasses.dataclass(frozen=True)
class TaskLoss(FeaturePart):
    """L_T at each point: its own (`of='point'`, the paper's), the set's mean, or both."""

    role = "task_loss"

    of: str = "point"
    scale: float = 1.0

    def __post_init__(self) -> None:
        _check(self.scale, "TaskLoss.of", self.of, TASK_LOSSES)

    def width(self, learner) -> int:
        return 2 if self.of == "both" else 1

    def __call__(self, support: Support) -> tf.Tensor:
        point_loss = support.learner.task_loss(support.y_hat, support.y)  # [B, K]
        losses = [point_loss[..., None]]  # [B, K, 1]
        if self.of != "point":
            real = tf.ones_like(point_loss, tf.bool) if support.mask is None else support.mask
            mean = masked_mean(point_loss, real, axis=1)  # [B]
            mean = tf.broadcast_to(mean[:, None, None], tf.shape(losses[0]))  # [B, K, 1]
            losses = [mean] if self.of == "mean" else [losses[0], mean]
        return tf.concat([loss / self.scale**2 for loss in losses], axis=-1)  # [B, K, 1 or 2]

    def hparams(self) -> dict:
        return {} if self.of == "point" else {"task_loss_feature": self.of}


@gin.configurable
@dataclasses.dataclass(frozen=True)
class Outputs(FeaturePart):
    """The predictions y_hat_j, Y numbers (a classifier's N logits, as the episode numbers
    the classes or canonically: the labelled class first, then the rest in decreasing
    order)."""

    role = "outputs"

    class_order: str = "episode"
    scale: float = 1.0

    def __post_init__(self) -> None:
        _check(self.scale, "Outputs.class_order", self.class_order, CLASS_ORDERS)

    @property
    def holds_label(self) -> bool:
        """Whether the label is implied by the layout (the canonical one's first position)."""
        return self.class_order == "canonical"

    def width(self, learner) -> int:
        if self.holds_label and not learner.is_classifier:
            raise ValueError("class_order='canonical' needs a classifier (cross_entropy)")
        return learner.output_dim

    def __call__(self, support: Support) -> tf.Tensor:
        y_hat = support.y_hat
        if self.holds_label:
            y_hat = canonical_logits(y_hat, support.y)  # [B, K, N]: the label's first
        return y_hat / self.scale

    def hparams(self) -> dict:
        return {"class_order": self.class_order}


@gin.configurable
@dataclasses.dataclass(frozen=True)
class Labels(FeaturePart):
    """The label y_j: Y numbers, or a classifier's one-hot N."""

    role = "labels"

    scale: float = 1.0

    def __post_init__(self) -> None:
        _check(self.scale)

    def width(self, learner) -> int:
        return learner.output_dim

    def __call__(self, support: Support) -> tf.Tensor:
        y = support.y
        if support.learner.is_classifier:
            y = tf.one_hot(y, support.learner.output_dim, dtype=support.y_hat.dtype)  # [B, K, N]
        return y / self.scale

    def hparams(self) -> dict:
        return {}


@gin.configurable
@dataclasses.dataclass(frozen=True)
class Inputs(FeaturePart):
    """Each point's input: x (D numbers, the paper's), or the prediction network's
    penultimate features at the current state (H), with the learned loss's gradient
    through them or (`'penultimate_stopped'`) as constants."""

    role = "inputs"

    source: str = "x"
    scale: float = 1.0

    def __post_init__(self) -> None:
        _check(self.scale, "Inputs.source", self.source, INPUT_SOURCES)

    @property
    def reads_penultimate(self) -> bool:
        return self.source != "x"

    def width(self, learner) -> int:
        if not self.reads_penultimate:
            return learner.input_dim  # D
        if learner.capabilities.steps_context and learner.head.per_task:
            return learner.network.feature_dim  # H: the network ends where the head starts
        needs = (
            "Inputs(source='penultimate') needs VIABLE on CAVIA, with a per-task head "
            "(the network ends at its features) or with the plain output layer and a "
            "network that gives its penultimate features (keras_network of a "
            "functional model)"
        )
        if not learner.capabilities.adapts_context:
            raise ValueError(needs)
        width = learner.network.penultimate_dim  # H (None: the network gives none)
        if width is None:
            raise ValueError(needs)
        return width

    def __call__(self, support: Support) -> tf.Tensor:
        inputs = support.inputs
        if self.source == "penultimate_stopped":
            inputs = tf.stop_gradient(inputs)
        return inputs / self.scale if self.scale != 1.0 else inputs

    def hparams(self) -> dict:
        return {"pair_inputs": self.source}


@gin.configurable
@dataclasses.dataclass(frozen=True)
class GradientAgreement(FeaturePart):
    """Two constants a point: the cosine between its task-loss gradient with respect to
    phi and the mean gradient of the other real points, and its gradient norm over the
    real points' mean norm (VIABLE on CAVIA)."""

    role = "gradient_agreement"

    def width(self, learner) -> int:
        if not learner.capabilities.steps_context:
            raise ValueError(
                "GradientAgreement() needs a learner that adapts a context phi (VIABLE on CAVIA)"
            )
        return 2

    def __call__(self, support: Support) -> tf.Tensor:
        return gradient_agreement(
            support.learner, support.state, support.x, support.y, support.mask
        )

    def hparams(self) -> dict:
        return {"gradient_agreement": True}


#: The parts a point's features can hold, by name.
FEATURE_PARTS = {
    part.__name__: part for part in (TaskLoss, Outputs, Labels, Inputs, GradientAgreement)
}


def paper_features(reads_inputs: bool) -> tuple:
    """The paper's point features: (L_T, y_hat, y), and x for a loss network that reads it."""
    return (TaskLoss(), Outputs(), Labels()) + ((Inputs(),) if reads_inputs else ())


def check_features(features, reads_inputs: bool) -> tuple:
    """`features` as a tuple, refused with one line when the parts do not fit together
    or with the loss network (one `Inputs` part exactly when it reads the inputs)."""
    features = tuple(features)
    refusal = f"features must be parts of {sorted(FEATURE_PARTS)}, got {list(features)!r}"
    for part in features:
        expect(part, FeaturePart, refusal)
    roles = [part.role for part in features]
    if len(set(roles)) != len(roles):
        raise ValueError(f"each feature part at most once, got {list(features)}")
    if "outputs" not in roles:
        raise ValueError(f"features need Outputs() (the predictions), got {list(features)}")
    if features[roles.index("outputs")].holds_label and "labels" in roles:
        raise ValueError(
            "Outputs(class_order='canonical') puts the label first: drop Labels() from features"
        )
    if ("inputs" in roles) != reads_inputs:
        raise ValueError(
            f"the loss network {'reads' if reads_inputs else 'does not read'} each point's "
            f"input (include_inputs={reads_inputs}): features "
            f"{'need' if reads_inputs else 'cannot hold'} Inputs(), got {list(features)}"
        )
    return features


@gin.configurable
@dataclasses.dataclass(frozen=True)
class Learned:
    """The paper's form: the inner loss is the loss network's output."""

    def __call__(self, learned: tf.Tensor, support: Support) -> tf.Tensor:
        return learned

    def hparams(self) -> dict:
        return {"residual": False}


@gin.configurable
@dataclasses.dataclass(frozen=True)
class Residual:
    """The base learner's own inner loss (the task loss, or its robust stand-in) on the
    same predictions, plus the learned correction."""

    def __call__(self, learned: tf.Tensor, support: Support) -> tf.Tensor:
        learner = support.learner
        task = learner.inner_task_loss(support.y_hat, support.y)  # [B, K]
        return masked_mean(task, support.mask, axis=1) + learned  # [B]

    def hparams(self) -> dict:
        return {"residual": True}


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


def gradient_agreement(learner, state, support_x, support_y, support_mask) -> tf.Tensor:
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
        loss = tf.reduce_sum(learner.task_loss(learner.predict(per_point, x), y))
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
