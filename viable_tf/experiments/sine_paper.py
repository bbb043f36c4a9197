"""viable-sine-paper: regenerate every sine result of the paper (SPEC §4) from scratch.

    viable-sine-paper --work_dir=runs/sine_paper [--jobs=2] [--num_steps=50000]

(a) MSE of MAML, CAVIA, simVIABLE and relVIABLE for C = 1..5 context parameters, K = 10;
(b) CAVIA, simVIABLE and relVIABLE trained with K drawn from {0..20}, tested at
    K in {0, 1, 2, 3, 4, 20};
(c) a figure of one task adapted from 4 points (truth, points, CAVIA and relVIABLE);
(d) a figure of the pre- and post-update inner loss on test tasks;
plus extra seeds of the C = 5, K = 10 comparison of CAVIA, simVIABLE and relVIABLE,
and variations of relVIABLE (VARIATIONS) for the reproduction study.

Each training is one `viable-train` process; `--jobs` of them run at once, each
with its share of the cores. A finished run (its results.json exists) is skipped and
an interrupted one resumes, so rerunning the command picks up where it stopped.
Writes `W/summary.json`, `W/tables.md` and the figures under `--report_dir`.
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
from typing import NamedTuple

from tqdm import tqdm

from viable_tf.cli.common import UsageError, run_main

METHODS_A = ("maml", "cavia", "simviable", "relviable")
METHODS_B = ("cavia", "simviable", "relviable")
CONTEXT_DIMS = (1, 2, 3, 4, 5)
EVAL_SHOTS_B = (0, 1, 2, 3, 4, 20)
LABELS = {"maml": "MAML", "cavia": "CAVIA", "simviable": "simVIABLE", "relviable": "relVIABLE"}


class Variation(NamedTuple):
    """One change a careful reproducer would question, trained at C = 5, seed 0."""

    description: str
    params: list[str]
    config: str = "sine/relviable.gin"
    eval_shots: tuple[int, ...] = ()


#: The reproduction study: each variation changes one thing; the faithful runs are
#: (a)'s C = 5 (and (b) for the K ~ U{0..20} one).
VARIATIONS = {
    "no_x_in_pairs": Variation(
        "pair features without x", ["RelationLossNetwork.include_inputs=False"]
    ),
    "no_task_loss_in_pairs": Variation(
        "pair features without L_T", ["VIABLE.include_task_loss=False"]
    ),
    "softplus_output": Variation(
        "loss output through softplus (non-negative)",
        ["RelationLossNetwork.output_activation='softplus'"],
    ),
    "softplus_hidden": Variation(
        "softplus hidden units", ["RelationLossNetwork.activation='softplus'"]
    ),
    "input_scale_5": Variation(
        "loss-network inputs scaled by 1/5 (L_T by 1/25)", ["VIABLE.input_scale=5.0"]
    ),
    "no_clipping": Variation("no meta-gradient clipping", ["Trainer.clip_value=None"]),
    "two_inner_steps": Variation("2 inner steps", ["VIABLE.num_inner_steps=2"]),
    "double_length": Variation("100,000 meta-updates", ["NUM_STEPS=100000"]),
    "tanh_hidden": Variation("tanh hidden units", ["RelationLossNetwork.activation='tanh'"]),
    "softplus_hidden_and_output": Variation(
        "softplus hidden units and output",
        [
            "RelationLossNetwork.activation='softplus'",
            "RelationLossNetwork.output_activation='softplus'",
        ],
    ),
    "simviable_softplus_hidden": Variation(
        "simVIABLE with softplus hidden units",
        ["SimpleLossNetwork.activation='softplus'"],
        "sine/simviable.gin",
    ),
    "simviable_tanh_hidden": Variation(
        "simVIABLE with tanh hidden units",
        ["SimpleLossNetwork.activation='tanh'"],
        "sine/simviable.gin",
    ),
    "cavia_two_inner_steps": Variation(
        "CAVIA with 2 inner steps (control)", ["CAVIA.num_inner_steps=2"], "sine/cavia.gin"
    ),
    "simviable_two_inner_steps": Variation(
        "simVIABLE with 2 inner steps", ["VIABLE.num_inner_steps=2"], "sine/simviable.gin"
    ),
    "tanh_hidden_vark": Variation(
        "tanh hidden units, trained with K ~ U{0..20}",
        ["RelationLossNetwork.activation='tanh'"],
        "sine/relviable_vark.gin",
        EVAL_SHOTS_B,
    ),
}

GIN_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "gin")


@dataclass
class Run:
    """One training: a method's config with bindings, in its own model directory."""

    name: str
    config: str
    params: list[str] = field(default_factory=list)
    eval_shots: tuple[int, ...] = ()

    def model_dir(self, work_dir: str) -> str:
        return os.path.join(work_dir, self.name)


def plan(
    *,
    num_steps: int,
    seeds: tuple[int, ...],
    extra_params: list[str],
    context_dims: tuple[int, ...] = CONTEXT_DIMS,
    investigate: bool = True,
) -> list[Run]:
    """All trainings of the reproduction, the slowest first."""
    common = [f"NUM_STEPS={num_steps}", *extra_params]
    runs = []
    for method in METHODS_B:
        runs.append(
            Run(
                f"b_vark/{method}",
                f"sine/{method}_vark.gin",
                [*common, "SEED=0"],
                eval_shots=EVAL_SHOTS_B,
            )
        )
    for method in METHODS_A:
        for c in context_dims:
            runs.append(
                Run(f"a_context/{method}_c{c}", f"sine/{method}.gin", [*common, f"CONTEXT_DIM={c}"])
            )
    for method in METHODS_B:
        for seed in seeds:
            if seed != 0:  # seed 0 at C = 5 is run (a)'s
                runs.append(
                    Run(
                        f"seeds/{method}_seed{seed}",
                        f"sine/{method}.gin",
                        [*common, f"SEED={seed}"],
                    )
                )
    if investigate:
        for name, variation in VARIATIONS.items():
            # later bindings win: a variation may override NUM_STEPS
            runs.append(
                Run(
                    f"investigation/{name}",
                    variation.config,
                    [*common, *variation.params],
                    eval_shots=variation.eval_shots,
                )
            )
    order = {"relviable": 0, "simviable": 1, "maml": 2, "cavia": 3}
    return sorted(runs, key=lambda r: (not r.name.startswith("b_"), order[_method(r)]))


def _method(run: Run) -> str:
    return os.path.basename(run.config).removesuffix(".gin").removesuffix("_vark")


def _execute(run: Run, work_dir: str, threads: int) -> dict:
    """Trains (or resumes) one run and evaluates it at its extra K; returns timings."""
    model_dir = run.model_dir(work_dir)
    env = {
        **os.environ,
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "TF_NUM_INTRAOP_THREADS": str(threads),
        "TF_NUM_INTEROP_THREADS": str(threads),
    }
    bin_dir = os.path.dirname(sys.executable)
    log_path = os.path.join(model_dir, "log.txt")
    os.makedirs(model_dir, exist_ok=True)
    start = time.perf_counter()
    with open(log_path, "a") as log:
        if not os.path.exists(os.path.join(model_dir, "results.json")):
            command = [
                os.path.join(bin_dir, "viable-train"),
                f"--gin_file={os.path.join(GIN_DIR, run.config)}",
                *(f"--gin_param={p}" for p in [*run.params, "Trainer.show_progress=False"]),
                f"--model_dir={model_dir}",
            ]
            subprocess.run(command, check=True, stdout=log, stderr=subprocess.STDOUT, env=env)
        missing = [k for k in run.eval_shots if not os.path.exists(_eval_path(model_dir, k))]
        if missing:
            command = [
                os.path.join(bin_dir, "viable-eval"),
                f"--model_dir={model_dir}",
                f"--num_support={','.join(map(str, missing))}",
            ]
            subprocess.run(command, check=True, stdout=log, stderr=subprocess.STDOUT, env=env)
    return {"run": run.name, "seconds": time.perf_counter() - start}


def _eval_path(model_dir: str, k: int) -> str:
    return os.path.join(model_dir, f"eval_k{k}.json")


def _load(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def collect(runs: list[Run], work_dir: str) -> dict:
    """Gathers every result into one JSON-able dict."""
    summary: dict = {"a_context": {}, "b_vark": {}, "seeds": {}, "investigation": {}}
    for run in runs:
        model_dir = run.model_dir(work_dir)
        record = _load(os.path.join(model_dir, "results.json"))
        group = run.name.split("/")[0]
        summary[group][os.path.basename(run.name)] = record
        for k in run.eval_shots:
            record.setdefault("by_k", {})[str(k)] = _load(_eval_path(model_dir, k))
    return summary


def _cell(record: dict) -> str:
    return f"{record['mean']:.3f} ± {record['ci95']:.3f}"


def tables(summary: dict, seeds: tuple[int, ...], context_dims: tuple[int, ...]) -> str:
    """The Markdown tables of (a), (b) and the seed spread."""
    lines = ["### (a) MSE at K = 10 by number of context parameters C", ""]
    lines.append("| method | " + " | ".join(f"C = {c}" for c in context_dims) + " |")
    lines.append("|---|" + "---:|" * len(context_dims))
    for method in METHODS_A:
        cells = [_cell(summary["a_context"][f"{method}_c{c}"]) for c in context_dims]
        lines.append(f"| {LABELS[method]} | " + " | ".join(cells) + " |")
    lines += ["", "### (b) MSE by support size K at test (trained with K ~ U{0..20}, C = 5)", ""]
    lines.append("| method | " + " | ".join(f"K = {k}" for k in EVAL_SHOTS_B) + " |")
    lines.append("|---|" + "---:|" * len(EVAL_SHOTS_B))
    for method in METHODS_B:
        by_k = summary["b_vark"][method]["by_k"]
        lines.append(
            f"| {LABELS[method]} | " + " | ".join(_cell(by_k[str(k)]) for k in EVAL_SHOTS_B) + " |"
        )
    if summary["investigation"]:
        cavia = summary["a_context"]["cavia_c5"]
        lines += ["", "### Variations (C = 5, K = 10, seed 0)", ""]
        lines.append("| variation | MSE | vs faithful | vs CAVIA |")
        lines.append("|---|---:|---:|---:|")
        lines.append(f"| CAVIA (table a) | {_cell(cavia)} | | 1.00 |")
        for method in ("relviable", "simviable"):
            faithful = summary["a_context"][f"{method}_c5"]  # one row each, as reference
            ratio = faithful["mean"] / cavia["mean"]
            lines.append(
                f"| {LABELS[method]}, faithful (table a) | {_cell(faithful)} | 1.00 | {ratio:.2f} |"
            )
        for name, variation in VARIATIONS.items():
            record = summary["investigation"].get(name)
            if record is None or variation.eval_shots:
                continue
            faithful = summary["a_context"][f"{record['method']}_c5"]
            label = variation.description
            if variation.config == "sine/relviable.gin":
                label = f"relVIABLE, {label}"
            lines.append(
                f"| {label} | {_cell(record)} | {record['mean'] / faithful['mean']:.2f} "
                f"| {record['mean'] / cavia['mean']:.2f} |"
            )
        for name, variation in VARIATIONS.items():
            record = summary["investigation"].get(name)
            if record is None or not variation.eval_shots:
                continue
            lines += ["", f"### relVIABLE, {variation.description}: MSE by K at test", ""]
            lines.append("| method | " + " | ".join(f"K = {k}" for k in EVAL_SHOTS_B) + " |")
            lines.append("|---|" + "---:|" * len(EVAL_SHOTS_B))
            rows = [
                ("CAVIA (table b)", summary["b_vark"]["cavia"]["by_k"]),
                ("relVIABLE (table b)", summary["b_vark"]["relviable"]["by_k"]),
                (f"relVIABLE, {variation.description}", record["by_k"]),
            ]
            for label, by_k in rows:
                cells = " | ".join(_cell(by_k[str(k)]) for k in EVAL_SHOTS_B)
                lines.append(f"| {label} | {cells} |")
    lines += ["", f"### Seeds {', '.join(map(str, seeds))}: MSE at C = 5, K = 10", ""]
    lines.append("| method | " + " | ".join(f"seed {s}" for s in seeds) + " | mean | std |")
    lines.append("|---|" + "---:|" * (len(seeds) + 2))
    for method in METHODS_B:
        records = [
            summary["a_context"][f"{method}_c5"]
            if s == 0
            else summary["seeds"][f"{method}_seed{s}"]
            for s in seeds
        ]
        means = [r["mean"] for r in records]
        spread = (sum((m - sum(means) / len(means)) ** 2 for m in means) / (len(means) - 1)) ** 0.5
        lines.append(
            f"| {LABELS[method]} | "
            + " | ".join(_cell(r) for r in records)
            + f" | {sum(means) / len(means):.3f} | {spread:.3f} |"
        )
    return "\n".join(lines) + "\n"


def _integers(flag: str, text: str) -> tuple[int, ...]:
    try:
        return tuple(int(s) for s in text.split(","))
    except ValueError:
        raise UsageError(f"{flag} must be comma-separated integers, got {text!r}") from None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="viable-sine-paper", description=__doc__.split("\n")[0])
    parser.add_argument("--work_dir", default="runs/sine_paper", help="where runs go")
    parser.add_argument("--report_dir", default=None, help="figures and tables (default: work_dir)")
    parser.add_argument("--jobs", type=int, default=2, help="trainings at once")
    parser.add_argument("--num_steps", type=int, default=50_000, help="meta-updates per run")
    parser.add_argument("--seeds", default="0,1,2", help="seeds of the C = 5, K = 10 comparison")
    parser.add_argument("--context_dims", default="1,2,3,4,5", help="C values of table (a)")
    parser.add_argument(
        "--no_investigate", action="store_true", help="skip the relVIABLE variations"
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
    report_dir = args.report_dir or args.work_dir
    os.makedirs(report_dir, exist_ok=True)
    runs = plan(
        num_steps=args.num_steps,
        seeds=seeds,
        extra_params=args.gin_param,
        context_dims=context_dims,
        investigate=not args.no_investigate,
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
    summary["wall_clock_seconds"] = round(time.perf_counter() - start, 1)
    summary["run_seconds"] = {t["run"]: round(t["seconds"], 1) for t in timings}
    summary["command"] = " ".join(["viable-sine-paper", *sys.argv[1:]])

    from viable_tf.experiments import sine_figures

    sine_figures.adapted_from_four_points(
        cavia_dir=os.path.join(args.work_dir, "b_vark", "cavia"),
        relviable_dir=os.path.join(args.work_dir, "b_vark", "relviable"),
        path=os.path.join(report_dir, "sine_adapted_k4.png"),
    )
    summary["inner_loss"] = sine_figures.inner_loss_before_after(
        {m: os.path.join(args.work_dir, "a_context", f"{m}_c5") for m in METHODS_B},
        path=os.path.join(report_dir, "sine_inner_loss.png"),
    )
    with open(os.path.join(args.work_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    text = tables(summary, seeds, context_dims)
    with open(os.path.join(report_dir, "sine_tables.md"), "w") as f:
        f.write(text)
    print(text)
    print(f"wall-clock: {summary['wall_clock_seconds'] / 60:.1f} min; report in {report_dir}")
    return 0


def main() -> None:
    run_main(_main, "viable-sine-paper")


if __name__ == "__main__":
    main()
