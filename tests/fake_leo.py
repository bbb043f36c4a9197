"""Small embedding datasets in LEO's exact pickle format and layout, for tests."""

import os
import pickle

import numpy as np

SPLIT_CLASSES = {"train": 8, "val": 5, "test": 5}


def write_fake_leo(
    root,
    *,
    dataset: str = "miniImageNet",
    view: str = "center",
    dim: int = 640,
    per_class: int = 20,
    split_classes: dict | None = None,
    noise: float = 0.6,
    seed: int = 0,
) -> str:
    """Writes <root>/<dataset>/<view>/<split>_embeddings.pkl with learnable classes.

    Each class is a random direction plus noise, so a few-shot learner can do better
    than chance; class ids are disjoint across splits. Returns `root`.
    """
    rng = np.random.default_rng(seed)
    folder = os.path.join(root, dataset, view)
    os.makedirs(folder, exist_ok=True)
    for split_index, (split, num_classes) in enumerate((split_classes or SPLIT_CLASSES).items()):
        centres = rng.normal(size=(num_classes, dim))
        embeddings = np.repeat(centres, per_class, axis=0) + noise * rng.normal(
            size=(num_classes * per_class, dim)
        )
        keys = [
            f"{split_index}-n{split_index}{c:07d}-n{split_index}{c:07d}_{i:08d}.JPEG"
            for c in range(num_classes)
            for i in range(per_class)
        ]
        with open(os.path.join(folder, f"{split}_embeddings.pkl"), "wb") as f:
            pickle.dump({"embeddings": embeddings.astype(np.float32), "keys": keys}, f, protocol=2)
    return str(root)


def feature_episodes(*, b: int, shots: int, queries: int, seed: int, ways: int, dim: int):
    """A TaskBatch of `b` episodes of `ways` classes: l2-normalised `dim`-dimensional
    features around random class centres, as the pipeline's features are."""
    import tensorflow as tf

    from viable_tf.tasks import TaskBatch

    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(b, ways, dim))
    support_y = np.tile(np.repeat(np.arange(ways), shots), (b, 1)).astype(np.int32)
    query_y = np.tile(np.repeat(np.arange(ways), queries), (b, 1)).astype(np.int32)

    def points(labels):
        x = np.take_along_axis(centres, labels[..., None], 1)
        x = x + 0.5 * rng.normal(size=x.shape)
        return x / np.linalg.norm(x, axis=-1, keepdims=True)

    return TaskBatch(
        tf.constant(points(support_y), tf.float32),
        tf.constant(support_y),
        tf.ones(support_y.shape, tf.bool),
        tf.constant(points(query_y), tf.float32),
        tf.constant(query_y),
    )
