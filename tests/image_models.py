"""An end-to-end image classifier, exported as `omniglot_conv` exports its runs (for the
image-export and demo tests): simVIABLE on a small conv + FiLM net over the 28 x 28
strokes, behind the pixels' preprocessing (resized and inverted, not normalised, as the
image-folder episodes read them), taking Omniglot drawings as read (105 x 105) or as
PNG files, with example drawings of the test alphabets in assets.extra/."""

import functools
import os

import keras

from viable_tf.datasets import omniglot
from viable_tf.export import export_saved_model
from viable_tf.learners import VIABLE
from viable_tf.networks import SimpleLossNetwork, keras_network, omniglot_encoder
from viable_tf.networks.keras_model import conv4_film

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA_DIR = os.path.join(REPO, "..", "shared", "data", "omniglot")
WAYS = 5


def image_learner(seed: int = 0) -> VIABLE:
    """simVIABLE, 5-way, on conv4_film with 2 blocks of 8 filters (untrained)."""
    keras.utils.set_random_seed(seed)
    return VIABLE(
        input_dim=784,
        output_dim=WAYS,
        context_dim=8,
        num_inner_steps=2,
        inner_lr=1.0,
        task_loss="cross_entropy",
        network=keras_network(functools.partial(conv4_film, filters=8, blocks=2)),
        loss_network=lambda: SimpleLossNetwork(hidden_units=(16,)),
    )


def export_image_classifier(base: str, examples: str, *, version: int | None = None) -> str:
    """Writes `image_learner()` as a served version of `base`, with `examples` (a folder
    written by `omniglot.write_examples`) as assets.extra/examples/; returns its path."""
    if not os.path.isfile(os.path.join(examples, "index.json")):
        omniglot.write_examples(DATA_DIR, examples, num_characters=8, num_drawings=2)
    return export_saved_model(
        image_learner(),
        base,
        version=version,
        model_name="glyphs",
        featurizer=omniglot_encoder.pixel_featurizer(),
        normalize=False,
        input_shape=omniglot.IMAGE_SHAPE,
        warmup_inputs=functools.partial(omniglot.warmup_images, num_ways=WAYS),
        extra_assets={"examples": examples},
    )
