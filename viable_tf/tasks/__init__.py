"""Task samplers: sine tasks and N-way K-shot episodes, as TaskBatches."""

from viable_tf.ops import masked_mean, seed_for
from viable_tf.tasks.base import TaskBatch
from viable_tf.tasks.episodes import EpisodeSampler
from viable_tf.tasks.sine import SineParams, SineTasks, sine_curve

__all__ = [
    "EpisodeSampler",
    "SineParams",
    "SineTasks",
    "TaskBatch",
    "masked_mean",
    "seed_for",
    "sine_curve",
]
