"""What a learner asks of its prediction network: the protocol every network a learner
takes (`PredictionNetwork`, a user's model through `keras_network`) declares.

A learner reads these and nothing else; a network that cannot give penultimate features
says so (`penultimate_dim` None) rather than lacking the attribute.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import tensorflow as tf


class PredictionNetworkProtocol(Protocol):
    #: How its weights started: 'torch', 'keras', or 'custom' for a user's model.
    init: str
    #: The width of what it returns: Y, or H where it ends before an output layer.
    feature_dim: int
    #: H, the width of what its last layer takes (`call_with_penultimate`), or None
    #: where it does not give its penultimate features.
    penultimate_dim: int | None
    #: theta, in `forward`'s order.
    params: list

    def __call__(self, x: tf.Tensor, context: tf.Tensor | None = None) -> tf.Tensor:
        """x [B, P, D], context [B, C] -> [B, P, feature_dim], on its own weights."""

    def forward(self, params: Sequence[tf.Tensor], x: tf.Tensor, context=None) -> tf.Tensor:
        """The same on weights `params` (shared, or per task with a leading B axis)."""

    def call_with_penultimate(self, x: tf.Tensor, context: tf.Tensor | None = None):
        """(outputs, penultimate features [B, P, H]) in one pass, where penultimate_dim."""
