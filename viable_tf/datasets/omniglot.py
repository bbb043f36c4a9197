"""Omniglot images (docs/method.md §6): read from the zips, split by alphabet, encoded to features.

The two background-set zips are read by path, never copied into the project. Their
union is 8 alphabets, 242 characters, 20 drawings each (Greek and Latin are in both
zips, identical, and counted once). Classes are split by alphabet, fixed.

The image encoder is trained by plain supervised classification of the meta-train
characters only (Keras `fit`), then frozen; the features of every image are written
in LEO's pickle format and layout, so the classification pipeline reads them exactly
as it reads Mini-ImageNet's:

    <features_dir>/omniglot/center/<train|val|test>_embeddings.pkl

Shape legend: n images, H = W = 105 pixels (28 after preprocessing), E feature size.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import zipfile
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

ZIPS = ("images_background_small1.zip", "images_background_small2.zip")
ALPHABETS = {
    "train": ("Korean", "Japanese_(katakana)", "Sanskrit", "Balinese"),
    "val": ("Greek", "Early_Aramaic"),
    "test": ("Latin", "Tagalog"),
}
IMAGE_SHAPE = (105, 105, 1)  # as read from the PNG: float32 0..1, white background = 1
ENCODED_SIZE = 28  # images are downsampled to 28 x 28 before the encoder


@dataclass(frozen=True)
class OmniglotSplit:
    images: np.ndarray  # float32 [n, 105, 105, 1], 0..1, white background = 1
    classes: list[str]  # [n], "<alphabet>.<character>"
    image_ids: list[str]  # [n], the PNG's name without "_" and extension


def read_omniglot(data_dir: str) -> dict[str, OmniglotSplit]:
    """The three class-disjoint splits, from the zips in `data_dir`."""
    missing = [z for z in ZIPS if not os.path.isfile(os.path.join(data_dir, z))]
    if missing:
        raise ValueError(
            f"{data_dir} lacks {', '.join(missing)}; expected Omniglot's "
            f"{' and '.join(ZIPS)} (see docs/method.md §6)"
        )
    split_of = {alphabet: split for split, names in ALPHABETS.items() for alphabet in names}
    found: dict[tuple[str, str, str], bytes] = {}
    for name in ZIPS:
        with zipfile.ZipFile(os.path.join(data_dir, name)) as archive:
            for entry in archive.namelist():
                parts = entry.split("/")
                if len(parts) != 4 or not parts[3].endswith(".png"):
                    continue
                _, alphabet, character, filename = parts
                if alphabet in split_of:  # Greek and Latin appear twice: kept once
                    found.setdefault((alphabet, character, filename), archive.read(entry))
    splits = {}
    for split, alphabets in ALPHABETS.items():
        keys = sorted(k for k in found if k[0] in alphabets)
        absent = sorted(set(alphabets) - {k[0] for k in keys})
        if absent:
            raise ValueError(f"{data_dir}: no images of {', '.join(absent)} in the zips")
        images = np.stack([_decode_png(found[k]) for k in keys])
        splits[split] = OmniglotSplit(
            images=images,
            classes=[f"{a}.{c}" for a, c, _ in keys],
            image_ids=[f.removesuffix(".png").replace("_", ".") for _, _, f in keys],
        )
    return splits


def _decode_png(data: bytes) -> np.ndarray:
    image = tf.io.decode_png(data, channels=1)  # uint8 [105, 105, 1], 0 or 255
    if tuple(image.shape) != IMAGE_SHAPE:
        raise ValueError(f"expected a 105x105 Omniglot PNG, got {list(image.shape)}")
    return image.numpy().astype(np.float32) / 255.0


def write_examples(
    data_dir: str,
    target: str,
    *,
    split: str = "test",
    num_characters: int = 10,
    num_drawings: int = 4,
    seed: int = 0,
) -> dict:
    """Copies a few drawings of `split`'s alphabets (never seen in training), as their
    original PNG files, with Omniglot's licence, into `target`:

        target/LICENSE, target/README.md, target/index.json,
        target/<alphabet>.<character>/<drawing>.png

    `num_characters` characters (spread over the split's alphabets), `num_drawings`
    drawings each, chosen by `seed`. index.json lists them: {"characters": [{"name",
    "files": [...]}], "licence": "LICENSE", "source": ...}. Returns the index."""
    rng = np.random.default_rng(seed)
    by_character: dict[str, list[tuple[str, bytes]]] = {}
    for name in ZIPS:
        with zipfile.ZipFile(os.path.join(data_dir, name)) as archive:
            for entry in sorted(archive.namelist()):
                parts = entry.split("/")
                if len(parts) != 4 or not parts[3].endswith(".png"):
                    continue
                _, alphabet, character, filename = parts
                if alphabet in ALPHABETS[split]:
                    drawings = by_character.setdefault(f"{alphabet}.{character}", [])
                    if filename not in {f for f, _ in drawings}:
                        drawings.append((filename, archive.read(entry)))
    names = sorted(by_character)
    if len(names) < num_characters:
        raise ValueError(f"{split} has {len(names)} characters, fewer than {num_characters}")
    chosen = sorted(rng.choice(names, num_characters, replace=False).tolist())
    os.makedirs(target, exist_ok=True)
    characters = []
    for name in chosen:
        drawings = by_character[name]
        picks = sorted(rng.choice(len(drawings), num_drawings, replace=False).tolist())
        os.makedirs(os.path.join(target, name), exist_ok=True)
        files = []
        for pick in picks:
            filename, data = drawings[pick]
            files.append(f"{name}/{filename}")
            with open(os.path.join(target, name, filename), "wb") as f:
                f.write(data)
        characters.append({"name": name, "files": files})
    with open(os.path.join(data_dir, "LICENSE"), "rb") as source:
        licence = source.read()
    with open(os.path.join(target, "LICENSE"), "wb") as f:
        f.write(licence)
    source = (
        "Omniglot (Lake, Salakhutdinov and Tenenbaum, Science 2015), "
        "https://github.com/brendenlake/omniglot, MIT licence (LICENSE)"
    )
    with open(os.path.join(target, "README.md"), "w") as f:
        f.write(
            f"# Example drawings\n\n{num_drawings} drawings of each of {num_characters} "
            f"characters of the {', '.join(ALPHABETS[split])} alphabets ({split} split: never "
            f"seen in training), as their original 105 x 105 PNG files.\n\nFrom {source}.\n"
        )
    index = {"characters": characters, "licence": "LICENSE", "source": source}
    with open(os.path.join(target, "index.json"), "w") as f:
        json.dump(index, f, indent=2)
    return index


def warmup_images(rng, *, num_support: int, num_query: int, num_ways: int) -> dict:
    """Warm-up requests of an exported image classifier: drawings in 0..1, labels 0..N-1."""

    def images(count):
        return rng.uniform(0.0, 1.0, (1, count, *IMAGE_SHAPE)).astype("float32")

    labels = [[i % num_ways for i in range(num_support)]]
    return {
        "support_x": images(num_support),
        "support_y": np.asarray(labels, "int32").reshape(1, num_support),
        "query_x": images(num_query),
    }


def write_leo_pickle(path: str, features: np.ndarray, split: OmniglotSplit) -> None:
    """Writes one split in LEO's format: keys `omniglot-<class>-<class>_<image>`."""
    keys = [f"omniglot-{c}-{c}_{i}" for c, i in zip(split.classes, split.image_ids, strict=True)]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    buffer = io.BytesIO()
    pickle.dump({"embeddings": features, "keys": keys}, buffer, protocol=2)
    with open(path, "wb") as f:
        f.write(buffer.getvalue())
