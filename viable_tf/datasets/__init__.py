"""Few-shot classification data: the LEO embedding pickles, read safely."""

from viable_tf.datasets.leo_pickle import (
    Embeddings,
    SafeUnpickler,
    UnsafePickleError,
    load_embeddings,
    safe_load,
)

__all__ = [
    "Embeddings",
    "SafeUnpickler",
    "UnsafePickleError",
    "load_embeddings",
    "safe_load",
]
