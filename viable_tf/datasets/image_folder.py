"""A folder of class folders, or a TFDS image dataset, as few-shot classes: found,
split and decoded.

The layout is the one Keras' `image_dataset_from_directory` and TFDS's `ImageFolder`
read, one folder per class, optionally grouped one level up (alphabets of characters,
families of species), which a split by group keeps together:

    IMAGE_DIR/<class>/<image>             or    IMAGE_DIR/<group>/<class>/<image>

or zip archives of that layout in IMAGE_DIR (each with one top folder), as Omniglot's
alphabets come (`scan_zips`).

Images are PNG, JPEG, GIF (first frame) or BMP files of any size and channels. PNG and
JPEG files are decoded by TensorFlow's own decoders (`tf.io.decode_image`), as a served
export decodes the files it is sent; BMP and GIF files by Pillow (`decode_by_pillow`).
Each is converted to the configured channels (alpha composited over white, colour to
grey as the decoders convert, grey repeated) and resized to the configured size by area
averaging. Values are 0..1.

A tensorflow-datasets image-classification dataset is read by name (`tfds_classes`):
its examples grouped by their label feature's class names, then split and converted
as a folder's are.

Everything the folder can get wrong stops `scan` or `decode` with one line naming it:
a missing or empty folder, a class with too few images, a file that does not decode
(skipped with a count instead when asked); a TFDS name or feature that does not exist.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from collections.abc import Mapping, Sequence

import numpy as np

from viable_tf.image_decoding import ImageDecodeError, convert_all, decode_image

#: What `tf.io.decode_image` reads, by file name extension (lower case).
EXTENSIONS = (".png", ".jpg", ".jpeg", ".gif", ".bmp")
SPLITS = ("train", "val", "test")


@dataclasses.dataclass(frozen=True)
class ImageClass:
    """One class: its name (its folder, relative to the image folder, "/"-separated),
    its group (the parent folder's name; "" when classes sit at the top) and its files,
    or, from a TFDS dataset, its images already decoded (uint8 [n, h, w, c])."""

    name: str
    group: str
    files: tuple[str, ...] = ()
    images: np.ndarray | None = None

    @property
    def size(self) -> int:
        return len(self.files) if self.images is None else len(self.images)


def tfds_classes(
    name: str,
    *,
    label: str = "label",
    image: str = "image",
    splits: Sequence[str] | None = None,
    data_dir: str | None = None,
    download: bool = False,
) -> list[ImageClass]:
    """The classes of a tensorflow-datasets image-classification dataset: every example
    of `splits` (default: all of them) by its `label` feature's class name. The few-shot
    split into meta-training, validation and test classes is made over these classes."""
    import tensorflow_datasets as tfds

    try:
        builder = tfds.builder(name, data_dir=data_dir)
    except tfds.core.DatasetNotFoundError:
        raise ValueError(
            f"tensorflow-datasets has no dataset {name!r} (`tfds.list_builders()` names them)"
        ) from None
    features = builder.info.features
    for key, what in ((label, "label"), (image, "image")):
        if key not in features:
            raise ValueError(
                f"dataset {name!r} has no {what} feature {key!r}; "
                f"its features: {', '.join(features.keys())}"
            )
    if download:
        builder.download_and_prepare()
    splits = list(splits or builder.info.splits.keys())
    by_label: dict[int, list[np.ndarray]] = {}
    for split in splits:
        for example in tfds.as_numpy(builder.as_dataset(split=split)):
            by_label.setdefault(int(example[label]), []).append(example[image])
    names = features[label].names
    return [
        ImageClass(names[index], "", images=np.stack(by_label[index])) for index in sorted(by_label)
    ]


#: How a file inside a zip archive is named among a class's files: "<archive>::<member>".
IN_ZIP = "::"


def hidden(name: str) -> bool:
    """A file or folder no one means as an image or a class: hidden (".DS_Store", the
    "._<name>" metadata files macOS writes beside files on other disks) or the
    "__MACOSX" folder macOS adds to the zip archives it makes."""
    return name.startswith(".") or name == "__MACOSX"


def _images(names) -> list[str]:
    return sorted(
        f for f in names if os.path.splitext(f)[1].lower() in EXTENSIONS and not hidden(f)
    )


def scan(image_dir: str) -> list[ImageClass]:
    """The classes of `image_dir`: every folder holding image files directly, sorted by
    name, symbolic links followed (each folder read once). Files with other extensions
    are not images here, and hidden files and folders (`hidden`) are not read. A folder
    with no class folders but zip archives is read inside the archives (`scan_zips`)."""
    if not os.path.isdir(image_dir):
        what = "is a file, not a folder" if os.path.exists(image_dir) else "does not exist"
        raise ValueError(f"image folder {image_dir} {what}")
    classes, seen = [], set()
    for root, dirs, files in os.walk(image_dir, followlinks=True):
        real = os.path.realpath(root)
        if real in seen:  # a link back to a folder already read
            dirs[:] = []
            continue
        seen.add(real)
        dirs[:] = sorted(d for d in dirs if not hidden(d))
        images = _images(files)
        if not images or os.path.samefile(root, image_dir):
            continue
        name = os.path.relpath(root, image_dir).replace(os.sep, "/")
        group = name.rsplit("/", 1)[0] if "/" in name else ""
        classes.append(ImageClass(name, group, tuple(os.path.join(root, f) for f in images)))
    if not classes:
        archives = sorted(f for f in os.listdir(image_dir) if f.lower().endswith(".zip"))
        if archives:
            return scan_zips([os.path.join(image_dir, f) for f in archives])
        raise ValueError(
            f"image folder {image_dir} holds no class folders of images "
            f"({', '.join(EXTENSIONS)}): expected {image_dir}/<class>/<image>"
        )
    return classes


def scan_zips(archives: Sequence[str]) -> list[ImageClass]:
    """The classes inside zip archives of class folders (as Omniglot ships its
    alphabets): `<top>/<class>/<image>` or `<top>/<group>/<class>/<image>` in each, its
    single top folder left out of the names. A class in several archives (Omniglot's
    Greek and Latin) is one class, a file name it has twice kept from the first."""
    import zipfile

    files: dict[str, dict[str, str]] = {}  # class -> {file name: "<archive>::<member>"}
    for path in archives:
        try:
            with zipfile.ZipFile(path) as archive:
                members = [m for m in archive.namelist() if not m.endswith("/")]
        except zipfile.BadZipFile:
            raise ValueError(f"{path} is not a zip archive") from None
        members = [m for m in members if not any(hidden(part) for part in m.split("/"))]
        tops = {m.split("/", 1)[0] for m in members}
        strip = len(tops) == 1 and all("/" in m for m in members)
        for member in _images(members):
            inner = member.split("/", 1)[1] if strip else member
            if "/" not in inner:
                continue  # an image beside the class folders: no class
            name, filename = inner.rsplit("/", 1)
            files.setdefault(name, {}).setdefault(filename, f"{path}{IN_ZIP}{member}")
    if not files:
        raise ValueError(
            f"the zip archives {', '.join(map(os.path.basename, archives))} hold no class "
            f"folders of images ({', '.join(EXTENSIONS)})"
        )
    return [
        ImageClass(
            name,
            name.rsplit("/", 1)[0] if "/" in name else "",
            tuple(files[name][f] for f in sorted(files[name])),
        )
        for name in sorted(files)
    ]


@functools.cache
def _archive(path: str):
    import zipfile

    return zipfile.ZipFile(path)


def read_bytes(path: str) -> bytes:
    """A file's bytes, or a zip member's ("<archive>::<member>")."""
    if IN_ZIP in path:
        archive, member = path.split(IN_ZIP, 1)
        return _archive(archive).read(member)
    with open(path, "rb") as f:
        return f.read()


def split_classes(
    classes: Sequence[ImageClass],
    *,
    split_file: str | Mapping[str, Sequence[str]] | None = None,
    fractions: Sequence[float] = (0.6, 0.2, 0.2),
    by_group: bool = False,
    seed: int = 0,
) -> dict[str, list[ImageClass]]:
    """The classes split into train, val and test (class-disjoint).

    `split_file`: a JSON object {"train": [...], "val": [...], "test": [...]} of class
    names (or of group names with `by_group`), or that mapping itself; every class must
    be named once. Else a seeded shuffle cut at `fractions` (of the classes, or of the
    groups with `by_group`, so that a group's classes stay in one split)."""
    units = sorted({c.group for c in classes}) if by_group else [c.name for c in classes]
    unit_of = {c.name: (c.group if by_group else c.name) for c in classes}
    if split_file is not None:
        if isinstance(split_file, Mapping):
            named, split_file = dict(split_file), "the split"
        else:
            try:
                with open(split_file) as f:
                    named = json.load(f)
            except FileNotFoundError:
                raise ValueError(f"split file {split_file} does not exist") from None
            except (UnicodeDecodeError, json.JSONDecodeError) as error:
                raise ValueError(f"{split_file} is not a JSON split file ({error})") from None
        if not isinstance(named, dict) or sorted(named) != sorted(SPLITS):
            raise ValueError(f"{split_file}: expected an object with keys {', '.join(SPLITS)}")
        where: dict[str, str] = {}
        for split in SPLITS:
            for unit in named[split]:
                if unit in where:
                    raise ValueError(f"{split_file}: {unit!r} is in both {where[unit]} and {split}")
                where[unit] = split
        unknown = sorted(set(where) - set(units))
        if unknown:
            raise ValueError(f"{split_file}: {len(unknown)} unknown names, e.g. {unknown[0]!r}")
        missing = sorted(set(units) - set(where))
        if missing:
            raise ValueError(f"{split_file}: {len(missing)} not in any split, e.g. {missing[0]!r}")
    else:
        if len(fractions) != 3 or min(fractions) < 0 or abs(sum(fractions) - 1) > 1e-6:
            raise ValueError(f"fractions must be three shares summing to 1, got {fractions}")
        order = np.random.default_rng(seed).permutation(len(units))
        cuts = np.round(np.cumsum(fractions)[:2] * len(units)).astype(int)
        where = {}
        for split, part in zip(SPLITS, np.split(order, cuts), strict=True):
            where.update({units[i]: split for i in part})
    splits: dict[str, list[ImageClass]] = {split: [] for split in SPLITS}
    for c in classes:
        splits[where[unit_of[c.name]]].append(c)
    return splits


def load(
    image_class: ImageClass, *, image_size: tuple[int, int], channels: int, bad_files: str
) -> tuple[np.ndarray, list[str]]:
    """A class's images [n, H, W, C] of 0..1, and its files skipped (see `decode`)."""
    if image_class.images is None:
        return decode(
            image_class.files, image_size=image_size, channels=channels, bad_files=bad_files
        )
    return convert_all(image_class.images, image_size, channels), []


def decode(
    files: Sequence[str], *, image_size: tuple[int, int], channels: int, bad_files: str
) -> tuple[np.ndarray, list[str]]:
    """The files as images [n, H, W, C] of 0..1 (float32), and the files skipped.

    `bad_files`: 'refuse' stops at the first file that does not decode (truncated, or not
    an image whatever its name), naming it; 'skip' leaves such files out."""
    if channels not in (1, 3):
        raise ValueError(f"channels must be 1 or 3, got {channels}")
    if bad_files not in ("refuse", "skip"):
        raise ValueError(f"bad_files must be 'refuse' or 'skip', got {bad_files!r}")
    skipped: list[str] = []
    return convert_all(_decoded(files, bad_files, skipped), image_size, channels), skipped


def _decoded(files: Sequence[str], bad_files: str, skipped: list[str]):
    """Each file's uint8 [h, w, c], in order; what does not decode refused or skipped."""
    import tensorflow as tf

    for path in files:
        try:
            image = decode_image(read_bytes(path))  # uint8 [h, w, c]
        except (tf.errors.InvalidArgumentError, tf.errors.UnknownError, ImageDecodeError) as error:
            if bad_files == "refuse":
                message = getattr(error, "message", str(error))  # TensorFlow's, or ours
                reason = message.split("}}")[-1].strip().splitlines()[0][:120]
                raise ValueError(
                    f"{path} does not decode as an image ({reason}); "
                    "pass bad_files='skip' to leave such files out"
                ) from None
            skipped.append(path)
            continue
        yield image
