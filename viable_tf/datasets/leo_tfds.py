"""A tensorflow-datasets builder over the LEO embedding pickles (docs/method.md §5).

The files cannot be downloaded by the builder: the user places them in a manual
directory, in LEO's layout, and the builder reads them with the safe unpickler:

    <manual_dir>/<dataset>/<view>/<train|val|test>_embeddings.pkl

Configs: `mini_imagenet_center`, `mini_imagenet_multiview` (640-d, LEO's
Mini-ImageNet) and `omniglot_center` (the features `viable-omniglot` writes in the
same format). Every example keeps its class and image ids; embeddings are
l2-normalised as LEO does.

    builder = LeoEmbeddings(config="mini_imagenet_center", data_dir=TFDS_DIR)
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(
        manual_dir=ROOT))
    embeddings, classes = load_split(builder, "train")
"""

from __future__ import annotations

import fcntl
import os
from collections import OrderedDict

import numpy as np
import tensorflow_datasets as tfds

from viable_tf.datasets.leo_pickle import load_embeddings

SPLITS = ("train", "val", "test")


def embeddings_path(root: str, dataset: str, view: str, split: str) -> str:
    """Where LEO's layout keeps one split's pickle."""
    return os.path.join(root, dataset, view, f"{split}_embeddings.pkl")


class LeoEmbeddingsConfig(tfds.core.BuilderConfig):
    """One dataset and view of the LEO layout."""

    def __init__(self, *, dataset: str, view: str, embedding_dim: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.dataset = dataset  # the folder under the manual dir, e.g. "miniImageNet"
        self.view = view  # "center" or "multiview"
        self.embedding_dim = embedding_dim  # E


class LeoEmbeddings(tfds.core.GeneratorBasedBuilder):
    """Embeddings of few-shot classification images, one example per image."""

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "LEO's pickles, l2-normalised, with class and image ids."}
    MANUAL_DOWNLOAD_INSTRUCTIONS = (
        "Download LEO's embeddings (github.com/deepmind/leo, embeddings.tar.gz) and unpack "
        "them so that the manual dir holds miniImageNet/<center|multiview>/"
        "<train|val|test>_embeddings.pkl. For Omniglot, point it at the features "
        "folder written by viable-omniglot."
    )
    BUILDER_CONFIGS = [
        LeoEmbeddingsConfig(
            name="mini_imagenet_center",
            dataset="miniImageNet",
            view="center",
            embedding_dim=640,
            description="Mini-ImageNet, WRN-28-10 features of the central crop.",
        ),
        LeoEmbeddingsConfig(
            name="mini_imagenet_multiview",
            dataset="miniImageNet",
            view="multiview",
            embedding_dim=640,
            description="Mini-ImageNet, WRN-28-10 features averaged over crops and flips.",
        ),
        LeoEmbeddingsConfig(
            name="omniglot_center",
            dataset="omniglot",
            view="center",
            embedding_dim=64,
            description="Omniglot features of viable-omniglot's encoder (docs/method.md §6).",
        ),
    ]

    def _info(self) -> tfds.core.DatasetInfo:
        return self.dataset_info_from_configs(
            features=tfds.features.FeaturesDict(
                {
                    "embedding": tfds.features.Tensor(
                        shape=(self.builder_config.embedding_dim,), dtype=np.float32
                    ),
                    "class_id": tfds.features.Text(),
                    "image_id": tfds.features.Text(),
                    "key": tfds.features.Text(),
                }
            ),
            supervised_keys=("embedding", "class_id"),
            homepage="https://github.com/deepmind/leo",
        )

    def _split_generators(self, dl_manager: tfds.download.DownloadManager):
        config = self.builder_config
        root = os.fspath(dl_manager.manual_dir)
        return {
            split: self._generate_examples(
                embeddings_path(root, config.dataset, config.view, split)
            )
            for split in SPLITS
        }

    def _generate_examples(self, path: str):
        data = load_embeddings(path)  # ValueError naming the file if missing or malformed
        dim = self.builder_config.embedding_dim
        if data.embeddings.shape[1] != dim:
            raise ValueError(
                f"{path}: embeddings are {data.embeddings.shape[1]}-dimensional; config "
                f"{self.builder_config.name} expects {dim}"
            )
        for key, embedding, class_id, image_id in zip(
            data.keys, data.embeddings, data.classes, data.images, strict=True
        ):
            yield (
                key,
                {
                    "embedding": embedding,
                    "class_id": class_id,
                    "image_id": image_id,
                    "key": key,
                },
            )


def prepare(config: str, *, manual_dir: str, data_dir: str) -> LeoEmbeddings:
    """The builder for `config`, its TFDS files generated from `manual_dir` if not yet."""
    if not os.path.isdir(manual_dir):
        raise ValueError(
            f"embeddings directory {manual_dir} does not exist; expected the LEO layout "
            "<dir>/<dataset>/<view>/<train|val|test>_embeddings.pkl"
        )
    os.makedirs(data_dir, exist_ok=True)
    # Runs started together (one per core) would generate the same files at once, and
    # the second to finish fails renaming its folder onto the first's: one at a time.
    with open(os.path.join(data_dir, f".{config}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        builder = LeoEmbeddings(config=config, data_dir=data_dir)
        builder.download_and_prepare(
            download_config=tfds.download.DownloadConfig(manual_dir=manual_dir)
        )
    return builder


#: Splits read lately, kept (read-only) while their arrays total at most this many bytes:
#: a task family built again over the same files (a trainer and the run it restores, an
#: evaluation beside training, the tests) does not read and decode them again.
SPLIT_CACHE_BYTES = 256 * 2**20
_read_splits: OrderedDict[tuple, tuple[np.ndarray, np.ndarray]] = OrderedDict()


def load_split(builder: LeoEmbeddings, split: str) -> tuple[np.ndarray, np.ndarray]:
    """All of a split at once: (embeddings float32 [n, E], class ids [n] as str), both
    read-only. The split is read once while its generated files stay the same (their
    folder, names, sizes and modification times are the key)."""
    folder = os.fspath(builder.data_path)
    files = sorted(
        (name, stat.st_size, stat.st_mtime_ns)
        for name in os.listdir(folder)
        if name.startswith(f"{builder.name}-{split}.") or name == "dataset_info.json"
        for stat in (os.stat(os.path.join(folder, name)),)
    )
    key = (folder, split, tuple(files))
    if key in _read_splits:
        _read_splits.move_to_end(key)
        return _read_splits[key]
    everything = tfds.as_numpy(builder.as_dataset(split=split, batch_size=-1))
    classes = np.array([c.decode() for c in everything["class_id"]])
    arrays = (everything["embedding"], classes)
    for array in arrays:
        array.setflags(write=False)
    _read_splits[key] = arrays
    while sum(a.nbytes + c.nbytes for a, c in _read_splits.values()) > SPLIT_CACHE_BYTES:
        _read_splits.popitem(last=False)  # the least recently read first; a split
        # larger than the budget is returned but not kept
    return arrays
