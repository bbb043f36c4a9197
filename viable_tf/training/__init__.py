"""Meta-training loop, summaries and the train-then-evaluate job."""

from viable_tf.training.distribute import make_strategy
from viable_tf.training.errors import NonFiniteLossError, WorkerLostError
from viable_tf.training.meta_gradient import (
    ClipEachNorm,
    ClipElementwise,
    FallBackWhereNonfinite,
    GradientTransform,
)
from viable_tf.training.optimizer import OptimizerChain, StaircaseDecay
from viable_tf.training.settings import EvaluationSpec, PerformanceSpec
from viable_tf.training.trainer import Trainer

__all__ = [
    "ClipEachNorm",
    "ClipElementwise",
    "EvaluationSpec",
    "FallBackWhereNonfinite",
    "GradientTransform",
    "NonFiniteLossError",
    "OptimizerChain",
    "PerformanceSpec",
    "StaircaseDecay",
    "Trainer",
    "WorkerLostError",
    "make_strategy",
]
