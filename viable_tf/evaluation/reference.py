"""The sine reproduction's numbers at the main job's setting (C = 5, K = 10), shipped with
the package as `sine_reference.json` (written by viable-sine-paper, docs/RESULTS.md), and
the lines viable-train prints to set a run's test MSE beside them."""

from __future__ import annotations

import importlib.resources
import json

REFERENCE_FILE = "sine_reference.json"  # shipped in this package, copied from --report_dir


def shipped_reference() -> dict | None:
    """The reference table shipped with the package (None if it is absent)."""
    resource = importlib.resources.files("viable_tf.evaluation") / REFERENCE_FILE
    if not resource.is_file():
        return None
    return json.loads(resource.read_text())


def reference_lines(record: dict, table: dict | None = None) -> list[str]:
    """Lines that set a sine run's test MSE beside the reproduction's at its setting
    (C = 5, K = 10, clean support sets); none for another setting or task family."""
    table = shipped_reference() if table is None else table
    hparams = record.get("hparams", {})
    setting = (hparams.get("context_dim"), hparams.get("num_support"), hparams.get("min_support"))
    corrupted = hparams.get("outliers", 0) or hparams.get("noise_std", 0.0)
    if table is None or record.get("metric") != "mse" or setting != (5, 10, 10) or corrupted:
        return []
    steps = table["setting"]["num_steps"]
    lines = [
        f"The reproduction at the same setting (C = 5, K = 10, {steps:,} meta-updates, "
        f"seed 0; docs/RESULTS.md):"
    ]
    this = f"{hparams.get('method')}_{hparams.get('activation')}"
    for key, row in table["rows"].items():
        if not key.startswith(("cavia", "relviable")):
            continue
        mark = "   <- this method" if key in (this, hparams.get("method")) else ""
        seeds = ", ".join(f"{m:.3f}" for m in row["seed_means"])
        lines.append(
            f"  {row['label']:<17} {row['mean']:.3f} +- {row['ci95']:.3f}  (seeds: {seeds}){mark}"
        )
    return lines
