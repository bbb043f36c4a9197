"""Shared fixtures. TensorFlow logs only errors during tests."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import gin
import keras
import pytest
import tensorflow as tf


def checkpoint_values(path: str) -> dict:
    """Every saved tensor of a checkpoint, by name (the object graph left out)."""
    reader = tf.train.load_checkpoint(path)
    return {
        name: reader.get_tensor(name)
        for name in reader.get_variable_to_shape_map()
        if name != "_CHECKPOINTABLE_OBJECT_GRAPH"
    }


@pytest.fixture(autouse=True)
def _fresh_state():
    """Every test starts with no gin bindings and a fixed Keras seed."""
    gin.clear_config()
    keras.utils.set_random_seed(0)
    yield
    gin.clear_config()
