"""Renders the results pages' tables from the records in results/records/.

Every reported figure is one JSON record, `results/records/<benchmark>/<setting>/<method>.json`
(method, setting, mean, CI, updates, command, commit, date, machine; each test task's
metric in `per_task` where a paired comparison needs it). A page marks where each table
goes with `<!-- results:NAME -->` ... `<!-- /results -->`; this script writes the tables
between the marks, from the records alone, and `--check` fails where a page and its
records disagree (tests/test_results.py runs it).

    python -m results.render            # rewrite the pages' tables
    python -m results.render --check    # exit 1 if a page is not what its records give
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
from dataclasses import dataclass, field

import numpy as np

from viable_tf.evaluation.statistics import mean_confidence_interval

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RECORDS = os.path.join(HERE, "records")
PAGES = ("docs/RESULTS.md", "docs/comparisons.md", "README.md", "docs/TESTING.md", "docs/images.md")
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
METRICS = ("mse", "accuracy", "claim", "seconds")
MARK = re.compile(
    r"(<!-- results:(?P<name>[a-z0-9_]+) -->\n)(?P<body>.*?)(<!-- /results -->)", re.S
)


def load(root: str = RECORDS) -> dict[tuple[str, str, str], dict]:
    """Every record under `root`, by (benchmark, setting, method); checks each one."""
    records = {}
    for path in sorted(glob.glob(os.path.join(root, "**", "*.json"), recursive=True)):
        with open(path) as f:
            record = json.load(f)
        problems = check(record, os.path.relpath(path, root))
        if problems:
            raise ValueError(f"{path}: " + "; ".join(problems))
        records[record["benchmark"], record["setting"], record["method"]] = record
    return records


#: What a figure quoted from a paper holds instead of a run's provenance.
PAPER_REQUIRED = {"benchmark": str, "setting": str, "method": str, "label": str, "citation": str}


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
        if not isinstance(value, kind):
            problems.append(f"{key} must be a {kind.__name__}, got {value!r}")
    if problems:
        return problems
    expected = os.path.join(record["benchmark"], record["setting"], record["method"] + ".json")
    if relpath != expected:
        problems.append(f"stored as {relpath}, expected {expected}")
    if record["metric"] not in METRICS:
        problems.append(f"metric must be one of {METRICS}, got {record['metric']!r}")
    if "per_task" in record:
        summary = mean_confidence_interval(record["per_task"])
        if abs(summary.mean - record["mean"]) > 1e-6:
            problems.append(f"mean {record['mean']} is not its per_task mean {summary.mean}")
        if abs(summary.ci95 - record.get("ci95", float("nan"))) > 1e-6:
            problems.append(f"ci95 {record.get('ci95')} is not its per_task CI {summary.ci95}")
    return problems


def figure(record: dict | None, *, ci: bool = True) -> str:
    """A record's cell: accuracy in percent with one decimal, MSE with three significant
    decimals; empty where there is no record."""
    if record is None:
        return ""
    if record["metric"] == "claim":
        return record["text"]
    if record["metric"] == "accuracy":
        mean, half = 100 * record["mean"], 100 * record.get("ci95", float("nan"))
        text = f"{mean:.1f}" + (f" ± {half:.1f}" if ci and "ci95" in record else "")
    else:
        mean, half = record["mean"], record.get("ci95", float("nan"))
        digits = 3 if mean >= 0.01 else 4
        text = f"{mean:.{digits}f}" + (f" ± {half:.{digits}f}" if ci and "ci95" in record else "")
    return text


def paired(a: dict, b: dict) -> str | None:
    """A - B over the same test tasks, mean ± 95% CI (points for accuracy), or None where
    either record lacks its per-task figures."""
    if "per_task" not in a or "per_task" not in b:
        return None
    x, y = np.asarray(a["per_task"]), np.asarray(b["per_task"])
    if x.shape != y.shape:
        raise ValueError(f"{a['method']} and {b['method']} are not on the same tasks")
    found = mean_confidence_interval(x - y)
    if a["metric"] == "accuracy":  # in points
        return f"{100 * found.mean:+.2f} ± {100 * found.ci95:.2f}"
    digits = 3 if abs(found.mean) >= 0.01 else 4
    return f"{found.mean:+.{digits}f} ± {found.ci95:.{digits}f}"


@dataclass
class Table:
    """Rows of methods by columns of settings, from one benchmark's records."""

    benchmark: str
    columns: list[tuple[str, str]]  # (setting, header)
    rows: list[str]  # method keys, in order
    corner: str = "method"
    best: str | None = None  # 'min' or 'max': the best cell of each column in bold
    extra: list[tuple[str, str, str]] = field(default_factory=list)  # (header, bench, setting)
    #: Rows that may have no record yet, by method: their label (the row says so).
    pending: dict[str, str] = field(default_factory=dict)

    def render(self, records: dict) -> str:
        head = [self.corner, *(h for _, h in self.columns), *(h for h, _, _ in self.extra)]
        lines = ["| " + " | ".join(head) + " |", "|---" + "|---:" * (len(head) - 1) + "|"]
        best = {setting: self._best(records, setting) for setting, _ in self.columns}
        used = []
        for method in self.rows:
            cells = []
            label = None
            for setting, _ in self.columns:
                record = records.get((self.benchmark, setting, method))
                if record is not None:
                    label = label or record["label"]
                    used.append(record)
                text = figure(record)
                cells.append(f"**{text}**" if text and best[setting] is record else text)
            for _, bench, setting in self.extra:
                record = records.get((bench, setting, method))
                if record is not None:
                    label = label or record["label"]
                    used.append(record)
                cells.append(figure(record))
            if label is None and method in self.pending and not any(cells):
                label, cells = self.pending[method], ["not yet measured"] + [""] * (len(cells) - 1)
            if label is None:
                raise ValueError(f"{self.benchmark}: no record of {method!r} in any column")
            lines.append("| " + " | ".join([label, *cells]) + " |")
        lines.append(provenance(used, len(head)))
        return "\n".join(lines) + "\n"

    def _best(self, records, setting):
        if self.best is None:
            return None
        found = [
            records[key]
            for key in ((self.benchmark, setting, m) for m in self.rows)
            if key in records and records[key]["metric"] != "claim"
        ]
        if not found:
            return None
        pick = min if self.best == "min" else max
        return pick(found, key=lambda r: r["mean"])


@dataclass
class Paired:
    """Rows of paired differences A - B over the same test tasks."""

    rows: list[tuple[str, str, str, str]]  # (benchmark, setting, method A, method B)
    pending: bool = False  # rows whose records do not exist yet are left out

    def render(self, records: dict) -> str:
        lines = [
            "| setting | A | B | A | B | A - B, paired |",
            "|---|---|---|---:|---:|---:|",
        ]
        used = []
        for bench, setting, a_key, b_key in self.rows:
            a, b = records.get((bench, setting, a_key)), records.get((bench, setting, b_key))
            if a is None or b is None:
                if not self.pending:
                    raise ValueError(
                        f"no record of {bench}/{setting}/{a_key if a is None else b_key}"
                    )
                continue  # a run still in training: its row comes with its record
            used += [a, b]
            difference = paired(a, b) or "no per-task record"
            lines.append(
                f"| {setting} | {a['label']} | {b['label']} | {figure(a)} | {figure(b)} "
                f"| {difference} |"
            )
        lines.append(provenance(used, 6))
        return "\n".join(lines) + "\n"


@dataclass
class Verdicts:
    """One line per claim: the verdict and the measured figures that give it, read from
    the records: `figures` are (benchmark, setting, method) cells shown as 'A vs B' or a
    paired difference ('paired', bench, setting, method A, method B)."""

    rows: list[tuple[str, str, list[tuple], str]]  # (claim, verdict, figures, link)

    def render(self, records: dict) -> str:
        lines = ["| question | answer | measured | detail |", "|---|---|---|---|"]
        used = []
        for claim, verdict, figures, link in self.rows:
            shown = []
            for ref in figures:
                if ref[0] == "paired":
                    _, bench, setting, a_key, b_key = ref
                    a, b = records[bench, setting, a_key], records[bench, setting, b_key]
                    used += [a, b]
                    difference = paired(a, b) or "no per-task record"
                    shown.append(f"{a['label']} - {b['label']}, {setting}: {difference} paired")
                else:
                    record = records[ref]
                    used.append(record)
                    shown.append(f"{record['label']} {figure(record, ci=False)}")
            lines.append(f"| {claim} | **{verdict}** | {'; '.join(shown)} | {link} |")
        lines.append(provenance(used, 4))
        return "\n".join(lines) + "\n"


def provenance(records: list[dict], width: int) -> str:
    """The footnote row: where the figures come from."""
    measured = [r for r in records if r["metric"] != "claim" and r.get("source") != "paper"]
    commits = sorted({r["commit"] for r in measured})
    dates = sorted({r["date"] for r in measured})
    machines = sorted({r["machine"] for r in measured})
    if measured:
        when = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
        text = (
            f"records in results/records/; commits {', '.join(commits)}; {when}; "
            f"{'; '.join(machines)}"
        )
    elif records:
        text = "the paper's figures, quoted: results/records/paper_*/"
    else:
        text = "no record yet"
    return "| *source* | " + text + " |" + " |" * (width - 2)


def _sine(rows, columns, extra=()):
    return Table("sine", columns, rows, best="min", extra=list(extra))


SINE_ROWS = [
    "maml",
    "cavia",
    "simviable_relu",
    "simviable_tanh",
    "relviable_relu",
    "relviable_tanh",
]
PAPER_C5 = [("the paper, C = 5", "paper_sine", "C5_K10")]
FROZEN_ROWS = [
    "cavia",
    "cavia_proto",
    "cavia_cosine",
    "simviable",
    "simviable_proto",
    "simviable_cosine",
    "relviable_proto",
    "attviable_proto",
    "maml_proto",
    "maml_simviable_proto",
    "nearest_class_mean",
]
WAYS = [
    ("5way1shot", "5-way 1-shot"),
    ("5way5shot", "5-way 5-shot"),
    ("20way1shot", "20-way 1-shot"),
]
#: The paper's comparators on the image protocol (method §10), with their row labels
#: while they train.
COMPARATORS = {
    "metasgd_cavia": "Meta-SGD on CAVIA",
    "metasgd_simviable": "simVIABLE at Meta-SGD's step",
    "metasgd_maml": "Meta-SGD on MAML",
    "matching": "Matching Networks",
    "matching_tau": "Matching Networks, cosine / 0.1",
    "matching_fce": "Matching Networks, full context embeddings",
    "matching_fce_tau": "Matching Networks, full context embeddings, cosine / 0.1",
    "r2d2": "R2-D2 (ridge head)",
    "metaoptnet_svm": "MetaOptNet-SVM",
}
IMAGE_ROWS = [
    "protonet",
    "cavia",
    "simviable",
    "relviable",
    "relviable_tanh64",
    "maml",
    "maml_simviable",
    "simviable_residual",
    "relviable_tanh64_residual",
    "cavia_proto",
    "simviable_proto",
    "cavia_stepped",
    "simviable_stepped_residual",
    "relviable_stepped_residual",
    *COMPARATORS,
    "nearest_class_mean",
]
E2E = "omniglot_images"
#: Sine runs of one commit with their per-task MSEs, for paired comparisons.
SP = "sine_paired"
#: The relation network's candidate options (lab/sine_candidates.py): method suffix, label.
CANDIDATES = {
    "": "",
    "_set_readout": ", set-level readout",
    "_loss_mean": ", task loss as the set's mean",
    "_loss_both": ", task loss per point and the set's mean",
}

TABLES = {
    "sine_by_context": _sine(
        SINE_ROWS, [(f"C{c}_K10_seed0", f"C = {c}") for c in range(1, 6)], PAPER_C5
    ),
    "sine_by_support": _sine(
        [
            "cavia",
            "simviable_relu",
            "simviable_tanh",
            "relviable_relu",
            "relviable_tanh",
            "relviable_tanh_loss_mean",
        ],
        [(f"vark_K{k}_seed0", f"K = {k}") for k in (0, 1, 2, 3, 4, 20)],
        [("the paper", "paper_sine", "vark")],
    ),
    "sine_seeds": _sine(
        [
            *SINE_ROWS[1:],
            "relviable_tanh_100k",
            "attviable",
            "maml_plain",
            "maml_simviable",
            "maml_relviable",
        ],
        [(f"C5_K10_seed{s}", f"seed {s}") for s in (0, 1, 2)],
        PAPER_C5,
    ),
    "frozen_features": Table("omniglot_features", WAYS, FROZEN_ROWS, best="max"),
    "leo": Table(
        "omniglot_features_leo",
        WAYS,
        [
            "leo",
            "leo_simviable",
            "leo_relviable",
            "cavia_proto",
            "maml_proto",
            "nearest_class_mean",
        ],
        best="max",
    ),
    "images": Table(E2E, WAYS, IMAGE_ROWS, best="max", pending=COMPARATORS),
    # The end-to-end protocol on its earlier data (LEO-format pickles of l2-normalised
    # pixels) beside Omniglot read as an image folder (its form now): other episodes of
    # the same protocol, so CIs, not pairs.
    "image_folder_route": Table(
        E2E,
        [("5way1shot", "5-way 1-shot, l2-normalised pixels (earlier form)")],
        ["protonet", "cavia"],
        extra=[("5-way 1-shot, as an image folder", "omniglot_image_folder", "5way1shot")],
    ),
    "images_paired": Paired(
        [
            (E2E, "5way5shot", "simviable", "cavia"),
            (E2E, "5way5shot", "relviable_tanh64", "cavia"),
            (E2E, "5way5shot", "simviable_proto", "protonet"),
            (E2E, "5way1shot", "maml_simviable", "maml"),
            (E2E, "5way5shot", "maml_simviable", "maml"),
            (E2E, "20way1shot", "maml_simviable", "maml"),
            (E2E, "5way1shot", "simviable_proto", "cavia_proto"),
            (E2E, "20way1shot", "relviable_tanh64_residual", "cavia"),
            (E2E, "20way1shot", "simviable_residual", "cavia"),
            (E2E, "20way1shot", "simviable_stepped_residual", "cavia_stepped"),
            (E2E, "20way1shot", "relviable_stepped_residual", "cavia_stepped"),
        ]
    ),
    "images_comparators_paired": Paired(
        [
            (E2E, setting, a, b)
            for setting in ("5way1shot", "5way5shot", "20way1shot")
            for a, b in (
                ("r2d2", "protonet"),
                ("metaoptnet_svm", "protonet"),
                ("metaoptnet_svm", "r2d2"),
                ("metaoptnet_svm_normalized", "metaoptnet_svm"),
                ("matching", "protonet"),
                ("matching_tau", "protonet"),
                ("matching_fce", "matching"),
                ("matching_fce", "protonet"),
                ("matching_fce_tau", "matching_fce"),
                ("matching_tau", "matching"),
                ("matching_fce_tau", "matching_tau"),
                ("matching_fce_tau", "protonet"),
                ("r2d2", "matching_fce_tau"),
                ("metasgd_cavia", "cavia"),
                ("simviable", "metasgd_cavia"),
                ("metasgd_simviable", "simviable"),
                ("metasgd_simviable", "metasgd_cavia"),
                ("relviable_tanh64_residual", "metasgd_cavia"),
                ("metasgd_maml", "maml"),
                ("maml_simviable", "metasgd_maml"),
                ("metasgd_maml", "simviable"),
                ("maml_simviable", "metaoptnet_svm"),
                ("simviable", "metaoptnet_svm"),
            )
        ],
        pending=True,
    ),
    "sine_step_by_context": _sine(
        ["maml", "metasgd_maml", "cavia", "metasgd_cavia", "relviable_tanh"],
        [(f"C{c}_K10_seed0", f"C = {c}") for c in range(1, 6)],
        PAPER_C5,
    ),
    "sine_step_by_support": _sine(
        ["maml_plain", "metasgd_maml", "cavia", "metasgd_cavia", "relviable_tanh"],
        [(f"vark_K{k}_seed0", f"K = {k}") for k in (0, 1, 2, 3, 4, 20)],
        [("the paper", "paper_sine", "vark")],
    ),
    "sine_step": Table(
        SP,
        [(f"C5_K10_seed{s}", f"seed {s}") for s in (0, 1, 2)],
        ["cavia", "metasgd_cavia", "maml", "metasgd_maml", "relviable_tanh", "metasgd_relviable"],
        best="min",
        pending={
            "cavia": "CAVIA",
            "metasgd_cavia": "Meta-SGD on CAVIA",
            "maml": "MAML, C = 5",
            "metasgd_maml": "Meta-SGD on MAML, C = 5",
            "relviable_tanh": "relVIABLE (tanh)",
            "metasgd_relviable": "relVIABLE (tanh) at Meta-SGD's step",
        },
    ),
    "sine_step_paired": Paired(
        [
            (SP, f"C5_K10_seed{s}", a, b)
            for s in (0, 1, 2)
            for a, b in (
                ("metasgd_cavia", "cavia"),
                ("relviable_tanh", "metasgd_cavia"),
                ("metasgd_relviable", "relviable_tanh"),
                ("metasgd_maml", "maml"),
            )
        ],
        pending=True,
    ),
    "sine_candidates": Table(
        SP,
        [(f"C5_K10_seed{s}", f"seed {s}") for s in (0, 1, 2)],
        [f"relviable_{act}{c}" for act in ("tanh", "relu") for c in CANDIDATES],
        best="min",
        pending={
            f"relviable_{act}{c}": f"relVIABLE ({act}){label}"
            for act in ("tanh", "relu")
            for c, label in CANDIDATES.items()
        },
    ),
    "sine_candidates_paired": Paired(
        [
            (SP, f"C5_K10_seed{s}", f"relviable_{act}{c}", f"relviable_{act}")
            for act in ("tanh", "relu")
            for c in list(CANDIDATES)[1:]
            for s in (0, 1, 2)
        ],
        pending=True,
    ),
    "paper_classification": Table(
        "paper_miniimagenet",
        [("5way1shot", "5-way 1-shot"), ("5way5shot", "5-way 5-shot")],
        ["matching", "maml", "metasgd_maml", "leo", "metaoptnet_svm", "relviable_tanh64"],
        corner="the paper's table (Mini-ImageNet, LEO's features for Meta-SGD and LEO)",
    ),
    "sine_outliers": Table(
        "sine_outliers",
        [
            ("m2_K10_steps1", "one inner step (the paper's)"),
            ("m2_K10_steps1_oracle", "its oracle"),
            ("m2_K10_steps3", "three inner steps"),
            ("m2_K10_steps3_tested_clean", "three steps, tested clean"),
        ],
        [
            "cavia",
            "cavia_huber",
            "relviable",
            "attviable",
            "relviable_agreement",
            "attviable_agreement",
        ],
        corner="trained and tested with 2 outliers of 10",
        best="min",
    ),
}


def peer_rate(rate: int | list[int] | None) -> str:
    """The JAX peer's rate as measured beside a suite's run: once, or before and after it."""
    if rate is None:
        return "not measured"
    if isinstance(rate, list):
        before, after = rate
        return f"{before:,} before, {after:,} after"
    return f"{rate:,}"


@dataclass
class SuiteTimes:
    """The README's test command timed from fresh clones: one row per record of the
    'test_suite' benchmark, newest first, with the JAX sine peer's rate on the machine."""

    def render(self, records: dict) -> str:
        rows = sorted(
            (r for (bench, _, _), r in records.items() if bench == "test_suite"),
            # Runs of one day by when they started (`started`, UTC), where recorded.
            key=lambda r: (r["date"], r.get("started", ""), r["commit"]),
            reverse=True,
        )
        lines = [
            "| date | commit | machine | wall-clock | JAX sine peer (CAVIA updates/s) | result |",
            "|---|---|---|---:|---:|---|",
        ]
        for r in rows:
            minutes, seconds = divmod(round(r["mean"]), 60)
            rate = peer_rate(r.get("jax_peer_rate"))
            lines.append(
                f"| {r['date']} | {r['commit']} | {r['machine']} | {minutes} min {seconds} s "
                f"| {rate} | {r['result']} |"
            )
        return "\n".join(lines) + "\n"


def render_page(text: str, records: dict, tables: dict = TABLES) -> str:
    """`text` with the body of every results mark rewritten from the records."""

    def replace(match: re.Match) -> str:
        name = match.group("name")
        if name not in tables:
            raise ValueError(f"no table named {name!r} (known: {sorted(tables)})")
        return match.group(1) + tables[name].render(records) + match.group(4)

    return MARK.sub(replace, text)


def main(argv: list[str] | None = None) -> int:
    from results.verdicts import GLANCE, VERDICTS

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if a page is out of date")
    args = parser.parse_args(argv)
    records = load()
    tables = {**TABLES, "verdicts": VERDICTS, "glance": GLANCE, "suite_time": SuiteTimes()}
    stale = []
    for page in PAGES:
        path = os.path.join(REPO, page)
        with open(path) as f:
            text = f.read()
        rendered = render_page(text, records, tables)
        if rendered != text:
            stale.append(page)
            if not args.check:
                with open(path, "w") as f:
                    f.write(rendered)
    if args.check and stale:
        print(
            f"out of date with results/records/: {', '.join(stale)} "
            "(run: python -m results.render)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
