"""Export of the adapt-then-predict routine as a SavedModel for TF Serving.

`signature` (the serving contract) is plain Python and NumPy, imported by the server
without TensorFlow's Keras; the exporter itself is loaded on first use.
"""

from __future__ import annotations

import importlib

__all__ = [
    "AdaptThenPredict",
    "export_saved_model",
    "next_version",
]


def __getattr__(name: str):
    if name in __all__:
        return getattr(importlib.import_module("viable_tf.export.saved_model"), name)
    raise AttributeError(f"module 'viable_tf.export' has no attribute {name!r}")
