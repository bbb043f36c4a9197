"""The LEO embedding pickles (docs/method.md §5), read as untrusted input.

A file `<root>/miniImageNet/<center|multiview>/<train|val|test>_embeddings.pkl` is a
Python 2 pickle of a dict with "embeddings" (float32 [n, 640]) and "keys" ([n]
strings `<prefix>-<class>-<class>_<image>`; the class is the middle field).

A pickle can run any code it names when loaded. `SafeUnpickler` admits only what
this format needs (dicts, lists, strings, NumPy arrays and their dtypes); a pickle
that names anything else is refused before it runs, with the file and the name.

Shape legend: n embeddings, E embedding size (640).
"""

from __future__ import annotations

import io
import pickle
from dataclasses import dataclass

import numpy as np

#: The only globals a LEO pickle needs: NumPy's array reconstruction (under its old
#: and new module names) and the codec Python 3 uses to write Python 2 byte strings.
ALLOWED_GLOBALS = frozenset(
    {
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "scalar"),
        ("_codecs", "encode"),
    }
)


class UnsafePickleError(pickle.UnpicklingError):
    """The pickle names a global outside ALLOWED_GLOBALS; nothing of it was run."""


class SafeUnpickler(pickle.Unpickler):
    """An Unpickler that resolves only ALLOWED_GLOBALS."""

    def __init__(self, file, *, source: str) -> None:
        super().__init__(file, encoding="latin1")  # written by Python 2
        self.source = source

    def find_class(self, module: str, name: str):
        if (module, name) not in ALLOWED_GLOBALS:
            raise UnsafePickleError(
                f"{self.source}: refused to load {module}.{name}; a LEO embeddings pickle "
                "may hold only dicts, lists, strings and numpy arrays"
            )
        return super().find_class(module, name)


def safe_load(data: bytes, *, source: str = "<bytes>"):
    """Unpickles `data` admitting only ALLOWED_GLOBALS."""
    return SafeUnpickler(io.BytesIO(data), source=source).load()


@dataclass(frozen=True)
class Embeddings:
    """One split's embeddings, l2-normalised, with their class and image ids."""

    embeddings: np.ndarray  # float32 [n, E], each row of unit norm
    keys: list[str]  # [n]
    classes: list[str]  # [n], the middle field of each key
    images: list[str]  # [n], the image id after the last "_"


def parse_key(key: str, *, source: str = "<keys>") -> tuple[str, str]:
    """`<prefix>-<class>-<class>_<image>` -> (class, image)."""
    parts = key.split("-")
    if len(parts) != 3 or "_" not in parts[2]:
        raise ValueError(
            f"{source}: key {key!r} is not of the form <prefix>-<class>-<class>_<image>"
        )
    class_id, image = parts[2].rsplit("_", 1)
    if class_id != parts[1]:
        raise ValueError(f"{source}: key {key!r} names two classes ({parts[1]}, {class_id})")
    return class_id, image


def load_embeddings(path: str) -> Embeddings:
    """Reads one LEO embeddings pickle; raises ValueError naming the file and the problem."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as error:
        raise ValueError(f"cannot read {path}: {error.strerror}") from None
    try:
        content = safe_load(data, source=path)
    except UnsafePickleError:
        raise
    except Exception as error:
        raise ValueError(f"{path} is not a readable pickle: {error}") from None
    if not isinstance(content, dict) or not {"embeddings", "keys"} <= set(content):
        found = sorted(content) if isinstance(content, dict) else type(content).__name__
        raise ValueError(f'{path}: expected a dict with "embeddings" and "keys", found {found}')
    embeddings = np.asarray(content["embeddings"])
    keys = [k.decode("latin1") if isinstance(k, bytes) else k for k in content["keys"]]
    if embeddings.ndim != 2 or embeddings.dtype.kind != "f":
        raise ValueError(
            f'{path}: "embeddings" must be a float array [n, E], got {embeddings.dtype} '
            f"{list(embeddings.shape)}"
        )
    if len(keys) != len(embeddings):
        raise ValueError(f'{path}: {len(embeddings)} embeddings but {len(keys)} "keys"')
    if not all(isinstance(k, str) for k in keys):
        raise ValueError(f'{path}: "keys" must be strings')
    ids = [parse_key(key, source=path) for key in keys]
    embeddings = embeddings.astype(np.float32)
    norms = np.linalg.norm(embeddings, axis=1, keepdims=True)  # [n, 1]
    if np.any(norms == 0) or not np.all(np.isfinite(embeddings)):
        raise ValueError(f"{path}: embeddings must be finite and non-zero to be l2-normalised")
    return Embeddings(
        embeddings=embeddings / norms,  # as LEO does
        keys=keys,
        classes=[c for c, _ in ids],
        images=[i for _, i in ids],
    )
