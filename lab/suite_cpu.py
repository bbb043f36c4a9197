"""Where the suite's CPU goes, test by test: a pytest plugin that logs each test's CPU
(its process's, and that of the child processes it waited for) to a JSON-lines file, and
a command that sums the log by file and lists the costliest tests.

    SUITE_CPU_LOG=cpu.jsonl PYTHONPATH=. .venv/bin/pytest -q -p lab.suite_cpu -n 2 \\
        --dist loadfile --no-loadscope-reorder
    .venv/bin/python lab/suite_cpu.py cpu.jsonl [--top 30]

A research tool (docs/lab/testing_record.md, "Where the suite's CPU goes"). CPU seconds,
unlike a test's wall-clock, hardly change with what else runs on the machine, so the log
can be taken beside other work. A module-scoped fixture's cost falls on the first test
that uses it; a process a test leaves running (a server it kills but never waits for) is
not counted.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource

import pytest

LOG = "SUITE_CPU_LOG"


def _cpu() -> tuple[float, float]:
    own, children = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Wraps each test's setup, call and teardown."""
    before = _cpu()
    outcome = yield
    after = _cpu()
    with open(os.environ[LOG], "a") as log:
        own, children = (b - a for a, b in zip(before, after, strict=True))
        log.write(json.dumps({"test": item.nodeid, "own": own, "children": children}) + "\n")
    return outcome


def summary(rows: list[dict], top: int) -> str:
    """Markdown: the total, the files by CPU, and the `top` costliest tests."""
    cost = lambda row: row["own"] + row["children"]  # noqa: E731
    by_file = collections.Counter()
    for row in rows:
        by_file[row["test"].split("::")[0]] += cost(row)
    lines = [
        f"{len(rows)} tests, {sum(map(cost, rows)):.0f} CPU s",
        "",
        "| file | CPU s |",
        "|---|---:|",
    ]
    lines += [f"| {name} | {seconds:.1f} |" for name, seconds in by_file.most_common(top)]
    lines += ["", "| test | CPU s | of which child processes |", "|---|---:|---:|"]
    for row in sorted(rows, key=cost, reverse=True)[:top]:
        lines.append(f"| {row['test']} | {cost(row):.1f} | {row['children']:.1f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("log", help="the JSON-lines file the plugin wrote")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    with open(args.log) as f:
        print(summary([json.loads(line) for line in f], args.top))


if __name__ == "__main__":
    main()
