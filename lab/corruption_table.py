"""Sine with outliers in the support sets (docs/method.md §8): each method trained clean and
trained with m outliers of K = 10, each tested at every m, beside the oracle that drops
the outliers (trained and tested on the K - m clean points).

    .venv/bin/python lab/corruption_table.py --work_dir runs/outliers \
        [--train_outliers 0,2] [--test_outliers 0,1,2,3] [--jobs 2] [--num_steps 25000] \
        [--inner_steps 3] [--seed 1]

Every run is gin/sine/<method>.gin + quick.gin + outliers.gin through viable-train (one
thread each, `jobs` at a time); the robust baselines are CAVIA with a Huber or an absolute-
error inner loss (cavia_huber.gin, cavia_absolute.gin: its outer loss stays the MSE), and
*_agreement.gin the learned losses with each point's gradient agreement. Each trained run is
then tested on the 1,000 fixed test tasks of the protocol with m outliers in their support
sets (the query grid stays clean). `--inner_steps S` trains and tests every learner with S
inner steps instead of its config's (runs under W/steps<S>/), `--seed N` trains with another
seed (the test tasks stay the protocol's; runs under W/seed<N>/). `--noise_std S` makes the
table of Gaussian noise on every support y instead (docs/method.md §8): each method trained
clean (its `_train_m0` run, shared with the outlier table) and with y + N(0, S^2), each
tested at both, no oracle (no point is clean to keep). Rerun to resume: finished runs and
tests are read back. Prints a Markdown table (test MSE, mean ± 95% CI) and writes W/table.md
(with --noise_std, W/table_s<S>.md).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys

GIN_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "gin")
#: row -> its shipped config: the robust hand-made inner losses (cavia_huber,
#: cavia_absolute) and the learned ones with each point's gradient agreement in its features
#: (the paper's argument for a learned loss: *_agreement).
METHODS = {
    method: f"sine/{method}.gin"
    for method in (
        "cavia",
        "cavia_huber",
        "cavia_absolute",
        "maml",
        "simviable",
        "relviable",
        "attviable",
        "simviable_agreement",
        "relviable_agreement",
        "attviable_agreement",
    )
}
LABELS = {
    "cavia": "CAVIA",
    "cavia_huber": "CAVIA, Huber inner loss",
    "cavia_absolute": "CAVIA, absolute-error inner loss",
    "maml": "MAML",
    "simviable": "simVIABLE",
    "relviable": "relVIABLE",
    "attviable": "attVIABLE",
    "simviable_agreement": "simVIABLE, gradient-agreement features",
    "relviable_agreement": "relVIABLE, gradient-agreement features",
    "attviable_agreement": "attVIABLE, gradient-agreement features",
}
#: trained and tested on the clean points only
ORACLES = ("cavia", "relviable", "attviable", "relviable_agreement", "attviable_agreement")


def _inner_steps_binding(config: str, steps: int) -> str:
    """`steps` inner steps for the learner a method's config binds, named as the config
    (or a config it includes) binds its num_inner_steps (CAVIA, MAML, VIABLE, ...)."""
    path = os.path.join(GIN_DIR, config)
    with open(path) as f:
        text = f.read()
    found = re.search(r"^(\w+)\.num_inner_steps\s*=", text, re.MULTILINE)
    if found is not None:
        return f"{found.group(1)}.num_inner_steps={steps}"
    for include in re.findall(r"^include\s+'([^']+)'", text, re.MULTILINE):
        included = os.path.relpath(os.path.join(os.path.dirname(path), include), GIN_DIR)
        try:
            return _inner_steps_binding(included, steps)
        except ValueError:
            continue
    raise ValueError(f"gin/{config} binds no num_inner_steps")


def _method_bindings(method: str, args: argparse.Namespace) -> tuple[str, tuple[str, ...]]:
    """A method's config and its bindings, with --inner_steps and --seed applied."""
    config, bindings = METHODS[method], ()
    if args.inner_steps is not None:
        bindings = (*bindings, _inner_steps_binding(config, args.inner_steps))
    if args.seed is not None:
        bindings = (*bindings, f"SEED={args.seed}")
    return config, bindings


def outlier_runs(args: argparse.Namespace, methods: list[str]) -> dict:
    """The outlier table's trainings, {run: (config, bindings)}: each method trained with
    each --train_outliers m, and each oracle on the K - m clean points of each tested m."""
    trained, tested = _ints(args.train_outliers), _ints(args.test_outliers)
    runs = {}
    for method in methods:
        config, bindings = _method_bindings(method, args)
        for m in trained:
            runs[f"{method}_train_m{m}"] = (config, (*bindings, f"OUTLIERS={m}"))
        if method in ORACLES:
            for m in sorted(set(tested) - {0}):
                clean = args.num_support - m
                oracle = (*bindings, "OUTLIERS=0", f"NUM_SUPPORT={clean}")
                runs[f"{method}_oracle_k{clean}"] = (config, oracle)
    return runs


#: The configs every run of the table adds to its method's (train() below).
COMMON_CONFIGS = ("sine/quick.gin", "sine/outliers.gin")


def _write_table(lines: list[str], path: str) -> None:
    """The Markdown table's lines, written to path and printed."""
    text = "\n".join(lines) + "\n"
    with open(path, "w") as f:
        f.write(text)
    print(text)


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def train(work_dir: str, run: str, config: str, bindings: tuple[str, ...], steps: int) -> str:
    model_dir = os.path.join(work_dir, "runs", run)
    if os.path.exists(os.path.join(model_dir, "results.json")):
        return model_dir
    os.makedirs(model_dir, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "viable_tf.cli.train",
        f"--gin_file={config}",
        *(f"--gin_file={c}" for c in COMMON_CONFIGS),
        f"--gin_param=NUM_STEPS={steps}",
        "--gin_param=Trainer.show_progress=False",
        *(f"--gin_param={b}" for b in bindings),
        f"--model_dir={model_dir}",
    ]
    env = {
        **os.environ,
        "TF_NUM_INTRAOP_THREADS": "1",
        "TF_NUM_INTEROP_THREADS": "1",
        "TF_CPP_MIN_LOG_LEVEL": "3",
    }
    with open(os.path.join(model_dir, "log.txt"), "a") as log:
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    if done.returncode:
        raise RuntimeError(f"{run} failed; see {model_dir}/log.txt")
    return model_dir


def test(
    model_dir: str, outliers: int, num_support: int | None = None, noise_std: float = 0.0
) -> dict:
    """The run's best checkpoint on the test tasks with `outliers` in each support set
    and N(0, noise_std^2) on each support y."""
    name = f"test_m{outliers}" + (f"_s{noise_std:g}" if noise_std else "")
    path = os.path.join(model_dir, f"{name}.json")
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    from viable_tf.config import load_run
    from viable_tf.training.experiment import evaluate_loaded, write_json

    run = load_run(
        model_dir, (f"SineTasks.outliers={outliers}", f"SineTasks.noise_std={noise_std!r}")
    )
    record, _ = evaluate_loaded(run, num_support=num_support)
    write_json(record, path)
    return record


def _cell(record: dict) -> str:
    return f"{record['mean']:.3f} ± {record['ci95']:.3f}"


def parser() -> argparse.ArgumentParser:
    """The command line (also what a record's command is dry-run with)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work_dir", required=True)
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--train_outliers", default="0,2")
    parser.add_argument("--test_outliers", default="0,1,2,3")
    parser.add_argument("--num_support", type=int, default=10)
    parser.add_argument("--num_steps", type=int, default=25000)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--inner_steps", type=int, default=None, help="default: the configs'")
    parser.add_argument("--seed", type=int, default=None, help="default: the configs' (0)")
    parser.add_argument(
        "--noise_std", type=float, default=None, help="the Gaussian-noise table at this std"
    )
    parser.add_argument(
        "--figure", default=None, help="PNG: CAVIA and relVIABLE trained with outliers, adapted"
    )
    return parser


def main() -> None:
    parser_ = parser()
    args = parser_.parse_args()
    methods = [m for m in args.methods.split(",") if m]
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        parser_.error(f"unknown methods {unknown}; expected some of {sorted(METHODS)}")
    trained, tested = _ints(args.train_outliers), _ints(args.test_outliers)
    if any(m > args.num_support for m in trained + tested):
        parser_.error(f"outliers must be <= num_support={args.num_support}")
    if args.inner_steps is not None and args.inner_steps < 1:
        parser_.error(f"--inner_steps must be >= 1, got {args.inner_steps}")
    if args.noise_std is not None and not args.noise_std > 0:
        parser_.error(f"--noise_std must be > 0, got {args.noise_std}")
    work_dir = args.work_dir
    if args.inner_steps is not None:
        work_dir = os.path.join(work_dir, f"steps{args.inner_steps}")
    if args.seed is not None:
        work_dir = os.path.join(work_dir, f"seed{args.seed}")
    if args.noise_std is not None:
        return noise_table(args, methods, work_dir)
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        jobs = {
            run: pool.submit(train, work_dir, run, config, bindings, args.num_steps)
            for run, (config, bindings) in outlier_runs(args, methods).items()
        }
    dirs = {run: job.result() for run, job in jobs.items()}
    columns = [(tm, m) for tm in trained for m in tested]
    lines = [
        "| method | " + " | ".join(f"trained m={tm}, tested m={m}" for tm, m in columns) + " |",
        "|---|" + "---:|" * len(columns),
    ]
    for method in methods:
        cells = [_cell(test(dirs[f"{method}_train_m{tm}"], m)) for tm, m in columns]
        lines.append(f"| {LABELS[method]} | " + " | ".join(cells) + " |")
        if method in ORACLES:
            cells = [
                _cell(test(dirs[f"{method}_oracle_k{args.num_support - m}"], 0)) if m else ""
                for _, m in columns
            ]
            label = f"{LABELS[method]}, oracle (the K - m clean points only)"
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    _write_table(lines, os.path.join(work_dir, "table.md"))
    m = max(trained)
    if args.figure and m and {"cavia", "relviable"} <= set(methods):
        from viable_tf.experiments.sine_figures import adapted_with_outliers

        runs = {"CAVIA": dirs[f"cavia_train_m{m}"], "relVIABLE": dirs[f"relviable_train_m{m}"]}
        adapted_with_outliers(runs, path=args.figure, outliers=m)


def noise_table(args: argparse.Namespace, methods: list[str], work_dir: str) -> None:
    """--noise_std S: every method trained clean and with N(0, S^2) on every support y,
    each tested at both."""
    std = args.noise_std
    trained = {0.0: "m0", std: f"s{std:g}"}
    jobs = {}
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for method in methods:
            config, bindings = _method_bindings(method, args)
            for s, name in trained.items():
                run = f"{method}_train_{name}"
                noise = (*bindings, "OUTLIERS=0", f"NOISE_STD={s!r}")
                jobs[run] = pool.submit(train, work_dir, run, config, noise, args.num_steps)
    dirs = {run: job.result() for run, job in jobs.items()}
    columns = [(ts, s) for ts in trained for s in trained]
    lines = [
        "| method | " + " | ".join(f"trained s={ts:g}, tested s={s:g}" for ts, s in columns) + " |",
        "|---|" + "---:|" * len(columns),
    ]
    for method in methods:
        cells = [
            _cell(test(dirs[f"{method}_train_{trained[ts]}"], 0, noise_std=s)) for ts, s in columns
        ]
        lines.append(f"| {LABELS[method]} | " + " | ".join(cells) + " |")
    _write_table(lines, os.path.join(work_dir, f"table_s{std:g}.md"))


if __name__ == "__main__":
    main()
