"""Shared fixtures. TensorFlow logs only errors during tests."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import gin
import keras
import pytest


@pytest.fixture(autouse=True)
def _fresh_state():
    """Every test starts with no gin bindings and a fixed Keras seed."""
    gin.clear_config()
    keras.utils.set_random_seed(0)
    yield
    gin.clear_config()
