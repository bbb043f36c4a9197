"""The tensorflow-datasets builder over LEO's layout, and class-disjoint task splits."""

import os
import pickle

import numpy as np
import pytest
from fake_leo import write_fake_leo

from viable_tf.datasets import UnsafePickleError
from viable_tf.datasets.leo_tfds import LeoEmbeddings, embeddings_path, load_split, prepare
from viable_tf.tasks.classification import FewShotEpisodes


@pytest.mark.parametrize("view", ["center", "multiview"])
def test_builder_reads_every_split_with_ids_and_unit_norm(tmp_path, view):
    root = write_fake_leo(tmp_path / "leo", view=view, per_class=7)
    builder = prepare(f"mini_imagenet_{view}", manual_dir=root, data_dir=str(tmp_path / "tfds"))
    assert set(builder.info.splits) == {"train", "val", "test"}
    embeddings, classes = load_split(builder, "val")
    assert embeddings.shape == (5 * 7, 640) and embeddings.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1.0, rtol=1e-5)
    assert sorted(set(classes)) == [f"n1{c:07d}" for c in range(5)]
    # ids are kept; each example equals its normalised row of the pickle
    with open(embeddings_path(root, "miniImageNet", view, "val"), "rb") as f:
        raw = pickle.load(f)
    example = next(iter(builder.as_dataset(split="val").take(1)))
    key = example["key"].numpy().decode()
    row = raw["keys"].index(key)
    expected = raw["embeddings"][row] / np.linalg.norm(raw["embeddings"][row])
    np.testing.assert_allclose(example["embedding"].numpy(), expected, rtol=1e-5)
    assert example["class_id"].numpy().decode() == key.split("-")[1]
    assert example["image_id"].numpy().decode() == key.rsplit("_", 1)[1]
    # a second call reuses the generated files
    again = LeoEmbeddings(config=f"mini_imagenet_{view}", data_dir=str(tmp_path / "tfds"))
    assert again.info.splits["val"].num_examples == 35


def test_a_split_is_read_once_while_its_files_stay_the_same(tmp_path, monkeypatch):
    from viable_tf.datasets import leo_tfds

    root = write_fake_leo(tmp_path / "leo", per_class=4)
    tfds_dir = str(tmp_path / "tfds")
    builder = prepare("mini_imagenet_center", manual_dir=root, data_dir=tfds_dir)
    first = load_split(builder, "train")
    assert not first[0].flags.writeable and not first[1].flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        first[0][0, 0] = 1.0
    again = load_split(prepare("mini_imagenet_center", manual_dir=root, data_dir=tfds_dir), "train")
    assert again[0] is first[0] and again[1] is first[1]
    # Regenerated files (another size or time) are read anew.
    for name in os.listdir(builder.data_path):
        if name.startswith("leo_embeddings-train."):
            os.utime(os.path.join(builder.data_path, name), ns=(1, 1))
    renewed = load_split(builder, "train")
    assert renewed[0] is not first[0]
    np.testing.assert_array_equal(renewed[0], first[0])
    np.testing.assert_array_equal(renewed[1], first[1])
    # Over the byte budget the least recently read split goes first; a split larger than
    # the whole budget is returned and not kept.
    monkeypatch.setattr(leo_tfds, "_read_splits", leo_tfds.OrderedDict())
    val = load_split(builder, "val")
    monkeypatch.setattr(leo_tfds, "SPLIT_CACHE_BYTES", val[0].nbytes + val[1].nbytes)
    assert load_split(builder, "val")[0] is val[0]
    test = load_split(builder, "test")
    assert load_split(builder, "test")[0] is test[0] and load_split(builder, "val")[0] is not val[0]
    monkeypatch.setattr(leo_tfds, "SPLIT_CACHE_BYTES", 1)
    big = load_split(builder, "train")
    assert load_split(builder, "train")[0] is not big[0] and not leo_tfds._read_splits


def test_missing_file_names_the_file(tmp_path):
    root = write_fake_leo(tmp_path / "leo", per_class=3)
    os.remove(embeddings_path(root, "miniImageNet", "center", "test"))
    with pytest.raises(ValueError, match=r"test_embeddings\.pkl"):
        prepare("mini_imagenet_center", manual_dir=root, data_dir=str(tmp_path / "tfds"))
    with pytest.raises(ValueError, match="does not exist; expected the LEO layout"):
        prepare("mini_imagenet_center", manual_dir=str(tmp_path / "nope"), data_dir=str(tmp_path))


def test_wrong_embedding_size_is_refused(tmp_path):
    root = write_fake_leo(tmp_path / "leo", dim=32, per_class=3)
    with pytest.raises(ValueError, match="32-dimensional; config mini_imagenet_center expects 640"):
        prepare("mini_imagenet_center", manual_dir=root, data_dir=str(tmp_path / "tfds"))


class _WritesAFile:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_a_hostile_pickle_is_refused_by_the_builder_and_nothing_runs(tmp_path):
    root = write_fake_leo(tmp_path / "leo", per_class=3)
    target = tmp_path / "pwned.txt"
    with open(embeddings_path(root, "miniImageNet", "center", "train"), "wb") as f:
        pickle.dump(
            {"embeddings": np.ones((1, 640), np.float32), "keys": [_WritesAFile(str(target))]}, f
        )
    with pytest.raises(UnsafePickleError, match=r"refused to load io\.open"):
        prepare("mini_imagenet_center", manual_dir=root, data_dir=str(tmp_path / "tfds"))
    assert not target.exists()


def test_episodes_meta_train_on_train_and_val_and_refuse_shared_classes(tmp_path):
    root = write_fake_leo(tmp_path / "leo", per_class=20)
    tasks = FewShotEpisodes(data_dir=root, num_ways=5, num_shots=1, num_queries=15)
    assert len(tasks.train.classes) == 8 + 5  # train + val (docs/method.md §5)
    assert len(tasks.validation.classes) == 5 and len(tasks.test.classes) == 5
    assert (tasks.input_dim, tasks.output_dim) == (640, 5)
    only_train = FewShotEpisodes(data_dir=root, train_splits=("train",), tfds_dir=root + "/t")
    assert len(only_train.train.classes) == 8
    with pytest.raises(ValueError, match="must not be meta-trained on"):
        FewShotEpisodes(data_dir=root, train_splits=("train", "test"))

    shared = write_fake_leo(tmp_path / "shared", per_class=20)
    test_file = embeddings_path(shared, "miniImageNet", "center", "test")
    with open(test_file, "rb") as f:
        data = pickle.load(f)
    data["keys"][0] = "2-n00000000-n00000000_00000000.JPEG"  # a train class
    with open(test_file, "wb") as f:
        pickle.dump(data, f, protocol=2)
    with pytest.raises(ValueError, match=r"share 1 classes .* must be class-disjoint"):
        FewShotEpisodes(data_dir=shared)


def test_runs_started_together_prepare_the_same_files_once(tmp_path):
    """Two runs started at once (one per core) used to generate the same TFDS files
    together, and the second failed renaming its folder onto the first's."""
    import concurrent.futures

    root = write_fake_leo(tmp_path / "leo", per_class=5)
    tfds_dir = str(tmp_path / "tfds")
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        jobs = [
            pool.submit(prepare, "mini_imagenet_center", manual_dir=root, data_dir=tfds_dir)
            for _ in range(2)
        ]
        builders = [job.result() for job in jobs]  # neither raised
    sizes = {b.info.splits["train"].num_examples for b in builders}
    assert len(sizes) == 1 and sizes.pop() > 0
