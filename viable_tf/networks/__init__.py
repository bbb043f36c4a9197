"""Prediction network f_{phi, theta} and the learned loss networks Lhat_psi."""

from viable_tf.networks.attention_loss import AttentionLossNetwork
from viable_tf.networks.keras_model import FiLM, UserNetwork, keras_network
from viable_tf.networks.loss_networks import RelationLossNetwork, SimpleLossNetwork
from viable_tf.networks.prediction import Normalize, PredictionNetwork, SkipInputs

__all__ = [
    "AttentionLossNetwork",
    "FiLM",
    "Normalize",
    "PredictionNetwork",
    "RelationLossNetwork",
    "SimpleLossNetwork",
    "SkipInputs",
    "UserNetwork",
    "keras_network",
]
