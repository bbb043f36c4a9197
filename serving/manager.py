"""The version lifecycle: the manager that finds, loads, swaps and reports the versions
of every configured model.

The manager polls each model's base path for numeric version folders, loads the
versions its policy wants (latest N by default, or specific ones, or all), warms
each up (servable.py) before it takes traffic, then swaps it in. A request holds a
reference to the version that serves it, so a swap never drops a request in flight. A
version that fails to load is reported in its status (state END with the error) while
the versions already loaded keep serving; it is tried again only when its folder changes.

All state changes happen on the event loop's thread; loading runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc
from tensorflow_serving.apis import get_model_status_pb2
from tensorflow_serving.config import model_server_config_pb2

from serving.errors import ServingError, not_found
from serving.servable import Servable
from viable_tf.export import layout
from viable_tf.logs import one_line

log = logging.getLogger("viable_serve")

State = get_model_status_pb2.ModelVersionStatus.State
UNKNOWN_ERROR = 2  # tensorflow.error.Code.UNKNOWN


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


def _labelled_version(entry: ModelEntry, label: str, *, name_labels: bool = True) -> int:
    """The version a label names; INVALID_ARGUMENT for a label the model does not have
    (naming the labels it has, unless `name_labels` is False: TF Serving's own text)."""
    labels = dict(entry.config.version_labels)
    if label not in labels:
        known = f" (model {entry.name} has labels: {', '.join(sorted(labels)) or 'none'})"
        raise ServingError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"Unrecognized servable version label: {label}" + (known if name_labels else ""),
        )
    return labels[label]


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
            version = _labelled_version(entry, label)
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
            version = _labelled_version(entry, label, name_labels=False)
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
            on_disk = layout.version_folders(entry.config.base_path)
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
                    said = one_line(error, whole=True, limit=500)
                    message = f"failed to load version {version} from {path}: {said}"
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
                    gc.unfreeze()  # its objects can be collected again (see _load_and_warm)
                    gc.collect()
                    gc.freeze()
                    entry.statuses[version] = VersionStatus(State.END)
                    log.info("%s: version %d unloaded", entry.name, version)
                    self._on_change()

    def _load_and_warm(self, name: str, version: int, path: str) -> Servable:
        servable = self._load(name, version, path)
        warmed = servable.warm_up() if hasattr(servable, "warm_up") else 0
        servable.warmed_up = warmed  # requests replayed before it took traffic
        log.info("%s: loaded version %d (%d warm-up requests)", name, version, warmed)
        # The loaded model's many long-lived objects leave Python's cyclic collector's
        # rounds: else a request that allocates many containers (a REST body of images as
        # nested lists: 110,000 lists) pays full collections over them, 400 ms instead of
        # 27 ms for five drawings (benchmarks/image_serving_latency.py).
        gc.freeze()
        return servable

    def any_available(self) -> bool:
        return any(entry.servables for entry in self.models.values())
