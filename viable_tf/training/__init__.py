"""Meta-training loop, summaries and the train-then-evaluate job."""

from viable_tf.training.distribute import make_strategy
from viable_tf.training.errors import NonFiniteLossError, WorkerLostError
from viable_tf.training.trainer import Trainer

__all__ = [
    "NonFiniteLossError",
    "Trainer",
    "WorkerLostError",
    "make_strategy",
]
