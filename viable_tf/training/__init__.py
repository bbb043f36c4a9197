"""Meta-training loop, summaries and the train-then-evaluate job."""

from viable_tf.training.distribute import make_strategy
from viable_tf.training.trainer import NonFiniteLossError, Trainer, WorkerLostError

__all__ = [
    "NonFiniteLossError",
    "Trainer",
    "WorkerLostError",
    "make_strategy",
]
