"""viable-sine-paper: regenerate every sine result of the paper (SPEC §4) from scratch.

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
with its share of the cores. A finished run (its results.json exists) is skipped and
an interrupted one resumes, so rerunning the command picks up where it stopped.
Writes `W/summary.json`, and under `--report_dir` the tables (`sine_tables.md`), the
figures and `sine_reference.json` (the numbers viable-train prints beside its own).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.resources
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import NamedTuple

from tqdm import tqdm

from viable_tf.cli.common import UsageError, module_command, run_main
from viable_tf.logs import add_verbosity_flag
from viable_tf.run_dir import RunDir

CONTEXT_DIMS = (1, 2, 3, 4, 5)
EVAL_SHOTS_B = (0, 1, 2, 3, 4, 20)
LONG_STEPS = 100_000


class Row(NamedTuple):
    """One method of the tables: its config at K = 10 and, for (b), at K ~ U{0..20}."""

    label: str
    config: str
    vark_config: str | None


#: The tables' rows. The paper names no activation for the loss networks, so both
#: VIABLE variants are run with ReLU and with tanh hidden units (stable config names,
#: whatever the shipped default is); every row uses the configs' default init ('torch').
ROWS = {
    "maml": Row("MAML", "sine/maml.gin", None),
    "cavia": Row("CAVIA", "sine/cavia.gin", "sine/cavia_vark.gin"),
    "simviable_relu": Row(
        "simVIABLE (ReLU)", "sine/simviable_relu.gin", "sine/simviable_vark_relu.gin"
    ),
    "simviable_tanh": Row(
        "simVIABLE (tanh)", "sine/simviable_tanh.gin", "sine/simviable_vark_tanh.gin"
    ),
    "relviable_relu": Row(
        "relVIABLE (ReLU)", "sine/relviable_relu.gin", "sine/relviable_vark_relu.gin"
    ),
    "relviable_tanh": Row(
        "relVIABLE (tanh)", "sine/relviable_tanh.gin", "sine/relviable_vark_tanh.gin"
    ),
}
ROWS_A = tuple(ROWS)
ROWS_B = tuple(key for key, row in ROWS.items() if row.vark_config)
#: Trained for LONG_STEPS at every seed: it was still improving at 50,000 updates.
LONG_ROW = "relviable_tanh"


class Variation(NamedTuple):
    """One change a careful reproducer would question, trained at C = 5, seed 0, on
    the row `base` of table (a) (which it is compared with)."""

    description: str
    params: list[str]
    base: str = "relviable_tanh"


KERAS_INIT = ["INIT='keras'"]

#: The reproduction study: each variation changes one thing of its base row.
VARIATIONS = {
    "keras_init_relu": Variation(
        "Keras init (Glorot kernels, zero biases)", KERAS_INIT, "relviable_relu"
    ),
    "keras_init_tanh": Variation("Keras init (Glorot kernels, zero biases)", KERAS_INIT),
    "simviable_keras_init": Variation(
        "Keras init (Glorot kernels, zero biases)", KERAS_INIT, "simviable_relu"
    ),
    "cavia_keras_init": Variation("Keras init (Glorot kernels, zero biases)", KERAS_INIT, "cavia"),
    "keras_init_symmetric_relu": Variation(
        "Keras init with W_b = W_a at the start (the previous code's start)",
        [*KERAS_INIT, "RelationLossNetwork.symmetric_init=True"],
        "relviable_relu",
    ),
    "symmetric_relu": Variation(
        "W_b = W_a at the start", ["RelationLossNetwork.symmetric_init=True"], "relviable_relu"
    ),
    "softplus_hidden": Variation(
        "softplus hidden units", ["RelationLossNetwork.activation='softplus'"], "relviable_relu"
    ),
    "simviable_softplus_hidden": Variation(
        "softplus hidden units", ["SimpleLossNetwork.activation='softplus'"], "simviable_relu"
    ),
    "softplus_output": Variation(
        "loss output through softplus (non-negative)",
        ["RelationLossNetwork.output_activation='softplus'"],
        "relviable_relu",
    ),
    "double_length_relu": Variation("100,000 meta-updates", ["NUM_STEPS=100000"], "relviable_relu"),
    "no_x_in_pairs": Variation(
        "pair features without x", ["RelationLossNetwork.include_inputs=False"]
    ),
    "no_task_loss_in_pairs": Variation(
        "pair features without L_T", ["VIABLE.include_task_loss=False"]
    ),
    "input_scale_5": Variation(
        "loss-network inputs scaled by 1/5 (L_T by 1/25)", ["VIABLE.input_scale=5.0"]
    ),
    "no_clipping": Variation("no meta-gradient clipping", ["Trainer.clip_value=None"]),
    "two_inner_steps": Variation("2 inner steps", ["VIABLE.num_inner_steps=2"]),
    "simviable_two_inner_steps": Variation(
        "2 inner steps", ["VIABLE.num_inner_steps=2"], "simviable_tanh"
    ),
    "cavia_two_inner_steps": Variation(
        "2 inner steps (control)", ["CAVIA.num_inner_steps=2"], "cavia"
    ),
}


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
    rows_a, rows_b = _selected(ROWS_A, rows), _selected(ROWS_B, rows)
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


def _selected(keys: tuple[str, ...], rows: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(key for key in keys if key in rows)


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


def write_json(record: dict, path: str) -> None:
    with open(path, "w") as f:
        json.dump(record, f, indent=2)
        f.write("\n")


def _load(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def collect(runs: list[Run], work_dir: str) -> dict:
    """Gathers every result into one JSON-able dict."""
    summary: dict = {g: {} for g in ("a_context", "b_vark", "seeds", "long", "investigation")}
    for run in runs:
        model_dir = run.model_dir(work_dir)
        record = RunDir(model_dir).read_results()
        group = run.name.split("/")[0]
        summary[group][os.path.basename(run.name)] = record
        for k in run.eval_shots:
            record.setdefault("by_k", {})[str(k)] = _load(RunDir(model_dir).evaluation(k))
    return summary


def _cell(record: dict) -> str:
    return f"{record['mean']:.3f} ± {record['ci95']:.3f}"


def _seed_records(summary: dict, key: str, seeds: tuple[int, ...]) -> list[dict]:
    return [
        summary["a_context"][f"{key}_c5"] if s == 0 else summary["seeds"][f"{key}_seed{s}"]
        for s in seeds
    ]


def _spread_row(label: str, records: list[dict]) -> str:
    means = [r["mean"] for r in records]
    average = sum(means) / len(means)
    spread = (sum((m - average) ** 2 for m in means) / (len(means) - 1)) ** 0.5
    cells = " | ".join(_cell(r) for r in records)
    return f"| {label} | {cells} | {average:.3f} | {spread:.3f} |"


def tables(
    summary: dict,
    seeds: tuple[int, ...],
    context_dims: tuple[int, ...],
    rows: tuple[str, ...] = tuple(ROWS),
) -> str:
    """The Markdown tables of (a), (b), the seed spread and the variations."""
    rows_a, rows_b = _selected(ROWS_A, rows), _selected(ROWS_B, rows)
    lines = ["### (a) MSE at K = 10 by number of context parameters C", ""]
    lines.append("| method | " + " | ".join(f"C = {c}" for c in context_dims) + " |")
    lines.append("|---|" + "---:|" * len(context_dims))
    for key in rows_a:
        cells = [_cell(summary["a_context"][f"{key}_c{c}"]) for c in context_dims]
        lines.append(f"| {ROWS[key].label} | " + " | ".join(cells) + " |")
    lines += ["", "### (b) MSE by support size K at test (trained with K ~ U{0..20}, C = 5)", ""]
    lines.append("| method | " + " | ".join(f"K = {k}" for k in EVAL_SHOTS_B) + " |")
    lines.append("|---|" + "---:|" * len(EVAL_SHOTS_B))
    for key in rows_b:
        by_k = summary["b_vark"][key]["by_k"]
        cells = " | ".join(_cell(by_k[str(k)]) for k in EVAL_SHOTS_B)
        lines.append(f"| {ROWS[key].label} | {cells} |")
    lines += ["", f"### Seeds {', '.join(map(str, seeds))}: MSE at C = 5, K = 10", ""]
    lines.append("| method | " + " | ".join(f"seed {s}" for s in seeds) + " | mean | std |")
    lines.append("|---|" + "---:|" * (len(seeds) + 2))
    for key in rows_b:
        lines.append(_spread_row(ROWS[key].label, _seed_records(summary, key, seeds)))
    if summary["long"]:
        long = [summary["long"][f"{LONG_ROW}_seed{s}"] for s in seeds]
        steps = long[0]["hparams"]["num_steps"]
        lines.append(_spread_row(f"{ROWS[LONG_ROW].label}, {steps:,} meta-updates", long))
        best = ", ".join(f"{r['checkpoint_step']:,}" for r in long)
        lines += ["", f"Best checkpoints of the {steps:,}-update runs: {best}."]
    if summary["investigation"]:
        cavia = summary["a_context"]["cavia_c5"]
        lines += ["", "### Variations (C = 5, K = 10, seed 0)", ""]
        lines.append("| variation | MSE | vs its base | vs CAVIA |")
        lines.append("|---|---:|---:|---:|")
        for key in rows_a:
            record = summary["a_context"][f"{key}_c5"]
            ratio = record["mean"] / cavia["mean"]
            lines.append(f"| {ROWS[key].label} (table a) | {_cell(record)} | 1.00 | {ratio:.2f} |")
        for name, variation in VARIATIONS.items():
            record = summary["investigation"].get(name)
            if record is None:
                continue
            base = summary["a_context"][f"{variation.base}_c5"]
            lines.append(
                f"| {ROWS[variation.base].label}, {variation.description} | {_cell(record)} "
                f"| {record['mean'] / base['mean']:.2f} | {record['mean'] / cavia['mean']:.2f} |"
            )
    return "\n".join(lines) + "\n"


def timing_table(summary: dict) -> str:
    """Training-and-evaluation time per run, by table row and kind of run (from each
    run's results.json: one core per run, two runs at a time by default)."""
    groups: dict[str, list[float]] = {}
    for group in ("a_context", "seeds", "b_vark", "long", "investigation"):
        for record in summary[group].values():
            hp = record["hparams"]
            name = hp["method"] + (f" ({hp['activation']})" if hp["activation"] != "none" else "")
            if hp["min_support"] != hp["num_support"]:
                name += f", K ~ U{{{hp['min_support']}..{hp['num_support']}}}"
            elif hp["inner_steps"] != 1 or hp["init"] != "torch":
                continue  # variations of the inner loop or init: not a row's timing
            if hp["num_steps"] != summary["num_steps"]:
                name += f", {hp['num_steps']:,} meta-updates"
            groups.setdefault(name, []).append(record["train_and_eval_seconds"])
    lines = ["| run | runs | mean time per run | range |", "|---|---:|---:|---:|"]
    for name, seconds in sorted(groups.items(), key=lambda item: sum(item[1]) / len(item[1])):
        mean = sum(seconds) / len(seconds)
        spread = f"{min(seconds):.0f}-{max(seconds):.0f} s" if len(seconds) > 1 else ""
        lines.append(f"| {name} | {len(seconds)} | {mean:.0f} s | {spread} |")
    return "\n".join(lines) + "\n"


def reference(summary: dict, seeds: tuple[int, ...], rows: tuple[str, ...] = tuple(ROWS)) -> dict:
    """The reproduction's numbers at the main job's setting (C = 5, K = 10), per row,
    for viable-train's printout (shipped as `sine_reference.json`)."""
    table = {}
    for key in _selected(ROWS_B, rows):
        records = _seed_records(summary, key, seeds)
        table[key] = {
            "label": ROWS[key].label,
            "config": ROWS[key].config,
            "mean": records[0]["mean"],
            "ci95": records[0]["ci95"],
            "seed_means": [r["mean"] for r in records],
        }
    return {
        "setting": {"context_dim": 5, "num_support": 10, "num_steps": summary["num_steps"]},
        "seeds": list(seeds),
        "source": "viable-sine-paper; docs/RESULTS.md",
        "rows": table,
    }


REFERENCE_FILE = "sine_reference.json"  # shipped in this package, copied from --report_dir


def shipped_reference() -> dict | None:
    """The reference table shipped with the package (None if it is absent)."""
    resource = importlib.resources.files("viable_tf.experiments") / REFERENCE_FILE
    if not resource.is_file():
        return None
    return json.loads(resource.read_text())


def reference_lines(record: dict, table: dict | None = None) -> list[str]:
    """Lines that set a sine run's test MSE beside the reproduction's at its setting
    (C = 5, K = 10); none for another setting or task family."""
    table = shipped_reference() if table is None else table
    hparams = record.get("hparams", {})
    setting = (hparams.get("context_dim"), hparams.get("num_support"), hparams.get("min_support"))
    if table is None or record.get("metric") != "mse" or setting != (5, 10, 10):
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
    parser.add_argument("--jobs", type=int, default=2, help="trainings at once")
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
    if args.jobs < 1:
        raise UsageError(f"--jobs must be >= 1, got {args.jobs}")
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
    threads = max(1, (os.cpu_count() or 1) // args.jobs)
    start = time.perf_counter()
    timings = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(_execute, run, args.work_dir, threads) for run in runs]
        with tqdm(total=len(runs), unit="run", desc="sine reproduction") as bar:
            for future in concurrent.futures.as_completed(futures):
                timings.append(future.result())
                bar.set_postfix_str(timings[-1]["run"], refresh=False)
                bar.update()
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
            for k in _selected(("cavia", "relviable_relu", LONG_ROW), rows)
        },
        path=os.path.join(report_dir, "sine_adapted_k4.png"),
    )
    summary["inner_loss"] = sine_figures.inner_loss_before_after(
        {
            ROWS[k].label: os.path.join(args.work_dir, "a_context", f"{k}_c5")
            for k in _selected(ROWS_B, rows)
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
