"""The results records: one JSON file a reported figure,
`results/records/<benchmark>/<setting>/<method>.json`, read and checked.

A run's record holds method, setting, label, metric, mean (and ci95), its updates, the
`command` that reruns the cell on today's code (results/commands.py), the shipped
`config` it trains, the commit, date and machine it was measured on, and each test task's
figure in `per_task` where a paired comparison needs it. Where the cell was measured by an
older command, `measured_with` keeps it with its commit; where it was measured on an
earlier form of its data than the command reads today, `data_form` names that form (its
test tasks are not today's, so it pairs only with records of the same form). Where its
training loss jumped (lab/e2e_status.py's rule) or it collapsed to chance after the
weights its figure is from, the run never passing them again, `setback` says what and
when (lab/records.py writes it). A figure quoted from a paper has `"source": "paper"`
and a citation instead of a run's provenance.
"""

from __future__ import annotations

import glob
import json
import os

from viable_tf.evaluation.statistics import mean_confidence_interval

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RECORDS = os.path.join(HERE, "records")
REQUIRED = {
    "benchmark": str,
    "setting": str,
    "method": str,
    "label": str,
    "metric": str,
    "mean": float,
    "command": str,
    "commit": str,
    "date": str,
    "machine": str,
}
#: What a figure quoted from a paper holds instead of a run's provenance.
PAPER_REQUIRED = {"benchmark": str, "setting": str, "method": str, "label": str, "citation": str}
METRICS = ("mse", "accuracy", "claim", "seconds")

Key = tuple[str, str, str]  # (benchmark, setting, method)


def load(root: str = RECORDS) -> dict[Key, dict]:
    """Every record under `root`, by (benchmark, setting, method); checks each one and
    keeps where it is stored (`_path`, relative to the repository)."""
    records = {}
    for path in sorted(glob.glob(os.path.join(root, "**", "*.json"), recursive=True)):
        with open(path) as f:
            record = json.load(f)
        problems = check(record, os.path.relpath(path, root))
        if problems:
            raise ValueError(f"{path}: " + "; ".join(problems))
        record["_path"] = os.path.relpath(path, REPO) if root == RECORDS else path
        records[record["benchmark"], record["setting"], record["method"]] = record
    return records


def check(record: dict, relpath: str) -> list[str]:
    """What is wrong with one record (empty: nothing)."""
    problems = []
    required = dict(PAPER_REQUIRED if record.get("source") == "paper" else REQUIRED)
    if record.get("metric") == "claim":
        required.pop("mean", None)
        required["text"] = str
    for key, kind in required.items():
        value = record.get(key)
        if kind is float and isinstance(value, int):
            value = float(value)
        if not isinstance(value, kind) or (kind is str and not value):
            problems.append(f"{key} must be a non-empty {kind.__name__}, got {value!r}")
    if problems:
        return problems
    expected = os.path.join(record["benchmark"], record["setting"], record["method"] + ".json")
    if relpath != expected:
        problems.append(f"stored as {relpath}, expected {expected}")
    for optional in ("data_form", "setback"):
        if optional in record and not (isinstance(record[optional], str) and record[optional]):
            problems.append(f"{optional} must be a non-empty str, got {record[optional]!r}")
    if record["metric"] not in METRICS:
        problems.append(f"metric must be one of {METRICS}, got {record['metric']!r}")
    if "per_task" in record:
        summary = mean_confidence_interval(record["per_task"])
        if abs(summary.mean - record["mean"]) > 1e-6:
            problems.append(f"mean {record['mean']} is not its per_task mean {summary.mean}")
        if abs(summary.ci95 - record.get("ci95", float("nan"))) > 1e-6:
            problems.append(f"ci95 {record.get('ci95')} is not its per_task CI {summary.ci95}")
    return problems


def measured(record: dict) -> bool:
    """Whether a record is a run of ours (not a paper's figure, not a claim)."""
    return record.get("source") != "paper" and record["metric"] != "claim"
