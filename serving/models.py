"""Loaded model versions, and the manager that finds, loads, swaps and reports them.

The manager polls each model's base path for numeric version folders, loads the
versions its policy wants (latest N by default, or specific ones, or all), warms
each up with its `assets.extra/tf_serving_warmup_requests` before it takes traffic,
then swaps it in. A request holds a reference to the version that serves it, so a
swap never drops a request in flight. A version that fails to load is reported in
its status (state END with the error) while the versions already loaded keep
serving; it is tried again only when its folder changes.

All state changes happen on the event loop's thread; loading runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import statistics
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc
import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import meta_graph_pb2, saved_model_pb2
from tensorflow_serving.apis import get_model_status_pb2, prediction_log_pb2
from tensorflow_serving.config import model_server_config_pb2

from serving.errors import ServingError, not_found
from viable_tf.export import signature as sig

log = logging.getLogger("viable_serve")

State = get_model_status_pb2.ModelVersionStatus.State
UNKNOWN_ERROR = 2  # tensorflow.error.Code.UNKNOWN


@dataclass(frozen=True)
class Signature:
    """A signature's named inputs and outputs, as TensorSpecs; `num_classes` is N for a
    classifier (whose labels the server checks before the graph), None otherwise;
    `every_class` says the model needs each class in each task's support set (a
    prototype head)."""

    name: str
    inputs: dict[str, tf.TensorSpec]
    outputs: dict[str, tf.TensorSpec]
    num_classes: int | None = None
    every_class: bool = False


def _flat_caller(function):
    """Calls a loaded signature with its inputs in graph order, skipping
    ConcreteFunction.__call__'s handling of keyword arguments (about 0.15 ms of a
    0.6 ms sine call). Uses TensorFlow's internal `_call_flat` (TensorFlow is pinned);
    None, and the public call is used, where that is not available."""
    call_flat = getattr(function, "_call_flat", None)
    captured = list(function.captured_inputs)
    count = len(function.inputs) - len(captured)
    names = [t.name.split(":")[0] for t in function.inputs[:count]]
    if call_flat is None or sorted(names) != sorted(function.structured_input_signature[1]):
        return None
    return lambda tensors: call_flat([tensors[name] for name in names], captured)


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
        self._callers = {key: _flat_caller(fn) for key, fn in self._functions.items()}
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
        with open(os.path.join(path, "saved_model.pb"), "rb") as f:
            saved_model = saved_model_pb2.SavedModel.FromString(f.read())
        self.signature_defs: dict[str, meta_graph_pb2.SignatureDef] = dict(
            saved_model.meta_graphs[0].signature_def
        )
        self.description = {}
        description_path = os.path.join(path, "assets.extra", "viable_model.json")
        if os.path.exists(description_path):
            with open(description_path) as f:
                self.description = json.load(f)
        num_classes = _num_classes(self.description, signatures)
        every_class = self.description.get("head") == "prototypes"
        self.signatures = {
            key: dataclasses.replace(
                s,
                num_classes=num_classes if _labelled(s) else None,
                every_class=every_class and _labelled(s),
            )
            for key, s in signatures.items()
        }

    def run(self, signature: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Calls a signature (blocking) and records how long it took."""
        start = time.perf_counter()
        tensors = {k: tf.constant(v) for k, v in inputs.items()}
        caller = self._callers[signature]
        outputs = caller(tensors) if caller else self._functions[signature](**tensors)
        outputs = {key: value.numpy() for key, value in outputs.items()}
        self.recent_seconds[signature].append(time.perf_counter() - start)
        return outputs

    def typical_seconds(self, signature: str) -> float | None:
        """The median of the signature's recent call times (None before its first call)."""
        recent = self.recent_seconds[signature]
        return statistics.median(recent) if recent else None

    def warm_up(self) -> int:
        """Replays the export's warm-up requests; returns how many ran."""
        path = os.path.join(self.path, "assets.extra", "tf_serving_warmup_requests")
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


@dataclass
class VersionStatus:
    state: int = State.START
    error_code: int = 0
    error_message: str = ""
    fingerprint: tuple = ()


@dataclass
class ModelEntry:
    """A configured model: where its versions are and which to serve."""

    config: model_server_config_pb2.ModelConfig
    servables: dict[int, Servable] = field(default_factory=dict)
    statuses: dict[int, VersionStatus] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.config.name

    def wanted(self, on_disk: list[int]) -> set[int]:
        """The versions the policy asks for, among those on disk."""
        policy = self.config.model_version_policy
        choice = policy.WhichOneof("policy_choice")
        if choice == "all":
            return set(on_disk)
        if choice == "specific":
            return set(policy.specific.versions) & set(on_disk)
        count = policy.latest.num_versions if choice == "latest" else 1
        return set(sorted(on_disk)[-max(count, 1) :])


def _fingerprint(path: str) -> tuple:
    """Changes whenever a file in the version folder is added, removed or rewritten."""
    entries = []
    for root, _, files in os.walk(path):
        for name in files:
            stat = os.stat(os.path.join(root, name))
            entries.append(
                (os.path.relpath(os.path.join(root, name), path), stat.st_size, stat.st_mtime_ns)
            )
    return tuple(sorted(entries))


def _versions_on_disk(base_path: str) -> list[int]:
    try:
        names = os.listdir(base_path)
    except OSError:
        return []
    return sorted(
        int(name)
        for name in names
        if name.isdigit() and os.path.isdir(os.path.join(base_path, name))
    )


class ModelManager:
    """Finds, loads and swaps the versions of every configured model."""

    def __init__(
        self,
        configs: list[model_server_config_pb2.ModelConfig],
        *,
        load: Callable[[str, int, str], Servable] = Servable,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.models = {config.name: ModelEntry(config) for config in configs}
        self._load = load
        self._on_change = on_change or (lambda: None)
        self._polling = asyncio.Lock()  # one pass at a time: the poller's or a reload's

    # -- resolving requests ------------------------------------------------------

    def resolve(self, name: str, version: int | None = None, label: str | None = None) -> Servable:
        """The servable for a request's model spec; raises ServingError if there is none."""
        entry = self.models.get(name)
        if entry is None:
            raise not_found(
                f"Servable not found for request: Latest({name}); known models: "
                f"{', '.join(sorted(self.models)) or 'none'}"
            )
        if label:
            labels = dict(entry.config.version_labels)
            if label not in labels:
                raise ServingError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"Unrecognized servable version label: {label} (model {name} has labels: "
                    f"{', '.join(sorted(labels)) or 'none'})",
                )
            version = labels[label]
        if version is not None:
            servable = entry.servables.get(version)
            if servable is None:
                raise not_found(
                    f"Servable not found for request: Specific({name}, {version}); "
                    f"available versions: {self._available(entry)}"
                )
            return servable
        if not entry.servables:
            reason = "; ".join(
                f"version {v}: {s.error_message}"
                for v, s in sorted(entry.statuses.items())
                if s.error_message
            )
            raise not_found(
                f"Servable not found for request: Latest({name}); no version is loaded"
                + (f" ({reason})" if reason else f" (looked in {entry.config.base_path})")
            )
        return entry.servables[max(entry.servables)]

    @staticmethod
    def _available(entry: ModelEntry) -> str:
        return ", ".join(map(str, sorted(entry.servables))) or "none"

    def status(self, name: str, version: int | None = None, label: str | None = None):
        """ModelVersionStatus protos for a model (or one of its versions)."""
        entry = self.models.get(name)
        if entry is None:
            raise not_found(f"Could not find any versions of model {name}")
        if label:
            labels = dict(entry.config.version_labels)
            if label not in labels:
                raise ServingError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"Unrecognized servable version label: {label}",
                )
            version = labels[label]
        versions = sorted(entry.statuses) if version is None else [version]
        if version is not None and version not in entry.statuses:
            raise not_found(f"Could not find version {version} of model {name}")
        result = []
        for v in versions:
            s = entry.statuses[v]
            status = get_model_status_pb2.ModelVersionStatus(version=v, state=s.state)
            status.status.error_code = s.error_code
            status.status.error_message = s.error_message
            result.append(status)
        return result

    # -- polling -----------------------------------------------------------------

    async def poll(self) -> None:
        """One pass over every model's base path: load what is new, retire what is not wanted."""
        async with self._polling:
            await self._poll()

    async def reload(self, configs: list[model_server_config_pb2.ModelConfig]) -> None:
        """Replaces the served models' configuration (TF Serving's HandleReloadConfigRequest).

        Models not named any more are dropped (requests holding one of their versions
        finish on it); new ones are added; a model whose base path changed starts anew.
        The versions the new policies want are loaded and warmed up first; version labels
        change last, and only if every label names a version that is then available, as
        TF Serving requires: otherwise FAILED_PRECONDITION and the labels stay as they were.
        """
        names = [config.name for config in configs]
        if not names or len(set(names)) != len(names):
            raise ServingError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"a reloaded config must name each model once, got {names or 'none'}",
            )
        async with self._polling:
            updated, labels = {}, {}
            for config in configs:
                entry = self.models.get(config.name)
                unlabelled = model_server_config_pb2.ModelConfig()
                unlabelled.CopyFrom(config)
                unlabelled.ClearField("version_labels")
                if entry is None or entry.config.base_path != config.base_path:
                    entry = ModelEntry(unlabelled)
                else:
                    unlabelled.version_labels.update(entry.config.version_labels)
                    entry.config = unlabelled  # labels as they were, until checked
                updated[config.name] = entry
                labels[config.name] = dict(config.version_labels)
            self.models = updated
            self._on_change()
            await self._poll()
            problems = [
                f"label {label} of model {name} names version {version}, which is not "
                f"available (available: {self._available(self.models[name])})"
                for name, wanted in labels.items()
                for label, version in sorted(wanted.items())
                if version not in self.models[name].servables
            ]
            if problems:
                raise ServingError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    "version labels not changed: " + "; ".join(problems),
                )
            for name, wanted in labels.items():
                config = self.models[name].config
                config.ClearField("version_labels")
                config.version_labels.update(wanted)

    async def _poll(self) -> None:
        loop = asyncio.get_running_loop()
        for entry in self.models.values():
            on_disk = _versions_on_disk(entry.config.base_path)
            wanted = entry.wanted(on_disk)
            for version in sorted(wanted - set(entry.servables)):
                path = os.path.join(entry.config.base_path, str(version))
                fingerprint = await loop.run_in_executor(None, _fingerprint, path)
                previous = entry.statuses.get(version)
                if previous and previous.state == State.END and previous.fingerprint == fingerprint:
                    continue  # failed before and unchanged since: do not retry
                entry.statuses[version] = VersionStatus(State.LOADING, fingerprint=fingerprint)
                try:
                    servable = await loop.run_in_executor(
                        None, self._load_and_warm, entry.name, version, path
                    )
                except Exception as error:
                    message = f"failed to load version {version} from {path}: {_one_line(error)}"
                    log.error("%s: %s", entry.name, message)
                    entry.statuses[version] = VersionStatus(
                        State.END, UNKNOWN_ERROR, message, fingerprint
                    )
                    continue
                entry.servables[version] = servable  # swapped in: new requests get it
                entry.statuses[version] = VersionStatus(State.AVAILABLE, fingerprint=fingerprint)
                log.info("%s: version %d is available", entry.name, version)
                self._on_change()
            if any(v in entry.servables for v in wanted):
                for version in sorted(set(entry.servables) - wanted):
                    # Requests already holding this version finish on it.
                    del entry.servables[version]
                    entry.statuses[version] = VersionStatus(State.END)
                    log.info("%s: version %d unloaded", entry.name, version)
                    self._on_change()

    def _load_and_warm(self, name: str, version: int, path: str) -> Servable:
        servable = self._load(name, version, path)
        warmed = servable.warm_up() if hasattr(servable, "warm_up") else 0
        servable.warmed_up = warmed  # requests replayed before it took traffic
        log.info("%s: loaded version %d (%d warm-up requests)", name, version, warmed)
        return servable

    def any_available(self) -> bool:
        return any(entry.servables for entry in self.models.values())


def _one_line(error: BaseException) -> str:
    text = getattr(error, "message", None) or str(error) or type(error).__name__
    return " ".join(text.split())[:500]
