"""Evaluation protocols and confidence intervals."""

from viable_tf.evaluation.classification import (
    ClassificationEvaluator,
    classification_test_evaluator,
    classification_validation_evaluator,
)
from viable_tf.evaluation.core import Evaluation, Evaluator
from viable_tf.evaluation.protocols import test_protocol, validation_protocol
from viable_tf.evaluation.sine import SineEvaluator, test_evaluator, validation_evaluator
from viable_tf.evaluation.statistics import MeanWithCI, mean_confidence_interval

__all__ = [
    "ClassificationEvaluator",
    "Evaluation",
    "Evaluator",
    "MeanWithCI",
    "SineEvaluator",
    "classification_test_evaluator",
    "classification_validation_evaluator",
    "mean_confidence_interval",
    "test_evaluator",
    "test_protocol",
    "validation_evaluator",
    "validation_protocol",
]
