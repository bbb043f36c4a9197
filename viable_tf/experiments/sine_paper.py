"""viable-sine-paper: regenerate every sine result of the paper (docs/method.md §4) from scratch.

    viable-sine-paper --work_dir=runs/sine_paper [--jobs=2] [--num_steps=50000]

(a) MSE of MAML, CAVIA, simVIABLE and relVIABLE for C = 1..5 context parameters, K = 10;
(b) CAVIA, simVIABLE and relVIABLE trained with K drawn from {0..20}, tested at
    K in {0, 1, 2, 3, 4, 20};
(c) a figure of one task adapted from 4 points (truth, points, CAVIA and relVIABLE);
(d) a figure of the pre- and post-update inner loss on test tasks;
plus extra seeds of the C = 5, K = 10 comparison, relVIABLE (tanh) at 100,000
meta-updates for every seed, and variations (VARIATIONS) for the reproduction study.
The paper names no activation for the loss networks: every VIABLE row is run with
ReLU and with tanh hidden units (ROWS).

Each training is one `viable-train` process; `--jobs` of them run at once, each
with its share of the cores (`--jobs=0`: one at a time, in this process, which saves
a TensorFlow start per run where runs are short). A finished run (its results.json
exists) is skipped and an interrupted one resumes, so rerunning the command picks up
where it stopped.
Writes `W/summary.json`, and under `--report_dir` the tables (`sine_tables.md`), the
figures and `sine_reference.json` (the numbers viable-train prints beside its own).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field

from tqdm import tqdm

from viable_tf.cli.common import UsageError, module_command, run_main
from viable_tf.experiments.sine_report import REFERENCE_FILE, reference, tables, timing_table
from viable_tf.experiments.sine_study import (
    CONTEXT_DIMS,
    EVAL_SHOTS_B,
    LONG_ROW,
    LONG_STEPS,
    ROWS,
    ROWS_A,
    ROWS_B,
    VARIATIONS,
    selected,
)
from viable_tf.logs import add_verbosity_flag
from viable_tf.run_dir import RunDir
from viable_tf.training.experiment import write_json


@dataclass
class Run:
    """One training: a method's config with bindings, in its own model directory."""

    name: str
    config: str
    params: list[str] = field(default_factory=list)
    eval_shots: tuple[int, ...] = ()
    row: str = ""  # the ROWS key it belongs to (or varies)

    def model_dir(self, work_dir: str) -> str:
        return os.path.join(work_dir, self.name)


def plan(
    *,
    num_steps: int,
    seeds: tuple[int, ...],
    extra_params: list[str],
    context_dims: tuple[int, ...] = CONTEXT_DIMS,
    investigate: bool = True,
    long_steps: int = LONG_STEPS,
    rows: tuple[str, ...] = tuple(ROWS),
) -> list[Run]:
    """All trainings of the reproduction (of the table rows `rows`), the slowest first."""
    common = [f"NUM_STEPS={num_steps}", *extra_params]
    rows_a, rows_b = selected(ROWS_A, rows), selected(ROWS_B, rows)
    runs = []
    for key in rows_b:
        runs.append(
            Run(
                f"b_vark/{key}",
                ROWS[key].vark_config,
                [*common, "SEED=0"],
                eval_shots=EVAL_SHOTS_B,
                row=key,
            )
        )
    for key in rows_a:
        for c in context_dims:
            runs.append(
                Run(
                    f"a_context/{key}_c{c}",
                    ROWS[key].config,
                    [*common, f"CONTEXT_DIM={c}"],
                    row=key,
                )
            )
    for key in rows_b:
        for seed in seeds:
            if seed != 0:  # seed 0 at C = 5 is run (a)'s
                runs.append(
                    Run(
                        f"seeds/{key}_seed{seed}",
                        ROWS[key].config,
                        [*common, f"SEED={seed}"],
                        row=key,
                    )
                )
    if investigate and LONG_ROW in rows:
        # later bindings win: NUM_STEPS here overrides the default
        for seed in seeds:
            runs.append(
                Run(
                    f"long/{LONG_ROW}_seed{seed}",
                    ROWS[LONG_ROW].config,
                    [*common, f"SEED={seed}", f"NUM_STEPS={long_steps}"],
                    row=LONG_ROW,
                )
            )
    if investigate:
        for name, variation in VARIATIONS.items():
            if variation.base not in rows:
                continue
            runs.append(
                Run(
                    f"investigation/{name}",
                    ROWS[variation.base].config,
                    [*common, *variation.params],
                    row=variation.base,
                )
            )
    return sorted(runs, key=_expected_cost, reverse=True)


def _expected_cost(run: Run) -> float:
    """Relative time of a run (measured: relation pairs, K and tanh dominate)."""
    cost = {"maml": 1.0, "cavia": 1.0, "simviable": 1.2}.get(run.row.split("_")[0], 2.4)
    if run.row.endswith("tanh"):
        cost *= 1.3
    if run.name.startswith("b_") and run.row.startswith("relviable"):
        cost *= 2.5  # K padded to 20: four times the pairs
    steps = [int(p.split("=")[1]) for p in run.params if p.startswith("NUM_STEPS=")]
    return cost * steps[-1]


def _execute(run: Run, work_dir: str, threads: int) -> dict:
    """Trains (or resumes) one run and evaluates it at its extra K; returns timings."""
    model_dir = run.model_dir(work_dir)
    env = {
        **os.environ,
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "TF_NUM_INTRAOP_THREADS": str(threads),
        "TF_NUM_INTEROP_THREADS": str(threads),
    }
    run_dir = RunDir(model_dir)
    log_path = run_dir.log
    os.makedirs(model_dir, exist_ok=True)
    start = time.perf_counter()
    with open(log_path, "a") as log:
        if not os.path.exists(run_dir.results):
            command = [
                *module_command("viable_tf.cli.train"),
                f"--gin_file={run.config}",
                *(f"--gin_param={p}" for p in [*run.params, "Trainer.show_progress=False"]),
                f"--model_dir={model_dir}",
            ]
            subprocess.run(command, check=True, stdout=log, stderr=subprocess.STDOUT, env=env)
        missing = [k for k in run.eval_shots if not os.path.exists(run_dir.evaluation(k))]
        if missing:
            command = [
                *module_command("viable_tf.cli.evaluate"),
                f"--model_dir={model_dir}",
                f"--num_support={','.join(map(str, missing))}",
            ]
            subprocess.run(command, check=True, stdout=log, stderr=subprocess.STDOUT, env=env)
    return {"run": run.name, "seconds": time.perf_counter() - start}


def _execute_here(run: Run, work_dir: str) -> dict:
    """`_execute` in this process (`--jobs=0`): the same training and evaluations, with the
    run's output appended to its log."""
    import contextlib

    import gin

    from viable_tf.cli.common import parse_gin
    from viable_tf.config import load_run
    from viable_tf.training.experiment import evaluate_and_write, train_and_evaluate

    model_dir = run.model_dir(work_dir)
    run_dir = RunDir(model_dir)
    os.makedirs(model_dir, exist_ok=True)
    start = time.perf_counter()
    with open(run_dir.log, "a") as log, contextlib.redirect_stdout(log):
        if not os.path.exists(run_dir.results):
            gin.clear_config()
            parse_gin([run.config], [*run.params, "Trainer.show_progress=False"])
            train_and_evaluate(model_dir)
        missing = [k for k in run.eval_shots if not os.path.exists(run_dir.evaluation(k))]
        if missing:
            gin.clear_config()
            loaded = load_run(model_dir, ())
            for k in missing:
                evaluate_and_write(loaded, num_support=k)
        gin.clear_config()
    return {"run": run.name, "seconds": time.perf_counter() - start}


def _load(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def finished(run: Run, work_dir: str) -> bool:
    """Whether the run's results and its evaluations at other K are all written."""
    run_dir = RunDir(run.model_dir(work_dir))
    paths = [run_dir.results, *(run_dir.evaluation(k) for k in run.eval_shots)]
    return all(os.path.exists(path) for path in paths)


def read_run(run: Run, work_dir: str) -> dict:
    """A finished run's results.json, with its evaluations at other K under "by_k"."""
    run_dir = RunDir(run.model_dir(work_dir))
    record = run_dir.read_results()
    for k in run.eval_shots:
        record.setdefault("by_k", {})[str(k)] = _load(run_dir.evaluation(k))
    return record


def run_all(runs: list[Run], work_dir: str, *, jobs: int, desc: str) -> list[dict]:
    """Trains (or resumes, or skips) every run, `jobs` at a time with a share of the
    cores each (0: one at a time in this process); returns their timings in the order
    they ended."""
    if jobs == 0:
        timings = []
        for run in tqdm(runs, unit="run", desc=desc):
            timings.append(_execute_here(run, work_dir))
        return timings
    threads = max(1, (os.cpu_count() or 1) // jobs)
    timings = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(_execute, run, work_dir, threads) for run in runs]
        with tqdm(total=len(runs), unit="run", desc=desc) as bar:
            for future in concurrent.futures.as_completed(futures):
                timings.append(future.result())
                bar.set_postfix_str(timings[-1]["run"], refresh=False)
                bar.update()
    return timings


def collect(runs: list[Run], work_dir: str) -> dict:
    """Gathers every result into one JSON-able dict."""
    summary: dict = {g: {} for g in ("a_context", "b_vark", "seeds", "long", "investigation")}
    for run in runs:
        summary[run.name.split("/")[0]][os.path.basename(run.name)] = read_run(run, work_dir)
    return summary


def _integers(flag: str, text: str) -> tuple[int, ...]:
    try:
        return tuple(int(s) for s in text.split(","))
    except ValueError:
        raise UsageError(f"{flag} must be comma-separated integers, got {text!r}") from None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="viable-sine-paper", description=__doc__.split("\n")[0])
    add_verbosity_flag(parser)
    parser.add_argument("--work_dir", default="runs/sine_paper", help="where runs go")
    parser.add_argument("--report_dir", default=None, help="figures and tables (default: work_dir)")
    parser.add_argument(
        "--jobs", type=int, default=2, help="trainings at once (0: one at a time, in this process)"
    )
    parser.add_argument("--num_steps", type=int, default=50_000, help="meta-updates per run")
    parser.add_argument("--seeds", default="0,1,2", help="seeds of the C = 5, K = 10 comparison")
    parser.add_argument(
        "--long_steps",
        type=int,
        default=LONG_STEPS,
        help=f"meta-updates of the long {LONG_ROW} runs",
    )
    parser.add_argument("--context_dims", default="1,2,3,4,5", help="C values of table (a)")
    parser.add_argument(
        "--no_investigate", action="store_true", help="skip the relVIABLE variations"
    )
    parser.add_argument(
        "--rows",
        default=",".join(ROWS),
        help=f"table rows to run (default all: {','.join(ROWS)}); cavia is always needed",
    )
    parser.add_argument("--gin_param", action="append", default=[], help="extra binding, all runs")
    return parser


def _main() -> int:
    args = _parser().parse_args()
    if args.jobs < 0:
        raise UsageError(f"--jobs must be >= 0, got {args.jobs}")
    if args.num_steps < 1:
        raise UsageError(f"--num_steps must be >= 1, got {args.num_steps}")
    seeds = _integers("--seeds", args.seeds)
    context_dims = _integers("--context_dims", args.context_dims)
    if 5 not in context_dims or min(context_dims) < 1:
        raise UsageError(f"--context_dims must be >= 1 and include 5, got {args.context_dims!r}")
    if 0 not in seeds or len(seeds) < 2:
        raise UsageError(f"--seeds must include 0 and at least one more seed, got {args.seeds!r}")
    rows = tuple(args.rows.split(","))
    unknown = sorted(set(rows) - set(ROWS))
    if unknown or "cavia" not in rows:
        raise UsageError(
            f"--rows must name rows of {', '.join(ROWS)} and include cavia (the reference), "
            f"got {args.rows!r}"
        )
    report_dir = args.report_dir or args.work_dir
    os.makedirs(report_dir, exist_ok=True)
    runs = plan(
        num_steps=args.num_steps,
        seeds=seeds,
        extra_params=args.gin_param,
        context_dims=context_dims,
        investigate=not args.no_investigate,
        long_steps=args.long_steps,
        rows=rows,
    )
    start = time.perf_counter()
    timings = run_all(runs, args.work_dir, jobs=args.jobs, desc="sine reproduction")
    summary = collect(runs, args.work_dir)
    summary["num_steps"] = args.num_steps
    summary["wall_clock_seconds"] = round(time.perf_counter() - start, 1)
    summary["run_seconds"] = {t["run"]: round(t["seconds"], 1) for t in timings}
    summary["command"] = " ".join(["viable-sine-paper", *sys.argv[1:]])

    from viable_tf.experiments import sine_figures

    b_vark = os.path.join(args.work_dir, "b_vark")
    sine_figures.adapted_from_four_points(
        {
            ROWS[k].label: os.path.join(b_vark, k)
            for k in selected(("cavia", "relviable_relu", LONG_ROW), rows)
        },
        path=os.path.join(report_dir, "sine_adapted_k4.png"),
    )
    summary["inner_loss"] = sine_figures.inner_loss_before_after(
        {
            ROWS[k].label: os.path.join(args.work_dir, "a_context", f"{k}_c5")
            for k in selected(ROWS_B, rows)
        },
        path=os.path.join(report_dir, "sine_inner_loss.png"),
    )
    write_json(summary, os.path.join(args.work_dir, "summary.json"))
    write_json(reference(summary, seeds, rows), os.path.join(report_dir, REFERENCE_FILE))
    text = tables(summary, seeds, context_dims, rows)
    text += "\n### Time per training run (train and test, one core each)\n\n" + timing_table(
        summary
    )
    with open(os.path.join(report_dir, "sine_tables.md"), "w") as f:
        f.write(text)
    print(text)
    print(f"wall-clock: {summary['wall_clock_seconds'] / 60:.1f} min; report in {report_dir}")
    return 0


def main() -> None:
    run_main(_main, "viable-sine-paper")


if __name__ == "__main__":
    main()
