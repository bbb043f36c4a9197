"""The meta-optimizer as one object, handed to the trainer (docs/method.md §1).

`OptimizerChain` composes, in order, what happens to a meta-gradient after it is summed
over the meta-batch: its gradient transforms (clipping, the non-finite guard;
meta_gradient.py), then a Keras optimizer stepping at a learning-rate schedule, as
optax's `chain(clip, ..., scale_by_adam(), scale_by_schedule(...))` composes one
gradient transformation. The default is the paper's setting: the meta-gradient clipped
to [-10, 10], Adam at 1e-3 times 0.9 every 5,000 meta-updates. In gin:

    Trainer.optimizer = @OptimizerChain()
    OptimizerChain.transforms = [@ClipElementwise()]
    OptimizerChain.schedule = @StaircaseDecay()
    StaircaseDecay.learning_rate = 0.001
    OptimizerChain.optimizer = @keras.optimizers.Adam   # and its own settings:
    keras.optimizers.Adam.epsilon = 1e-7
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import gin
import keras

from viable_tf.training.meta_gradient import (
    ClipElementwise,
    GradientTransform,
)

#: Keras' Adam as gin configures it (`keras.optimizers.Adam.epsilon = ...` applies to the
#: default chain's optimizer too); SGD for a plain step.
Adam = gin.external_configurable(keras.optimizers.Adam, module="keras.optimizers")
SGD = gin.external_configurable(keras.optimizers.SGD, module="keras.optimizers")


@gin.configurable
@dataclasses.dataclass(frozen=True)
class StaircaseDecay:
    """learning_rate * decay_rate ** floor(t / decay_steps) at meta-update t."""

    learning_rate: float = 1e-3
    decay_steps: int = 5_000
    decay_rate: float = 0.9

    def __post_init__(self) -> None:
        if self.decay_steps < 1:
            raise ValueError(f"StaircaseDecay.decay_steps must be >= 1, got {self.decay_steps}")

    def __call__(self) -> keras.optimizers.schedules.LearningRateSchedule:
        return keras.optimizers.schedules.ExponentialDecay(
            self.learning_rate, self.decay_steps, self.decay_rate, staircase=True
        )


@gin.configurable
@dataclasses.dataclass(frozen=True)
class OptimizerChain:
    """The meta-gradient's transforms in order, then `optimizer(schedule())`.

    Args:
      transforms: gradient transforms (meta_gradient.py), applied in order to the
        meta-gradient summed over the meta-batch: the default clips it elementwise to
        [-10, 10], as the public CAVIA code does; LEO's configs add `ClipEachNorm` and
        `FallBackWhereNonfinite`. () leaves the gradient as it is; without a transform
        that falls back, training stops at the first non-finite meta-loss.
      schedule: called with no arguments, gives the learning-rate schedule (a Keras
        `LearningRateSchedule`; None: `StaircaseDecay()` as gin configures it).
      optimizer: called with the schedule, gives the Keras optimizer (Adam by default).
    """

    transforms: Sequence[GradientTransform] = (ClipElementwise(10.0),)
    schedule: Callable[[], keras.optimizers.schedules.LearningRateSchedule] | None = None
    optimizer: Callable[..., keras.optimizers.Optimizer] = Adam

    def __post_init__(self) -> None:
        object.__setattr__(self, "transforms", tuple(self.transforms))  # a gin list too

    @property
    def falls_back(self) -> bool:
        """Whether an update may take a fallback (then counted by the trainer)."""
        return any(t.falls_back for t in self.transforms)

    def build(self, variables):
        """(schedule, optimizer) built on `variables` (call inside a strategy's scope:
        the optimizer's slots are then mirrored)."""
        schedule = (self.schedule or StaircaseDecay())()
        optimizer = self.optimizer(schedule)
        optimizer.build(variables)
        return schedule, optimizer

    def bind(self, learner) -> tuple[GradientTransform, ...]:
        """The transforms, each given what it needs of `learner` (GradientTransform.bind):
        a chain that cannot apply to its learner is refused here, in one line."""
        return tuple(t.bind(learner) for t in self.transforms)
