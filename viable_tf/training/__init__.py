"""Meta-training loop, summaries and the train-then-evaluate job."""

from viable_tf.training.trainer import NonFiniteLossError, Trainer

__all__ = [
    "NonFiniteLossError",
    "Trainer",
]
