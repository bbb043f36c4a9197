"""Export of the adapt-then-predict routine as a SavedModel for TF Serving."""

from viable_tf.export.saved_model import AdaptThenPredict, export_saved_model, next_version

__all__ = [
    "AdaptThenPredict",
    "export_saved_model",
    "next_version",
]
