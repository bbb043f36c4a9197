"""Task samplers: batches of few-shot tasks with masked, padded support sets."""

from viable_tf.tasks.base import TaskBatch, masked_mean
from viable_tf.tasks.sine import SineParams, SineTasks, seed_for, sine_curve

__all__ = [
    "SineParams",
    "SineTasks",
    "TaskBatch",
    "masked_mean",
    "seed_for",
    "sine_curve",
]
