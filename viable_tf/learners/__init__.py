"""Meta-learners behind one contract: adapt, predict, meta-loss."""

from viable_tf.learners.base import AdaptedState, Learner
from viable_tf.learners.cavia import CAVIA
from viable_tf.learners.heads import Head, LinearHead, PrototypeHead, SteppedLinearHead
from viable_tf.learners.leo import LEO
from viable_tf.learners.loss_features import (
    GradientAgreement,
    Inputs,
    Labels,
    Learned,
    Outputs,
    Residual,
    TaskLoss,
)
from viable_tf.learners.maml import MAML
from viable_tf.learners.matching import MatchingHead
from viable_tf.learners.metal import AffineAdapter, MAMLMeTAL, MeTAL, TaskState, TermNetwork
from viable_tf.learners.metaoptnet import RidgeHead, SVMHead
from viable_tf.learners.task_losses import cross_entropy, get_task_loss, squared_error
from viable_tf.learners.viable import LEOVIABLE, MAMLVIABLE, VIABLE

__all__ = [
    "CAVIA",
    "LEO",
    "LEOVIABLE",
    "MAML",
    "MAMLVIABLE",
    "VIABLE",
    "AdaptedState",
    "AffineAdapter",
    "GradientAgreement",
    "Head",
    "Inputs",
    "Labels",
    "Learned",
    "Learner",
    "LinearHead",
    "MAMLMeTAL",
    "MatchingHead",
    "MeTAL",
    "Outputs",
    "PrototypeHead",
    "Residual",
    "RidgeHead",
    "SVMHead",
    "SteppedLinearHead",
    "TaskLoss",
    "TaskState",
    "TermNetwork",
    "cross_entropy",
    "get_task_loss",
    "squared_error",
]
