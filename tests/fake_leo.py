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
