"""LEO embedding pickles: the exact format, read by an unpickler that runs nothing else."""

import os
import pickle

import numpy as np
import pytest

from viable_tf.datasets import UnsafePickleError, load_embeddings, safe_load


def _write_leo(path, embeddings, keys, protocol=2):
    with open(path, "wb") as f:
        pickle.dump({"embeddings": embeddings, "keys": keys}, f, protocol=protocol)


def test_reads_the_leo_format_and_l2_normalises(tmp_path):
    rng = np.random.default_rng(0)
    embeddings = rng.normal(size=(6, 640)).astype(np.float32) * 3
    keys = [f"1-n0153282{c}-n0153282{c}_{i:08d}.JPEG" for c in (9, 7) for i in range(3)]
    _write_leo(tmp_path / "train_embeddings.pkl", embeddings, keys)
    data = load_embeddings(str(tmp_path / "train_embeddings.pkl"))
    np.testing.assert_allclose(np.linalg.norm(data.embeddings, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(
        data.embeddings, embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True), rtol=1e-6
    )
    assert data.classes == ["n01532829"] * 3 + ["n01532827"] * 3
    assert data.images[:2] == ["00000000.JPEG", "00000001.JPEG"]
    assert data.keys == keys


def test_python2_style_byte_string_keys_are_read(tmp_path):
    keys = [b"1-n01-n01_img0", b"1-n02-n02_img1"]  # Python 2 str: bytes
    _write_leo(tmp_path / "val_embeddings.pkl", np.ones((2, 4), np.float32), keys)
    assert load_embeddings(str(tmp_path / "val_embeddings.pkl")).classes == ["n01", "n02"]


class _WritesAFile:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))  # unpickling would create the file


def test_a_pickle_that_would_run_code_is_refused_and_nothing_runs(tmp_path):
    target = tmp_path / "pwned.txt"
    bad = tmp_path / "test_embeddings.pkl"
    _write_leo(bad, np.ones((1, 4), np.float32), [_WritesAFile(str(target))])
    with pytest.raises(UnsafePickleError, match=r"test_embeddings\.pkl: refused to load io\.open"):
        load_embeddings(str(bad))
    assert not target.exists()
    payload = pickle.dumps(_WritesAFile(str(target)))
    with pytest.raises(UnsafePickleError):
        safe_load(payload)
    assert not target.exists()
    with pytest.raises(UnsafePickleError, match=r"(os|posix)\.system"):
        safe_load(pickle.dumps(_Shell()))


class _Shell:
    def __reduce__(self):
        return (os.system, ("true",))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            {"embeddings": np.ones((2, 4), np.float32)},
            'expected a dict with "embeddings" and "keys"',
        ),
        ([1, 2], "expected a dict"),
        ({"embeddings": np.ones(4, np.float32), "keys": ["1-a-a_x"]}, "float array"),
        ({"embeddings": np.ones((2, 4), np.float32), "keys": ["1-a-a_x"]}, "2 embeddings but 1"),
        ({"embeddings": np.ones((1, 4), np.float32), "keys": ["no-class"]}, "is not of the form"),
        ({"embeddings": np.zeros((1, 4), np.float32), "keys": ["1-a-a_x"]}, "non-zero"),
    ],
)
def test_malformed_files_name_the_file_and_the_problem(tmp_path, content, message):
    path = tmp_path / "train_embeddings.pkl"
    with open(path, "wb") as f:
        pickle.dump(content, f, protocol=2)
    with pytest.raises(ValueError, match=message) as info:
        load_embeddings(str(path))
    assert str(path) in str(info.value)


def test_missing_and_garbage_files(tmp_path):
    with pytest.raises(ValueError, match=r"cannot read .*nope\.pkl"):
        load_embeddings(str(tmp_path / "nope.pkl"))
    garbage = tmp_path / "x.pkl"
    garbage.write_bytes(b"not a pickle")
    with pytest.raises(ValueError, match=r"x\.pkl is not a readable pickle"):
        load_embeddings(str(garbage))


def test_pickles_from_old_numpy_module_names_load(tmp_path):
    """LEO's files were written by NumPy 1 (numpy.core.multiarray), not NumPy 2."""
    data = pickle.dumps({"embeddings": np.ones((1, 3), np.float32), "keys": ["1-a-a_x"]}, 2)
    assert b"numpy._core.multiarray" in data
    old = data.replace(b"numpy._core.multiarray", b"numpy.core.multiarray")
    path = tmp_path / "test_embeddings.pkl"
    path.write_bytes(old)
    np.testing.assert_allclose(load_embeddings(str(path)).embeddings, np.full((1, 3), 3**-0.5))
