"""One loaded version of a model: its signatures (callable on NumPy arrays), their
SignatureDefs for metadata, what the export says it is (viable_model.json), and its
warm-up (the export's assets.extra/tf_serving_warmup_requests, replayed before it takes
traffic). The version lifecycle (finding, loading, swapping, labels) is manager.py's.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import time
from collections import deque
from dataclasses import dataclass

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import meta_graph_pb2, saved_model_pb2
from tensorflow_serving.apis import prediction_log_pb2

from viable_tf.export import layout
from viable_tf.export import signature as sig


@dataclass(frozen=True)
class Signature:
    """A signature's named inputs and outputs, as TensorSpecs; `num_classes` is N for a
    classifier (whose labels the server checks before the graph), None otherwise;
    `every_class` says why the model needs each class in each task's support set (a
    prototype head, LEO), None where it does not."""

    name: str
    inputs: dict[str, tf.TensorSpec]
    outputs: dict[str, tf.TensorSpec]
    num_classes: int | None = None
    every_class: str | None = None


def _labelled(signature: Signature) -> bool:
    spec = signature.inputs.get(sig.SUPPORT_Y)
    return spec is not None and spec.dtype.is_integer


def _num_classes(description: dict, signatures: dict[str, Signature]) -> int | None:
    """N of a classifier: from the export's description, else its logits' last axis."""
    if description.get("task") == "classification":
        return int(description["output_dim"])
    for signature in signatures.values():
        spec = signature.outputs.get(sig.LOGITS)
        if spec is not None and spec.shape.rank and spec.shape[-1] is not None:
            return int(spec.shape[-1])
    return None


class Servable:
    """One loaded version of a model: its signatures, callable on NumPy arrays."""

    def __init__(self, name: str, version: int, path: str) -> None:
        self.name = name
        self.version = version
        self.path = path
        self._loaded = tf.saved_model.load(path)
        self._functions = dict(self._loaded.signatures)
        # Recent call times per signature, for the server to choose where a call runs.
        self.recent_seconds = {key: deque(maxlen=15) for key in self._functions}
        signatures = {
            key: Signature(
                key,
                dict(function.structured_input_signature[1]),
                dict(function.structured_outputs),
            )
            for key, function in self._functions.items()
        }
        with open(os.path.join(path, layout.SAVED_MODEL_FILE), "rb") as f:
            saved_model = saved_model_pb2.SavedModel.FromString(f.read())
        self.signature_defs: dict[str, meta_graph_pb2.SignatureDef] = dict(
            saved_model.meta_graphs[0].signature_def
        )
        self.description = {}
        description_path = layout.asset(path, layout.METADATA_FILE)
        if os.path.exists(description_path):
            with open(description_path) as f:
                self.description = json.load(f)
        num_classes = _num_classes(self.description, signatures)
        every_class = self.description.get("every_class")
        if every_class is None and self.description.get("head") == "prototypes":
            every_class = sig.PROTOTYPE_HEAD_REASON  # an export from before the key
        self.signatures = {
            key: dataclasses.replace(
                s,
                num_classes=num_classes if _labelled(s) else None,
                every_class=every_class if _labelled(s) else None,
            )
            for key, s in signatures.items()
        }

    def run(self, signature: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Calls a signature (blocking) and records how long it took."""
        start = time.perf_counter()
        tensors = {k: tf.constant(v) for k, v in inputs.items()}
        # The signature's public call: TensorFlow's private flat call saved 0.12 ms of a
        # 1.35 ms served sine request (9%, benchmarks/serving_overhead.py), under the 10%
        # that would justify a private API.
        outputs = self._functions[signature](**tensors)
        outputs = {key: value.numpy() for key, value in outputs.items()}
        self.recent_seconds[signature].append(time.perf_counter() - start)
        return outputs

    def function(self, signature: str):
        """The loaded signature's ConcreteFunction (keyword tensors in, a dict out)."""
        return self._functions[signature]

    def typical_seconds(self, signature: str) -> float | None:
        """The median of the signature's recent call times (None before its first call)."""
        recent = self.recent_seconds[signature]
        return statistics.median(recent) if recent else None

    def warm_up(self) -> int:
        """Replays the export's warm-up requests; returns how many ran."""
        path = layout.asset(self.path, layout.WARMUP_FILE)
        if not os.path.exists(path):
            return 0
        count = 0
        for record in tf.data.TFRecordDataset(path):
            log_entry = prediction_log_pb2.PredictionLog.FromString(record.numpy())
            request = log_entry.predict_log.request
            signature = request.model_spec.signature_name or sig.SERVING_DEFAULT
            self.run(signature, {k: tf.make_ndarray(v) for k, v in request.inputs.items()})
            count += 1
        return count
