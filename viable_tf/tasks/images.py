"""Few-shot episodes over a folder of class folders of images (your own data), or over
a tensorflow-datasets image-classification dataset by name.

`ImageFolderEpisodes` reads `IMAGE_DIR/<class>/<image>` (or `IMAGE_DIR/<group>/<class>/
<image>`; datasets/image_folder.py), splits the classes into meta-training, validation
and test classes (by a split file, or a seeded fraction of the classes or of their
groups), decodes every image once to `image_size` x `channels` and holds them in memory
within `cache_budget_mb` (on disk beyond it, read per episode). Episodes are then drawn
in the graph from a seed exactly as the other task families draw theirs
(tasks/episodes.py), so a resumed run and a same-seed run see the same episodes. An
image is given to the learner as its pixels, [H * W * C] numbers of 0..1 (row-major, as
a conv net's Reshape reads them); an export of a run takes the images themselves, as
tensors or PNG files (`raw_inputs`).

Augmentation as the Omniglot protocol does it: `rotations` (multiples of 90 degrees)
make each meta-training class's rotated images classes of their own; validation and
test classes are never rotated.

Shape legend: B episodes, N way, K shot, V queries per class, H x W x C an image.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence

import gin
import keras
import numpy as np

from viable_tf.datasets import image_folder
from viable_tf.tasks.episodes import EpisodeFamily, EpisodeSampler, RowFiles


def _cache_folder(cache_dir: str | None) -> str:
    """`cache_dir`, created (emptied of an earlier run's rows), or a temporary folder
    removed when the process ends."""
    if cache_dir is None:
        cache_dir = tempfile.mkdtemp(prefix="viable-images-")
        atexit.register(shutil.rmtree, cache_dir, ignore_errors=True)
        return cache_dir
    if os.path.exists(cache_dir) and not os.path.isdir(cache_dir):
        raise ValueError(f"cache_dir {cache_dir} is a file, not a folder")
    for split in ("train", "val", "test"):
        shutil.rmtree(os.path.join(cache_dir, split), ignore_errors=True)
    os.makedirs(cache_dir, exist_ok=True)
    return cache_dir


@gin.configurable
class ImageFolderEpisodes(EpisodeFamily):
    """N-way K-shot episodes over a folder of class folders.

    Args:
      image_dir: the folder of class folders (IMAGE_DIR); or
      tfds_name: a tensorflow-datasets image-classification dataset, its classes those
        of its `tfds_label` feature over `tfds_splits` (default all), images from its
        `tfds_image` feature, read from `tfds_data_dir` (and downloaded and prepared
        there first if `tfds_download`).
      image_size: H = W of the images as the learner sees them (or (H, W)).
      channels: 1 (grey) or 3 (colour); every image is converted.
      num_ways, num_shots, num_queries: N, K and V per class.
      split_file: a JSON object {"train": [...], "val": [...], "test": [...]} of class
        names (group names with `split_by_group`), or that mapping itself (a gin dict);
        else `fractions` of them, shuffled by `split_seed`.
      split_by_group: split the groups (parent folders), keeping each group's classes
        in one split, as Omniglot splits by alphabet.
      rotations: degrees (multiples of 90) each meta-training class is also seen at, as
        classes of their own; (0,) for none.
      invert: give 1 - value (drawings on white: strokes = 1, background = 0, as the
        Omniglot protocol does).
      bad_files: 'refuse' stops at a file that does not decode, naming it; 'skip' leaves
        such files out and counts them.
      small_classes: 'refuse' stops at a class with fewer than K + V images, naming it;
        'skip' leaves such classes out and counts them.
      cache_budget_mb: the memory the decoded images (float32) may take; a folder whose
        images would not fit is decoded to disk instead, one file per image under
        `cache_dir`, and each episode reads its images from there (memory then stays
        about one class's images, whatever the folder's size; the episodes are the same).
      cache_dir: where such a folder's decoded images go (default: a temporary folder,
        removed when the process ends).
    """

    def __init__(
        self,
        *,
        image_dir: str | None = None,
        tfds_name: str | None = None,
        tfds_label: str = "label",
        tfds_image: str = "image",
        tfds_splits: Sequence[str] | None = None,
        tfds_data_dir: str | None = None,
        tfds_download: bool = False,
        image_size: int | Sequence[int] = 28,
        channels: int = 1,
        num_ways: int = 5,
        num_shots: int = 1,
        num_queries: int = 15,
        split_file: str | Mapping[str, Sequence[str]] | None = None,
        fractions: Sequence[float] = (0.6, 0.2, 0.2),
        split_by_group: bool = False,
        split_seed: int = 0,
        rotations: Sequence[int] = (0,),
        invert: bool = False,
        bad_files: str = "refuse",
        small_classes: str = "refuse",
        cache_budget_mb: float = 2048,
        cache_dir: str | None = None,
    ) -> None:
        size = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
        if len(size) != 2 or min(size) < 1:
            raise ValueError(f"image_size must be H or (H, W) >= 1, got {image_size!r}")
        if any(r % 90 for r in rotations) or 0 not in rotations:
            raise ValueError(f"rotations must be multiples of 90 including 0, got {rotations}")
        if small_classes not in ("refuse", "skip"):
            raise ValueError(f"small_classes must be 'refuse' or 'skip', got {small_classes!r}")
        per_class = num_shots + num_queries
        if (image_dir is None) == (tfds_name is None):
            raise ValueError("give image_dir (a folder of class folders) or tfds_name, not both")
        if image_dir is not None:
            classes = image_folder.scan(image_dir)
        else:
            classes = image_folder.tfds_classes(
                tfds_name,
                label=tfds_label,
                image=tfds_image,
                splits=tfds_splits,
                data_dir=tfds_data_dir,
                download=tfds_download,
            )
        splits = image_folder.split_classes(
            classes,
            split_file=split_file,
            fractions=fractions,
            by_group=split_by_group,
            seed=split_seed,
        )
        image_bytes = 4 * size[0] * size[1] * channels
        angles = sorted({r % 360 for r in rotations})  # the meta-training classes' copies
        copies = {"train": len(angles), "val": 1, "test": 1}
        needed = sum(copies[s] * c.size * image_bytes for s, cs in splits.items() for c in cs)
        #: Where the decoded images are: "memory", or "disk" (they would not fit in
        #: `cache_budget_mb`: one file per image under `cache_dir`, read per episode).
        self.cache = "memory" if needed <= cache_budget_mb * 2**20 else "disk"
        if self.cache == "disk":
            cache_dir = _cache_folder(cache_dir)
            free = shutil.disk_usage(cache_dir).free
            if needed > free:
                count = sum(c.size for c in classes)
                raise ValueError(
                    f"{count} images at {size[0]} x {size[1]} x {channels} take "
                    f"{needed / 2**20:.0f} MB decoded, over cache_budget_mb="
                    f"{cache_budget_mb:g} and over the {free / 2**20:.0f} MB free in "
                    f"{cache_dir}: give a cache_dir with room, or take a smaller image_size"
                )
        self.cache_dir = cache_dir if self.cache == "disk" else None
        self.skipped_files: list[str] = []
        self.skipped_classes: list[str] = []
        arrays = {}
        for split, members in splits.items():
            # Every image of the split in one store, filled class by class: the decoded
            # images are held once (in memory), or one class at a time (on disk).
            count = sum(copies[split] * c.size for c in members)
            dim = size[0] * size[1] * channels
            if self.cache == "memory":
                store, filled = np.empty((count, dim), np.float32), 0
            else:
                store = RowFiles.write(os.path.join(cache_dir, split), count, dim)
            labels = []
            for c in members:
                decoded, skipped = image_folder.load(
                    c, image_size=size, channels=channels, bad_files=bad_files
                )
                self.skipped_files += skipped
                if len(decoded) < per_class:
                    if small_classes == "refuse":
                        raise ValueError(
                            f"class {c.name!r} has {len(decoded)} images; {num_shots}-shot "
                            f"episodes with {num_queries} queries need {per_class} "
                            "(pass small_classes='skip' to leave such classes out)"
                        )
                    self.skipped_classes.append(c.name)
                    continue
                if invert:
                    np.subtract(1.0, decoded, out=decoded)  # in place: no second copy
                for degrees in angles if split == "train" else [0]:
                    rows = np.rot90(decoded, degrees // 90, axes=(1, 2)).reshape(len(decoded), -1)
                    if self.cache == "memory":
                        store[filled : filled + len(rows)] = rows
                        filled += len(rows)
                    else:
                        store.append(rows)
                    labels += [f"{c.name}@{degrees}"] * len(decoded)
            found = len(set(labels))
            if found < num_ways:
                raise ValueError(
                    f"the {split} split has {found} classes with at least {per_class} images; "
                    f"{num_ways}-way episodes need {num_ways}"
                )
            if self.cache == "memory":
                store = store[: len(labels)]  # a view: files that did not decode left out
            else:
                store.shape = (len(labels), dim)
            arrays[split] = (store, np.asarray(labels))
        settings = {"num_ways": num_ways, "num_shots": num_shots, "num_queries": num_queries}
        self.train = EpisodeSampler(*arrays["train"], **settings)
        self.validation = EpisodeSampler(*arrays["val"], **settings)
        self.test = EpisodeSampler(*arrays["test"], **settings)
        self.image_shape = (*size, channels)
        self.invert = invert
        self.num_ways, self.num_shots, self.num_queries = num_ways, num_shots, num_queries
        self.num_classes = {split: len(set(labels)) for split, (_, labels) in arrays.items()}
        #: Each split's classes by name (folders, or TFDS class names), rotations aside.
        self.class_names = {
            split: sorted({label.rsplit("@", 1)[0] for label in labels})
            for split, (_, labels) in arrays.items()
        }
        self.input_dim = size[0] * size[1] * channels  # H * W * C pixels
        self.output_dim = num_ways
        self.task_loss = "cross_entropy"

    def hparams(self) -> dict[str, int | str]:
        return {
            "num_ways": self.num_ways,
            "num_shots": self.num_shots,
            "num_queries": self.num_queries,
            "image_shape": "x".join(map(str, self.image_shape)),
            **{f"{split}_classes": n for split, n in self.num_classes.items()},
        }

    def warmup_inputs(
        self, rng: np.random.Generator, *, num_support: int, num_query: int
    ) -> dict[str, np.ndarray]:
        labels = (np.arange(num_support) % self.num_ways).astype(np.int32)[None]
        return {
            "support_x": rng.uniform(size=(1, num_support, self.input_dim)).astype(np.float32),
            "support_y": labels,
            "query_x": rng.uniform(size=(1, num_query, self.input_dim)).astype(np.float32),
        }

    def raw_inputs(self) -> tuple[keras.Model, tuple[int, ...]]:
        """Images [n, H, W, C] of 0..1 -> the pixels the learner takes (inverted if
        configured): an export takes the images themselves, and PNG files."""
        images = keras.Input(self.image_shape, name="images")
        pixels = keras.layers.Flatten(name="pixels")(images)
        if self.invert:
            pixels = keras.layers.Rescaling(-1.0, offset=1.0, name="invert")(pixels)
        return keras.Model(images, pixels, name="image_pixels"), self.image_shape
