"""Evaluation protocols and confidence intervals. Importing this package registers every
shipped task family's protocols and figures (evaluation/protocols.py)."""

from viable_tf.evaluation.classification import (
    ClassificationEvaluator,
    classification_test_evaluator,
    classification_validation_evaluator,
)
from viable_tf.evaluation.core import Evaluation, Evaluator
from viable_tf.evaluation.protocols import figures, test_protocol, validation_protocol
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
    "figures",
    "mean_confidence_interval",
    "test_evaluator",
    "test_protocol",
    "validation_evaluator",
    "validation_protocol",
]
