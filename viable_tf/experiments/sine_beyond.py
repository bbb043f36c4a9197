"""viable-sine-beyond: the paper's future work (docs/method.md §3, last point) measured on sine.

    viable-sine-beyond --work_dir=runs/sine_beyond [--report_dir=docs/sine] [--jobs=2]

Side by side, every method with its shipped config (the defaults: torch init, tanh
loss networks): CAVIA, relVIABLE, attVIABLE (an attention loss network over the whole
support set), MAML, and VIABLE on MAML (MAML's inner loop over every weight descends a
learned loss: per point, MAML+simVIABLE, or over pairs, MAML+relVIABLE).
  seeds  C = 5, K = 10, one run per seed (`--seeds`, default 0,1,2)
  vark   trained with K ~ U{0..20} (seed 0), tested at K = 0, 1, 2, 3, 4 and 20
Each training is one `viable-train` process run as the reproduction runs them
(`viable-sine-paper`: finished runs skipped, interrupted ones resumed). Writes
`W/summary.json` and `sine_beyond_tables.md` in `--report_dir`; `--report_only` writes
the tables of the runs finished so far without training.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import NamedTuple

from viable_tf.cli.common import UsageError, run_main
from viable_tf.experiments.sine_paper import (
    Run,
    _integers,
    finished,
    read_run,
    run_all,
    write_json,
)
from viable_tf.experiments.sine_report import _cell, _spread_row
from viable_tf.experiments.sine_study import EVAL_SHOTS_B
from viable_tf.logs import add_verbosity_flag


class Method(NamedTuple):
    label: str
    config: str  # C = 5, K = 10
    vark_config: str  # K ~ U{0..20}
    cost: float  # relative time per meta-update (to run the slowest first)


METHODS = {
    "cavia": Method("CAVIA", "sine/cavia.gin", "sine/cavia_vark.gin", 1.0),
    "relviable": Method("relVIABLE", "sine/relviable.gin", "sine/relviable_vark.gin", 11.0),
    "attviable": Method("attVIABLE", "sine/attviable.gin", "sine/attviable_vark.gin", 8.0),
    "maml": Method("MAML", "sine/maml.gin", "sine/maml_vark.gin", 1.3),
    "maml_simviable": Method(
        "MAML+simVIABLE", "sine/maml_simviable.gin", "sine/maml_simviable_vark.gin", 2.0
    ),
    "maml_relviable": Method(
        "MAML+relVIABLE", "sine/maml_relviable.gin", "sine/maml_relviable_vark.gin", 12.0
    ),
}


def plan(*, methods: tuple[str, ...], seeds: tuple[int, ...], extra_params: list[str]) -> list:
    """Every training, the slowest first (a K ~ U{0..20} run pads K to 20)."""
    runs = []
    for key in methods:
        method = METHODS[key]
        runs.append(
            Run(f"vark/{key}", method.vark_config, [*extra_params, "SEED=0"], EVAL_SHOTS_B, key)
        )
        for seed in seeds:
            runs.append(
                Run(
                    f"seeds/{key}_seed{seed}",
                    method.config,
                    [*extra_params, f"SEED={seed}"],
                    row=key,
                )
            )
    return sorted(
        runs,
        key=lambda r: METHODS[r.row].cost * (2.5 if r.name.startswith("vark") else 1.0),
        reverse=True,
    )


def collect(runs: list[Run], work_dir: str, *, finished_only: bool = False) -> dict:
    """Every run's record (with its evaluations at other K); `finished_only` leaves out
    runs not finished yet instead of failing on them."""
    summary: dict = {"seeds": {}, "vark": {}}
    for run in runs:
        if finished_only and not finished(run, work_dir):
            continue
        group, name = run.name.split("/")
        summary[group][name] = read_run(run, work_dir)
    return summary


MISSING = "not run yet"


def _mean(records: list[dict | None]) -> float | None:
    if not records or None in records:
        return None
    return sum(r["mean"] for r in records) / len(records)


def tables(summary: dict, methods: tuple[str, ...], seeds: tuple[int, ...]) -> str:
    """Markdown: the seeds at C = 5, K = 10 (with the ratio to CAVIA), MSE by K, time.
    A run missing from `summary` (not finished) is a cell saying so."""
    seed_records = {k: [summary["seeds"].get(f"{k}_seed{s}") for s in seeds] for k in methods}
    cavia_mean = _mean(seed_records.get("cavia", []))
    lines = [f"### Seeds {', '.join(map(str, seeds))}: MSE at C = 5, K = 10", ""]
    header = " | ".join(f"seed {s}" for s in seeds)
    lines.append(f"| method | {header} | mean | std | mean vs CAVIA |")
    lines.append("|---|" + "---:|" * (len(seeds) + 3))
    for key in methods:
        records = seed_records[key]
        mean = _mean(records)
        if mean is None:
            cells = " | ".join(_cell(r) if r else MISSING for r in records)
            lines.append(f"| {METHODS[key].label} | {cells} | — | — | — |")
            continue
        ratio = f"{mean / cavia_mean:.2f}" if cavia_mean else "—"
        lines.append(f"{_spread_row(METHODS[key].label, records)} {ratio} |")
    lines += ["", "### MSE by support size K at test (trained with K ~ U{0..20}, seed 0)", ""]
    lines.append("| method | " + " | ".join(f"K = {k}" for k in EVAL_SHOTS_B) + " |")
    lines.append("|---|" + "---:|" * len(EVAL_SHOTS_B))
    for key in methods:
        vark = summary["vark"].get(key)
        cells = " | ".join(_cell(vark["by_k"][str(k)]) if vark else MISSING for k in EVAL_SHOTS_B)
        lines.append(f"| {METHODS[key].label} | {cells} |")
    lines += ["", "### Time per training run (train and test, one core each)", ""]
    lines.append("| method | C = 5, K = 10 (mean of seeds) | K ~ U{0..20} | best checkpoints |")
    lines.append("|---|---:|---:|---|")
    for key in methods:
        done = [r for r in seed_records[key] if r]
        vark = summary["vark"].get(key)
        seconds = (
            f"{sum(r['train_and_eval_seconds'] for r in done) / len(done):.0f} s"
            if done
            else MISSING
        )
        vark_seconds = f"{vark['train_and_eval_seconds']:.0f} s" if vark else MISSING
        best = ", ".join(f"{r['checkpoint_step']:,}" for r in [*done, *([vark] if vark else [])])
        lines.append(f"| {METHODS[key].label} | {seconds} | {vark_seconds} | {best} |")
    return "\n".join(lines) + "\n"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="viable-sine-beyond", description=__doc__.split("\n")[0])
    add_verbosity_flag(parser)
    parser.add_argument("--work_dir", default="runs/sine_beyond", help="where runs go")
    parser.add_argument("--report_dir", default=None, help="the tables (default: work_dir)")
    parser.add_argument("--jobs", type=int, default=2, help="trainings at once")
    parser.add_argument("--seeds", default="0,1,2", help="seeds of the C = 5, K = 10 runs")
    parser.add_argument(
        "--methods", default=",".join(METHODS), help=f"of {','.join(METHODS)} (default all)"
    )
    parser.add_argument("--gin_param", action="append", default=[], help="extra binding, all runs")
    parser.add_argument(
        "--report_only",
        action="store_true",
        help="train nothing: tables of the runs finished so far, the others marked",
    )
    return parser


def _main() -> int:
    args = _parser().parse_args()
    if args.jobs < 1:
        raise UsageError(f"--jobs must be >= 1, got {args.jobs}")
    seeds = _integers("--seeds", args.seeds)
    methods = tuple(m for m in args.methods.split(",") if m)
    unknown = sorted(set(methods) - set(METHODS))
    if unknown or not methods:
        raise UsageError(f"--methods must name some of {','.join(METHODS)}, got {args.methods!r}")
    report_dir = args.report_dir or args.work_dir
    os.makedirs(report_dir, exist_ok=True)
    runs = plan(methods=methods, seeds=seeds, extra_params=args.gin_param)
    start = time.perf_counter()
    if not args.report_only:
        run_all(runs, args.work_dir, jobs=args.jobs, desc="sine, beyond the paper")
    summary = collect(runs, args.work_dir, finished_only=args.report_only)
    if not args.report_only:
        summary["wall_clock_seconds"] = round(time.perf_counter() - start, 1)
        summary["command"] = " ".join(["viable-sine-beyond", *sys.argv[1:]])
        write_json(summary, os.path.join(args.work_dir, "summary.json"))
    text = tables(summary, methods, seeds)
    with open(os.path.join(report_dir, "sine_beyond_tables.md"), "w") as f:
        f.write(text)
    print(text)
    print(f"{time.perf_counter() - start:.0f} s; report in {report_dir}")
    return 0


def main() -> None:
    run_main(_main, "viable-sine-beyond")


if __name__ == "__main__":
    main()
