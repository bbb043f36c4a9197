"""The Omniglot drawings' networks: the preprocessing every image path shares (strokes = 1
at 28 x 28), the pixels an end-to-end model takes, and the frozen-feature pipeline's conv
encoder (docs/method.md §6), trained once by Keras' `fit` on the meta-training characters.
Driven from viable_tf/experiments/ (viable-omniglot, omniglot_conv).
"""

from __future__ import annotations

import sys

import keras
import numpy as np
import tensorflow as tf

from viable_tf.datasets.omniglot import ENCODED_SIZE, IMAGE_SHAPE, OmniglotSplit

FEATURE_DIM = 64  # E


def pixel_featurizer() -> keras.Model:
    """Images as read [n, 105, 105, 1] -> the 784 numbers an end-to-end model takes
    (strokes = 1 at 28 x 28, as `OmniglotPreprocessing` makes them for training)."""
    images = keras.Input(IMAGE_SHAPE, name="images")
    strokes = OmniglotPreprocessing(name="preprocessing")(images)
    pixels = keras.layers.Flatten(name="pixels")(strokes)
    return keras.Model(images, pixels, name="omniglot_pixels")


@keras.saving.register_keras_serializable(package="viable_tf")
class OmniglotPreprocessing(keras.layers.Layer):
    """Images as read (0..1, white background = 1) -> strokes = 1 at 28 x 28."""

    def call(self, images):
        strokes = 1.0 - images  # [n, 105, 105, 1]
        return tf.image.resize(strokes, [ENCODED_SIZE, ENCODED_SIZE], method="area")


def build_encoder(feature_dim: int = FEATURE_DIM) -> keras.Model:
    """Preprocessing + four conv blocks (64 filters, BN, ReLU, max-pool) -> [n, E]."""
    inputs = keras.Input(IMAGE_SHAPE, name="images")
    h = OmniglotPreprocessing(name="preprocessing")(inputs)
    for i in range(4):
        h = keras.layers.Conv2D(feature_dim, 3, padding="same", name=f"conv_{i}")(h)
        h = keras.layers.BatchNormalization(name=f"bn_{i}")(h)
        h = keras.layers.ReLU(name=f"relu_{i}")(h)
        h = keras.layers.MaxPooling2D(2, name=f"pool_{i}")(h)  # 28 -> 14 -> 7 -> 3 -> 1
    features = keras.layers.Flatten(name="features")(h)  # [n, E]
    return keras.Model(inputs, features, name="omniglot_encoder")


def train_encoder(
    split: OmniglotSplit, *, epochs: int, seed: int = 0, verbose: int | None = None
) -> tuple[keras.Model, dict]:
    """Supervised classification of the meta-train characters; returns (encoder, history).

    Small random shifts and rotations of the drawings are the only augmentation. The
    encoder's weights are then frozen for everything downstream.
    """
    keras.utils.set_random_seed(seed)
    names = sorted(set(split.classes))
    labels = np.array([names.index(c) for c in split.classes], np.int32)
    encoder = build_encoder()
    augment = keras.Sequential(
        [
            keras.layers.RandomTranslation(0.1, 0.1, fill_mode="constant", fill_value=1.0),
            keras.layers.RandomRotation(0.04, fill_mode="constant", fill_value=1.0),
        ],
        name="augment",
    )
    inputs = keras.Input(IMAGE_SHAPE)
    logits = keras.layers.Dense(len(names), name="classifier")(encoder(augment(inputs)))
    classifier = keras.Model(inputs, logits)
    classifier.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    history = classifier.fit(
        split.images,
        labels,
        batch_size=64,
        epochs=epochs,
        shuffle=True,
        verbose=(1 if sys.stdout.isatty() else 2) if verbose is None else verbose,
    )
    encoder.trainable = False
    return encoder, {key: [float(v) for v in values] for key, values in history.history.items()}


def encode(encoder: keras.Model, images: np.ndarray, batch_size: int = 256) -> np.ndarray:
    """Frozen features of `images` [n, 105, 105, 1] -> float32 [n, E] (not normalised)."""
    return encoder.predict(images, batch_size=batch_size, verbose=0).astype(np.float32)
