"""Evaluation protocols and confidence intervals."""

from viable_tf.evaluation.sine import (
    Evaluation,
    SineEvaluator,
    test_evaluator,
    validation_evaluator,
)
from viable_tf.evaluation.statistics import MeanWithCI, mean_confidence_interval

__all__ = [
    "Evaluation",
    "MeanWithCI",
    "SineEvaluator",
    "mean_confidence_interval",
    "test_evaluator",
    "validation_evaluator",
]
