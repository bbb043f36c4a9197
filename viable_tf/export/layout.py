"""The files of an export, by name: what `viable-export` writes and `viable-serve` (or TF
Serving) reads. Plain Python, so the server names them without importing the exporter.

    BASE/<version>/saved_model.pb, variables/
    BASE/<version>/assets.extra/tf_serving_warmup_requests   warm-up requests (TF Serving's)
    BASE/<version>/assets.extra/viable_model.json            what the model is
    BASE/<version>/assets.extra/operative_config.gin         the run's gin config
"""

from __future__ import annotations

import os

SAVED_MODEL_FILE = "saved_model.pb"
ASSETS_EXTRA = "assets.extra"
WARMUP_FILE = "tf_serving_warmup_requests"
METADATA_FILE = "viable_model.json"
CONFIG_FILE = "operative_config.gin"


def asset(version_dir: str, name: str) -> str:
    """The path of `name` in a version's assets.extra/."""
    return os.path.join(version_dir, ASSETS_EXTRA, name)


def version_folders(export_base: str) -> list[int]:
    """The numeric version folders under `export_base`, ascending ([] if there is none)."""
    try:
        names = os.listdir(export_base)
    except OSError:
        return []
    return sorted(
        int(name)
        for name in names
        if name.isdigit() and os.path.isdir(os.path.join(export_base, name))
    )


def next_version(export_base: str) -> int:
    """One more than the highest version folder under `export_base` (1 if none)."""
    return max(version_folders(export_base), default=0) + 1
