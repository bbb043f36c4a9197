"""Few-shot episodes over a folder of class folders of images (your own data), or over
a tensorflow-datasets image-classification dataset by name.

`ImageFolderEpisodes` reads `IMAGE_DIR/<class>/<image>` (or `IMAGE_DIR/<group>/<class>/
<image>`; datasets/image_folder.py), splits the classes into meta-training, validation
and test classes (by a split file, or a seeded fraction of the classes or of their
groups), decodes every image once to `image_size` x `channels` and holds them in memory
within `cache_budget_mb`. Episodes are then drawn in the graph from a seed exactly as
the other task families draw theirs (tasks/episodes.py), so a resumed run and a
same-seed run see the same episodes. An image is given to the learner as its pixels,
[H * W * C] numbers of 0..1 (row-major, as a conv net's Reshape reads them); an export
of a run takes the images themselves, as tensors or PNG files (`raw_inputs`).

Augmentation as the Omniglot protocol does it: `rotations` (multiples of 90 degrees)
make each meta-training class's rotated images classes of their own; validation and
test classes are never rotated.

Shape legend: B episodes, N way, K shot, V queries per class, H x W x C an image.
"""

from __future__ import annotations

from collections.abc import Sequence

import gin
import keras
import numpy as np

from viable_tf.datasets import image_folder
from viable_tf.tasks.episodes import EpisodeFamily, EpisodeSampler


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
        names (group names with `split_by_group`); else `fractions` of them, shuffled
        by `split_seed`.
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
      cache_budget_mb: the decoded images must fit in this much memory (float32); a
        folder whose images would not is refused at start, with the figure.
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
        split_file: str | None = None,
        fractions: Sequence[float] = (0.6, 0.2, 0.2),
        split_by_group: bool = False,
        split_seed: int = 0,
        rotations: Sequence[int] = (0,),
        invert: bool = False,
        bad_files: str = "refuse",
        small_classes: str = "refuse",
        cache_budget_mb: float = 2048,
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
        if needed > cache_budget_mb * 2**20:
            count = sum(c.size for c in classes)
            raise ValueError(
                f"{count} images at {size[0]} x {size[1]} x {channels} take "
                f"{needed / 2**20:.0f} MB decoded, over cache_budget_mb={cache_budget_mb:g}: "
                "raise it, or take a smaller image_size"
            )
        self.skipped_files: list[str] = []
        self.skipped_classes: list[str] = []
        arrays = {}
        for split, members in splits.items():
            images, labels = [], []
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
                for degrees in angles if split == "train" else [0]:
                    images.append(np.rot90(decoded, degrees // 90, axes=(1, 2)))
                    labels += [f"{c.name}@{degrees}"] * len(decoded)
            found = len(set(labels))
            if found < num_ways:
                raise ValueError(
                    f"the {split} split has {found} classes with at least {per_class} images; "
                    f"{num_ways}-way episodes need {num_ways}"
                )
            pixels = np.concatenate(images)
            if invert:
                np.subtract(1.0, pixels, out=pixels)  # in place: no second copy
            arrays[split] = (pixels.reshape(len(pixels), -1), np.asarray(labels))
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
