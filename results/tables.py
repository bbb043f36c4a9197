"""The kinds of table the results pages hold, each rendered from the records alone: a
method-by-setting table (`Table`), paired differences (`Paired`), verdicts (`Verdicts`)
and the suite's times (`SuiteTimes`); and how a cell is written. A verdict's side is a
record's key, or a choice the records make when the page is rendered (`Best`).

Every kind refuses a cell over CELL_LIMIT characters, and a verdict's answer outside its
vocabulary: a page is read at a glance or not at all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from results.records import Key, measured
from viable_tf.evaluation.statistics import mean_confidence_interval

#: The longest cell a table may hold (characters, links included).
CELL_LIMIT = 120
#: A comparison's answer, computed from its figures (`answer` below).
ANSWERS = ("helps", "no gain", "hurts", "not measured")
#: A claim of the paper, against what was measured here (typed, from this vocabulary).
CLAIM_ANSWERS = ("holds", "holds in kind, not in size", "does not hold", "not measured")
#: Follows a figure measured on an earlier form of its data (a record's `data_form`).
EARLIER_FORM = "†"
#: Follows a figure whose training had a setback on the way (a record's `setback`).
SETBACK = "‡"


def figure(record: dict | None, *, ci: bool = True) -> str:
    """A record's cell: accuracy in percent with one decimal, MSE with three significant
    decimals, EARLIER_FORM after it where it was measured on an earlier form of its data
    and SETBACK where its training had a setback; empty where there is no record."""
    if record is None:
        return ""
    if record["metric"] == "claim":
        return record["text"]
    if record["metric"] == "accuracy":
        mean, half = 100 * record["mean"], 100 * record.get("ci95", float("nan"))
        digits = 1
    else:
        mean, half = record["mean"], record.get("ci95", float("nan"))
        digits = 3 if mean >= 0.01 else 4
    text = f"{mean:.{digits}f}" + (f" ± {half:.{digits}f}" if ci and "ci95" in record else "")
    text += f" {EARLIER_FORM}" if "data_form" in record else ""
    return text + (f" {SETBACK}" if "setback" in record else "")


def same_tasks(a: dict, b: dict) -> bool:
    """Whether two records' per-task figures are on the same test tasks: both have them,
    measured on the same form of the data (an earlier form draws other tasks from the
    same seed)."""
    return "per_task" in a and "per_task" in b and a.get("data_form") == b.get("data_form")


def difference(a: dict, b: dict):
    """A - B over the same test tasks, as (mean, 95% half-width), or None where the two
    are not on the same test tasks (`same_tasks`)."""
    if not same_tasks(a, b):
        return None
    x, y = np.asarray(a["per_task"]), np.asarray(b["per_task"])
    if x.shape != y.shape:
        raise ValueError(f"{a['method']} and {b['method']} are not on the same tasks")
    found = mean_confidence_interval(x - y)
    return found.mean, found.ci95


def paired(a: dict, b: dict) -> str | None:
    """A - B over the same test tasks, mean ± 95% CI (points for accuracy), or None where
    the two are not on the same test tasks."""
    found = difference(a, b)
    if found is None:
        return None
    mean, half = found
    if a["metric"] == "accuracy":  # in points
        return f"{100 * mean:+.2f} ± {100 * half:.2f}"
    digits = 3 if abs(mean) >= 0.01 else 4
    return f"{mean:+.{digits}f} ± {half:.{digits}f}"


def unpaired(a: dict, b: dict) -> str:
    """A's mean minus B's, where the two are not on the same test tasks."""
    delta = a["mean"] - b["mean"]
    if a["metric"] == "accuracy":
        return f"{100 * delta:+.1f}, unpaired"
    return f"{delta:+.3f}, unpaired"


def answer(ours: dict, base: dict) -> str:
    """helps / no gain / hurts: the paired difference's CI wholly on one side of zero, or
    where the two are not on the same test tasks, the two CIs apart; the better side by
    metric."""
    lower_is_better = ours["metric"] == "mse"
    found = difference(ours, base)
    if found is not None:
        low, high = found[0] - found[1], found[0] + found[1]
    else:
        if "ci95" not in ours or "ci95" not in base:
            raise ValueError(f"{ours['method']} - {base['method']}: no CI to compare")
        low = ours["mean"] - ours["ci95"] - base["mean"] - base["ci95"]
        high = ours["mean"] + ours["ci95"] - base["mean"] + base["ci95"]
    if low <= 0 <= high:
        return "no gain"
    better = high < 0 if lower_is_better else low > 0
    return "helps" if better else "hurts"


def setting_name(key: str) -> str:
    """A setting's key as a reader names it: `5way1shot` as 5-way 1-shot, `C5_K10_seed0`
    as seed 0 (the sine protocol's C = 5, K = 10), `C5_K10_S5_seed0` as 5 steps, seed 0."""
    ways = re.fullmatch(r"(\d+)way(\d+)shot", key)
    if ways:
        return f"{ways.group(1)}-way {ways.group(2)}-shot"
    sine = re.fullmatch(r"C(\d+)_K(\d+)_seed(\d+)", key)
    if sine:
        c, k, seed = sine.groups()
        return f"seed {seed}" if (c, k) == ("5", "10") else f"C = {c}, K = {k}, seed {seed}"
    steps = re.fullmatch(r"C5_K10_S(\d+)_seed(\d+)", key)
    if steps:
        return f"{steps.group(1)} steps, seed {steps.group(2)}"
    return key


def checked_row(cells: list[str], where: str) -> str:
    """One Markdown row, refused where a cell is over CELL_LIMIT characters."""
    for cell in cells:
        if len(cell) > CELL_LIMIT:
            raise ValueError(
                f"{where}: a cell of {len(cell)} characters (limit {CELL_LIMIT}): {cell[:60]}..."
            )
    return "| " + " | ".join(cells) + " |"


@dataclass
class Table:
    """Rows of methods by columns of settings, from one benchmark's records."""

    benchmark: str
    columns: list[tuple[str, str]]  # (setting, header)
    rows: list[str]  # method keys, in order
    corner: str = "method"
    best: str | None = None  # 'min' or 'max': the best cell of each column in bold
    extra: list[tuple[str, str, str]] = field(default_factory=list)  # (header, bench, setting)

    def cells(self, records: dict) -> list[dict]:
        """The records this table shows."""
        keys = [(self.benchmark, s, m) for m in self.rows for s, _ in self.columns]
        keys += [(bench, s, m) for m in self.rows for _, bench, s in self.extra]
        return [records[k] for k in keys if k in records]

    def render(self, records: dict) -> str:
        head = [self.corner, *(h for _, h in self.columns), *(h for h, _, _ in self.extra)]
        lines = ["| " + " | ".join(head) + " |", "|---" + "|---:" * (len(head) - 1) + "|"]
        best = {setting: self._best(records, setting) for setting, _ in self.columns}
        for method in self.rows:
            cells, label = [], None
            for setting, _ in self.columns:
                record = records.get((self.benchmark, setting, method))
                label = label or (record or {}).get("label")
                text = figure(record)
                cells.append(f"**{text}**" if text and best[setting] is record else text)
            for _, bench, setting in self.extra:
                record = records.get((bench, setting, method))
                label = label or (record or {}).get("label")
                cells.append(figure(record))
            if label is None:
                raise ValueError(f"{self.benchmark}: no record of {method!r} in any column")
            lines.append(checked_row([label, *cells], self.benchmark))
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
    #: Leave out a pair whose records do not both exist (a grid of pairs by setting where
    #: not every method was run at every setting); else a missing record is an error.
    sparse: bool = False

    def present(self, records: dict) -> list[tuple[str, str, str, str]]:
        return [
            (b, s, x, y)
            for b, s, x, y in self.rows
            if not self.sparse or ((b, s, x) in records and (b, s, y) in records)
        ]

    def cells(self, records: dict) -> list[dict]:
        return [records[(b, s, m)] for b, s, x, y in self.present(records) for m in (x, y)]

    def render(self, records: dict) -> str:
        lines = [
            "| setting | A | B | A | B | A - B, paired |",
            "|---|---|---|---:|---:|---:|",
        ]
        for bench, setting, a_key, b_key in self.present(records):
            a, b = records.get((bench, setting, a_key)), records.get((bench, setting, b_key))
            if a is None or b is None:
                raise ValueError(f"no record of {bench}/{setting}/{a_key if a is None else b_key}")
            shown = setting_name(setting)
            cells = [shown, a["label"], b["label"], figure(a), figure(b)]
            lines.append(checked_row([*cells, paired(a, b) or unpaired(a, b)], bench))
        return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Best:
    """A verdict's side chosen by the records: of one benchmark's methods at one setting
    whose key names `naming`, the record with the best mean (the highest accuracy, the
    lowest MSE). A record trained again, higher or lower, moves the row with it."""

    benchmark: str
    setting: str
    naming: str

    def key(self, records: dict) -> Key:
        found = [
            k
            for k, r in records.items()
            if k[:2] == (self.benchmark, self.setting)
            and self.naming in k[2]
            and r["metric"] in ("mse", "accuracy")
        ]
        if not found:
            raise ValueError(f"no record of a method naming {self.naming!r} at {self.setting}")
        pick = min if records[found[0]]["metric"] == "mse" else max
        return pick(sorted(found), key=lambda k: records[k]["mean"])


def resolved(key: Key | Best | None, records: dict) -> Key | None:
    """A verdict's side as a record's key: `Best` chosen from `records`, a key as it is."""
    return key.key(records) if isinstance(key, Best) else key


@dataclass(frozen=True)
class Verdict:
    """One row of a verdict table: a question at one setting, our figure against its base.

    A comparison's answer is computed (`answer`); a claim of the paper (`claim` set) is
    answered from CLAIM_ANSWERS, beside the ratio of the two figures where `ratio`; a row
    without `ours` is 'not measured'."""

    question: str
    setting: str  # as shown: a Markdown link to the table holding its cells
    ours: Key | Best | None = None
    base: Key | Best | None = None
    paper: str = ""  # the paper's figure for this row, quoted
    claim: str | None = None
    ratio: bool = False  # a claim on sizes: base / ours in the difference column


@dataclass
class Verdicts:
    """`question | setting | ours | base | difference | paper | answer`, one figure a cell;
    a question's later rows leave its cell empty."""

    rows: list[Verdict]
    HEAD = ("question", "setting", "ours", "base", "difference", "paper", "answer")

    def cells(self, records: dict) -> list[dict]:
        return [records[k] for row in self.rows for k in self.sides(row, records) if k]

    @staticmethod
    def sides(row: Verdict, records: dict) -> tuple[Key | None, Key | None]:
        """The keys of the row's two records (`Best` chosen from `records`)."""
        return resolved(row.ours, records), resolved(row.base, records)

    def render(self, records: dict) -> str:
        lines = ["| " + " | ".join(self.HEAD) + " |", "|---|---|---|---|---:|---|---|"]
        previous = None
        for row in self.rows:
            cells = self.row_cells(row, records)
            if row.question == previous:
                cells[0] = ""
            previous = row.question
            lines.append(checked_row(cells, f"verdict {row.question!r}"))
        return "\n".join(lines) + "\n"

    @staticmethod
    def row_cells(row: Verdict, records: dict) -> list[str]:
        if row.ours is None:
            answer_ = row.claim or "not measured"
            if answer_ not in CLAIM_ANSWERS:
                raise ValueError(f"{row.question!r}: answer {answer_!r} not in {CLAIM_ANSWERS}")
            return [row.question, row.setting, "", "", "", row.paper, f"**{answer_}**"]
        ours, base = (records[k] for k in Verdicts.sides(row, records))
        if row.claim is not None:
            if row.claim not in CLAIM_ANSWERS:
                raise ValueError(f"{row.question!r}: answer {row.claim!r} not in {CLAIM_ANSWERS}")
            verdict = row.claim
        else:
            verdict = answer(ours, base)
        if row.ratio:
            shown = f"{base['mean'] / ours['mean']:.1f}x lower"
        else:
            shown = paired(ours, base)
            shown = f"{shown} paired" if shown else unpaired(ours, base)
        return [
            row.question,
            row.setting,
            f"{ours['label']} {figure(ours)}",
            f"{base['label']} {figure(base)}",
            shown,
            row.paper,
            f"**{verdict}**",
        ]


@dataclass
class Costs:
    """What a run of each method took: its accuracy, meta-updates to the patience rule's
    stop, and training wall-clock, from one benchmark's records at one setting."""

    benchmark: str
    setting: str
    rows: list[str]

    def cells(self, records: dict) -> list[dict]:
        return [records[(self.benchmark, self.setting, m)] for m in self.rows]

    def render(self, records: dict) -> str:
        lines = [
            "| config | test accuracy | meta-updates | training on 2 cores | machine |",
            "|---|---:|---:|---:|---|",
        ]
        for r in self.cells(records):
            hours = f"{r['wall_clock_seconds'] / 3600:.1f} h" if "wall_clock_seconds" in r else ""
            cells = [f"`{r['config']}`", figure(r), f"{r['updates']:,}", hours, r["machine"]]
            lines.append(checked_row(cells, self.benchmark))
        return "\n".join(lines) + "\n"


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
    """A test command timed: one row per record of the 'test_suite' benchmark at `setting`
    (the README's test command from a fresh clone, or the fast tier in a set-up checkout),
    newest first, with the JAX sine peer's rate on the machine."""

    setting: str = "fresh_clone"

    def cells(self, records: dict) -> list[dict]:
        return sorted(
            (
                r
                for (bench, s, _), r in records.items()
                if (bench, s) == ("test_suite", self.setting)
            ),
            # Runs of one day by when they started (`started`, UTC), where recorded.
            key=lambda r: (r["date"], r.get("started", ""), r["commit"]),
            reverse=True,
        )

    def render(self, records: dict) -> str:
        lines = [
            "| date | commit | machine | wall-clock | JAX sine peer (CAVIA updates/s) | result |",
            "|---|---|---|---:|---:|---|",
        ]
        for r in self.cells(records):
            minutes, seconds = divmod(round(r["mean"]), 60)
            rate = peer_rate(r.get("jax_peer_rate"))
            cells = [r["date"], r["commit"], r["machine"], f"{minutes} min {seconds} s"]
            lines.append(checked_row([*cells, rate, r["result"]], "test_suite"))
        return "\n".join(lines) + "\n"


def used(table, records: dict) -> list[dict]:
    """The measured records a table shows, each once."""
    found = {id(r): r for r in table.cells(records) if measured(r)}
    return list(found.values())
