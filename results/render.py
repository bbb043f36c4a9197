"""Writes the results pages' tables from the records in results/records/.

A page marks where each table goes with `<!-- results:NAME -->` ... `<!-- /results -->`; this
script writes between the marks the table NAME of results/definitions.py, from the records
alone, with the lines under it: what a figure marked EARLIER_FORM was measured on, and
what set back the training of one marked SETBACK, where there are such; the command that
reruns its cells (and their cost on 2 cores, from the records); and a link to the index of
its records (docs/records.md, also written here: commit, date, machine and command of
every cell). `--check` fails where a page and its records disagree
(tests/test_results.py runs it).

    python -m results.render            # rewrite the pages' tables and the index
    python -m results.render --check    # exit 1 if a page is not what its records give
"""

from __future__ import annotations

import argparse
import os
import re
import sys

from results import definitions, verdicts
from results.records import REPO, load, measured
from results.tables import EARLIER_FORM, SETBACK, SuiteTimes, used

PAGES = (
    "docs/RESULTS.md",
    "docs/comparisons.md",
    "docs/metal.md",
    "README.md",
    "docs/TESTING.md",
    "docs/images.md",
)
INDEX = "docs/records.md"
MARK = re.compile(
    r"(<!-- results:(?P<name>[a-z0-9_]+) -->\n)(?P<body>.*?)(<!-- /results -->)", re.S
)


def tables() -> dict:
    """Every table a page may name."""
    return {
        **definitions.TABLES,
        "verdicts": verdicts.VERDICTS,
        "glance": verdicts.GLANCE,
        "metal_verdicts": verdicts.METAL_VERDICTS,
        "suite_time": SuiteTimes(),
        "fast_tier_time": SuiteTimes("fast_tier"),
    }


def cost(records: list[dict], every: list[dict]) -> tuple[float, int]:
    """The CPU time to rerun `records` on 2 cores, in seconds, and how many of them it
    could not estimate: a record's own training wall-clock, else that of the timed records
    (of `every`) of the same shipped config in the same precision, scaled to its updates."""

    def kind(r: dict) -> tuple[str, str]:
        return r.get("config"), r.get("precision", "float32")

    timed: dict[tuple[str, str], list[float]] = {}
    for r in every:
        if "wall_clock_seconds" in r and r.get("config") and r.get("updates"):
            timed.setdefault(kind(r), []).append(r["wall_clock_seconds"] / r["updates"])
    seconds, unknown = 0.0, 0
    for r in records:
        if "wall_clock_seconds" in r:
            seconds += r["wall_clock_seconds"]
        elif kind(r) in timed and r.get("updates"):
            rates = timed[kind(r)]
            seconds += r["updates"] * sum(rates) / len(rates)
        else:
            unknown += 1
    return seconds, unknown


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def footnote(name: str, table, records: dict, page: str) -> str:
    """The lines under a table: how to rerun its cells, at what cost, and its records."""
    shown = used(table, records)
    index = os.path.relpath(os.path.join(REPO, INDEX), os.path.dirname(os.path.join(REPO, page)))
    benchmarks = sorted({r["benchmark"] for r in table.cells(records)})
    links = ", ".join(f"[{b}]({index}#{b})" for b in benchmarks)
    if isinstance(table, SuiteTimes) or not shown:
        return f"\nRecords (commit, date, machine, command): {links}.\n"
    forms = sorted({r["data_form"] for r in shown if "data_form" in r})
    legend = (
        f"{EARLIER_FORM} Trained and tested on an earlier form of the data: "
        f"{'; '.join(forms)}. A rerun reads today's form, on which the same seed draws "
        "other test tasks: a difference across the two forms is shown unpaired."
        if forms
        else ""
    )
    setbacks = sorted(
        (r["label"], verdicts.SETTING_NAMES.get(r["setting"], r["setting"]), r["setback"])
        for r in shown
        if "setback" in r
    )
    if setbacks:
        each = "; ".join(f"{label} at {setting} ({what})" for label, setting, what in setbacks)
        legend += f"{' ' if legend else ''}{SETBACK} Its training had a setback on the way: {each}."
    legend = f"\n{legend}\n" if legend else ""
    trainings = [r for r in shown if r["benchmark"] != "test_suite"]
    seconds, unknown = cost(trainings, list(records.values()))
    if unknown == len(trainings):
        took = "its records carry no training time"
    else:
        untimed = f"; {unknown} of {len(trainings)} cells untimed" if unknown else ""
        took = f"about {_hours(seconds)} on 2 cores{untimed}"
    return legend + (
        f"\nRerun: `python -m results.rerun {name}` ({took}). "
        f"Records (commit, date, machine, command): {links}.\n"
    )


def render_page(text: str, records: dict, page: str = "docs/RESULTS.md", named=None) -> str:
    """`text` with the body of every results mark rewritten from the records."""
    named = named or tables()

    def replace(match: re.Match) -> str:
        name = match.group("name")
        if name not in named:
            raise ValueError(f"no table named {name!r} (known: {sorted(named)})")
        table = named[name]
        body = table.render(records) + footnote(name, table, records, page)
        return match.group(1) + body + match.group(4)

    return MARK.sub(replace, text)


def index_page(records: dict) -> str:
    """docs/records.md: every record by benchmark, with its provenance and command."""
    lines = [
        "# The records behind the results tables",
        "",
        "Generated by `python -m results.render` from `results/records/`: each cell's record,",
        "by benchmark, with the commit, date and machine it was measured on and the command",
        "that reruns it on today's code (`measured_with` in a record keeps an older command",
        "it was measured by, `data_form` an earlier form of the data it was measured on,",
        "`setback` what set its training back on the way). A figure quoted from a paper has",
        "no run.",
        "",
    ]
    by_benchmark: dict[str, list[dict]] = {}
    for record in records.values():
        by_benchmark.setdefault(record["benchmark"], []).append(record)
    for benchmark, found in sorted(by_benchmark.items()):
        lines += [f"## {benchmark}", ""]
        lines += ["| record | commit | date | machine | command |", "|---|---|---|---|---|"]
        for r in sorted(found, key=lambda r: r["_path"]):
            path = os.path.relpath(os.path.join(REPO, r["_path"]), os.path.join(REPO, "docs"))
            where = f"[{r['setting']}/{r['method']}]({path})"
            if not measured(r):
                lines.append(f"| {where} | | | | quoted: {r.get('citation', 'the paper')} |")
                continue
            command = r["command"].replace("|", "\\|")
            provenance = f"{r['commit']} | {r['date']} | {r['machine']}"
            lines.append(f"| {where} | {provenance} | `{command}` |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if a page is out of date")
    args = parser.parse_args(argv)
    records = load()
    named = tables()
    pages = {page: None for page in PAGES}
    stale = []
    for page in pages:
        path = os.path.join(REPO, page)
        with open(path) as f:
            text = f.read()
        pages[page] = (text, render_page(text, records, page, named))
    index = os.path.join(REPO, INDEX)
    old = ""
    if os.path.exists(index):
        with open(index) as f:
            old = f.read()
    pages[INDEX] = (old, index_page(records))
    for page, (text, rendered) in pages.items():
        if rendered != text:
            stale.append(page)
            if not args.check:
                with open(os.path.join(REPO, page), "w") as f:
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
