"""Reruns the cells of one results table on today's code and writes their records anew.

    python -m results.rerun sine_step [--dry_run]

Runs each measured record's `command` once (records sharing a command share its run), from
the repository's root with this installation's programs first on PATH. Interrupted, it
resumes: each program picks up its finished and half-finished runs. Then each record whose
run wrote a test result (viable-train's results.json, viable-eval's eval_k<K>.json) is
written again from it (lab/records.py) with this commit, date and machine; the others (a
driver's reference row, the outlier table's tests) say where their figures are. The
table names are those of results/definitions.py (`python -m results.rerun --help`).
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import subprocess
import sys

from results import commands
from results.records import REPO, load, measured
from results.render import tables


def _commit() -> str:
    found = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    )
    return found.stdout.strip() or "unknown"


def _cell_run(record: dict, builds: list[commands.Build]) -> tuple[str, int | None] | None:
    """The run directory and K of the record's cell among its command's trainings."""
    for build in builds:
        if record.get("config") in build.files or len(builds) == 1:
            shots = re.fullmatch(r"vark_K(\d+)_seed\d+", record["setting"])
            k = int(shots.group(1)) if shots and build.evaluations else None
            return os.path.join(REPO, build.model_dir), k
    return None


def rerun(name: str, *, dry_run: bool = False) -> int:
    named = tables()
    if name not in named:
        raise SystemExit(f"no table named {name!r}; known: {', '.join(sorted(named))}")
    records = [r for r in named[name].cells(load()) if measured(r)]
    unique = list(dict.fromkeys(r["command"] for r in records))
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]}
    for command in unique:
        print(f"$ {command}", flush=True)
        if dry_run:
            continue
        for words in commands.steps(command):
            subprocess.run(words, cwd=REPO, env=env, check=True)
    if dry_run:
        return 0
    sys.path.insert(0, REPO)  # lab/ is the checkout's
    from lab import records as lab_records

    fields = {
        "commit": _commit(),
        "date": datetime.date.today().isoformat(),
        "machine": lab_records.this_machine(),
    }
    for record in records:
        found = _cell_run(record, commands.builds(record["command"]))
        results = found and os.path.join(
            found[0], "results.json" if found[1] is None else f"eval_k{found[1]}.json"
        )
        if not results or not os.path.exists(results):
            print(f"{record['_path']}: its figure is in the run's own output, not rewritten")
            continue
        keep = ("benchmark", "setting", "method", "label", "command", "config")
        kept = {k: record[k] for k in keep if k in record}
        fresh = lab_records.record_of(found[0], num_support=found[1], **kept, **fields)
        print(lab_records.write(fresh))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("table", help="of: " + ", ".join(sorted(tables())))
    parser.add_argument("--dry_run", action="store_true", help="print the commands, run none")
    args = parser.parse_args(argv)
    return rerun(args.table, dry_run=args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
