"""The meta-gradient, as composable pieces (in the way optax builds gradient
transformations): a weighted gradient of a share of the meta-batch, the same computed in
passes of a few tasks, the sum over replicas (one all-reduce of everything, packed into
one vector), and the transforms applied to the sum (clipping elementwise or by norm, the
non-finite guard), which a trainer takes as a list. The trainer wires them; benchmarks and
tests can use any one alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import ClassVar, NamedTuple, Protocol

import gin
import tensorflow as tf

from viable_tf.learners.base import Learner
from viable_tf.tasks.base import TaskBatch
from viable_tf.training.distribute import replica_slice


def pack(result) -> tf.Tensor:
    """(loss, inner loss, gradients) as one float32 vector [2 + number of weights]."""
    loss, inner, grads = result
    return tf.concat([tf.stack([loss, inner])] + [tf.reshape(g, [-1]) for g in grads], 0)


def unpack(packed: tf.Tensor, variables) -> tuple[tf.Tensor, tf.Tensor, list[tf.Tensor]]:
    """`pack`'s inverse, the gradients shaped as `variables`."""
    sizes = [2] + [int(v.shape.num_elements()) for v in variables]
    head, *flat = tf.split(packed, sizes)
    return head[0], head[1], [tf.reshape(g, v.shape) for g, v in zip(flat, variables, strict=True)]


def weighted_gradients(learner: Learner, variables, batch: TaskBatch, weight):
    """(weight x meta-loss, weight x pre-update inner loss, their gradients) on `batch`."""
    with tf.GradientTape() as tape:
        loss, metrics = learner.meta_loss(batch)
        loss = loss * weight
    # A weight the meta-loss does not reach (a ReLU loss network's biases: docs/method.md §3.1)
    # gets an exact zero, not None.
    grads = tape.gradient(loss, variables)
    grads = [
        tf.zeros(v.shape, v.dtype) if g is None else g
        for g, v in zip(grads, variables, strict=True)
    ]
    return loss, metrics.get("inner_loss_pre", tf.constant(0.0)) * weight, grads


def gradients_in_passes(
    learner: Learner, variables, batch: TaskBatch, start, size: int, per_pass: int, total: int
):
    """`weighted_gradients` of tasks [start, start + size) of `batch`, each weighted by
    1 / `total`, computed `per_pass` tasks at a time and summed. Each pass starts after
    the previous one's gradients exist, so that the graph executor cannot overlap them
    (and hold the activations of both)."""
    result = None
    for first in range(0, size, per_pass):
        last = min(first + per_pass, size)
        wait = [] if result is None else tf.nest.flatten(result)
        with tf.control_dependencies(wait):
            part = type(batch)(*(t[start + first : start + last] for t in batch))
            done = weighted_gradients(learner, variables, part, (last - first) / total)
        result = done if result is None else tf.nest.map_structure(tf.add, result, done)
    return result


def replica_gradients(
    learner: Learner,
    variables,
    batch: TaskBatch,
    *,
    meta_batch_size: int,
    replicas: int,
    tasks_per_pass: int | None,
):
    """This replica's share of the meta-batch: (loss, inner loss, gradients), weighted
    by its share of B so that summing over replicas gives the global mean's (in passes
    of `tasks_per_pass` tasks, if given)."""
    start, end = replica_slice(meta_batch_size)
    if tasks_per_pass is not None:
        size = meta_batch_size // replicas
        return gradients_in_passes(
            learner, variables, batch, start, size, tasks_per_pass, meta_batch_size
        )
    batch = type(batch)(*(t[start:end] for t in batch))
    share = tf.cast(end - start, tf.float32) / meta_batch_size
    return weighted_gradients(learner, variables, batch, share)


def sum_over_replicas(strategy: tf.distribute.Strategy, replica_gradients, batch, variables):
    """`replica_gradients(batch)` run on every replica and summed: (loss, inner loss,
    gradients). On several replicas, one all-reduce of them all packed into one vector,
    not one per variable (docs/DISTRIBUTED.md)."""
    if strategy.num_replicas_in_sync == 1:
        per_replica = strategy.run(replica_gradients, args=(batch,))
        return tf.nest.map_structure(
            lambda t: strategy.reduce(tf.distribute.ReduceOp.SUM, t, axis=None), per_replica
        )
    packed = strategy.run(lambda batch: pack(replica_gradients(batch)), args=(batch,))
    summed = strategy.reduce(tf.distribute.ReduceOp.SUM, packed, axis=None)
    return unpack(summed, variables)


class MetaUpdate(NamedTuple):
    """A meta-update as the gradient transforms pass it on: the meta-loss, the
    pre-update inner loss, the gradients (one per trainable variable) and `counted`,
    1.0 for an update that counts in the loss summaries, 0.0 for one that took a
    fallback."""

    loss: tf.Tensor
    inner: tf.Tensor
    grads: list[tf.Tensor]
    counted: tf.Tensor


class GradientTransform(Protocol):
    """One piece of the meta-gradient's processing, applied after the sum over replicas
    (an `OptimizerChain`'s `transforms`, in order, as optax chains its
    transformations). It sees the update and the variables, not the learner: what it
    needs of the learner it takes once, in `bind`, which `Trainer.__init__` calls and
    which refuses (one line) a learner it cannot apply to. `falls_back`: the transform
    may replace an update by a fallback (the trainer then counts such updates,
    checkpoints and reports the count)."""

    falls_back: ClassVar[bool]

    def bind(self, learner: Learner) -> GradientTransform: ...

    def __call__(self, update: MetaUpdate, variables) -> MetaUpdate: ...


def _positive(name: str, limit: float) -> None:
    if not limit > 0:
        raise ValueError(f"{name}.limit must be > 0, got {limit}")


@gin.configurable
@dataclasses.dataclass(frozen=True)
class ClipElementwise:
    """Each gradient clipped to [-limit, limit], as the public CAVIA code does."""

    limit: float = 10.0
    falls_back: ClassVar[bool] = False

    def __post_init__(self) -> None:
        _positive("ClipElementwise", self.limit)

    def bind(self, learner: Learner) -> ClipElementwise:
        return self  # it needs nothing of the learner

    def __call__(self, update: MetaUpdate, variables) -> MetaUpdate:
        grads = [tf.clip_by_value(g, -self.limit, self.limit) for g in update.grads]
        return update._replace(grads=grads)


@gin.configurable
@dataclasses.dataclass(frozen=True)
class ClipEachNorm:
    """Each gradient tensor scaled down to l2 norm at most `limit`, as LEO's public code
    does (after clipping elementwise)."""

    limit: float
    falls_back: ClassVar[bool] = False

    def __post_init__(self) -> None:
        _positive("ClipEachNorm", self.limit)

    def bind(self, learner: Learner) -> ClipEachNorm:
        return self  # it needs nothing of the learner

    def __call__(self, update: MetaUpdate, variables) -> MetaUpdate:
        return update._replace(grads=[tf.clip_by_norm(g, self.limit) for g in update.grads])


@gin.configurable(denylist=["penalized"])  # bound from the learner, not configured
@dataclasses.dataclass(frozen=True)
class FallBackWhereNonfinite:
    """LEO's guard (its public code's `grads_and_vars`): where the meta-loss or any
    gradient is not finite, the update takes a fallback gradient instead and the losses
    count as 0 (`counted` 0.0). Without it, training stops at the first non-finite
    meta-loss.

    The fallback is zero (no step), or with `penalty_weight` w > 0 the gradient of
    w * sum ||W||^2 / 2 over the learner's `penalized_weights` (LEO's kernels; at w = 1e-4,
    1e-4 W for each kernel, zero for any other weight), which pulls the weights back
    towards where the loss is defined, as LEO's public code does. A learner without such
    weights is refused by `bind` (one line, in Trainer.__init__) where w > 0."""

    penalty_weight: float = 0.0
    falls_back: ClassVar[bool] = True
    #: The weights the penalty covers, taken from the learner by `bind`.
    penalized: tuple = dataclasses.field(default=(), compare=False, repr=False)

    def bind(self, learner: Learner) -> FallBackWhereNonfinite:
        weights = tuple(learner.penalized_weights)
        if self.penalty_weight and not weights:
            raise ValueError(
                f"FallBackWhereNonfinite(penalty_weight={self.penalty_weight}) falls back to "
                f"the gradient of an l2 penalty, and {learner.method_name} has no penalized "
                "weights (LEO's kernels have): use penalty_weight=0, a zero step"
            )
        return dataclasses.replace(self, penalized=weights)

    def fallback(self, variables) -> list[tf.Tensor]:
        """The update that replaces a non-finite one."""
        if not self.penalty_weight:
            return [tf.zeros_like(v) for v in variables]
        with tf.GradientTape() as tape:
            l2 = tf.add_n([tf.nn.l2_loss(w) for w in self.penalized])  # sum ||W||^2 / 2
            penalty = self.penalty_weight * l2
        grads = tape.gradient(penalty, variables)
        return [tf.zeros_like(v) if g is None else g for g, v in zip(grads, variables, strict=True)]

    def __call__(self, update: MetaUpdate, variables) -> MetaUpdate:
        fallback = self.fallback(variables)
        loss, inner, grads = update.loss, update.inner, update.grads
        finite = tf.reduce_all(
            tf.stack(
                [tf.math.is_finite(loss)] + [tf.reduce_all(tf.math.is_finite(g)) for g in grads]
            )
        )
        zero = tf.zeros_like(loss)
        return MetaUpdate(
            tf.where(finite, loss, zero),
            tf.where(finite, inner, zero),
            [tf.where(finite, g, f) for g, f in zip(grads, fallback, strict=True)],
            update.counted * tf.cast(finite, tf.float32),
        )


def apply_transforms(
    transforms: Sequence[GradientTransform], update: MetaUpdate, variables
) -> MetaUpdate:
    """`update` through each of `transforms` (bound to their learner) in turn."""
    for transform in transforms:
        update = transform(update, variables)
    return update
