"""Research record: the sine runs behind two questions, each a `viable-train` process.

1. The last factors of the sine gap (relVIABLE at C = 5, K = 10 against the paper's):
   a set-level readout of the relation network, the task loss fed as the support set's
   mean (instead of, and beside, each point's own), on seeds 0, 1, 2, ReLU and tanh,
   beside the shipped relVIABLE of the same seed and commit (paired over test tasks),
   and the K table of the candidate that helps (the task loss as the set's mean, tanh).
2. Learn the step or the loss: Meta-SGD under CAVIA and MAML (C = 1..5 at seed 0,
   seeds 0, 1, 2 at C = 5, and the K table), relVIABLE descended at Meta-SGD's learned
   rates, and CAVIA and MAML rerun beside them for paired differences.

    python -m lab.sine_candidates --work_dir=W [--jobs=2] [--num_steps=50000] [--only=PREFIX]

Finished runs (results.json present) are skipped, so rerunning resumes. Each run's
per-task test MSEs are in its per_task.json; `lab/records.py sine` turns the runs into
result records.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os

from viable_tf.experiments.sine_paper import Run, _execute, _expected_cost, finished

SEEDS = (0, 1, 2)
EVAL_SHOTS = (0, 1, 2, 3, 4, 20)

#: The relation network's candidates (issue: the sine headline's last factor).
CANDIDATES = {
    "base": [],
    "set_readout": ["RelationLossNetwork.readout='set'"],
    "loss_mean": ["TaskLoss.of='mean'"],
    "loss_both": ["TaskLoss.of='both'"],
}


def plan(num_steps: int) -> list[Run]:
    common = [f"NUM_STEPS={num_steps}"]
    runs = []
    for activation in ("tanh", "relu"):
        for name, params in CANDIDATES.items():
            for seed in SEEDS:
                runs.append(
                    Run(
                        f"relation/{name}_{activation}_seed{seed}",
                        f"sine/relviable_{activation}.gin",
                        [*common, f"SEED={seed}", *params],
                        row=f"relviable_{activation}",
                    )
                )
    # The candidate that helps at C = 5, K = 10 (docs/comparisons.md), across K: trained
    # with K drawn from 0..20 as the K table's rows are, tested at each K of the table.
    runs.append(
        Run(
            "relation/loss_mean_tanh_vark",
            "sine/relviable_vark_tanh.gin",
            [*common, "SEED=0", "TaskLoss.of='mean'"],
            eval_shots=EVAL_SHOTS,
            row="relviable_tanh",
        )
    )
    for method in ("cavia", "maml"):
        for base in (method, f"metasgd_{method}"):
            # C = 5 context numbers for both (MAML's are inputs it adapts with its weights,
            # as in the C table of the reproduction).
            contexts = (5,) if base == method else (1, 2, 3, 4, 5)
            for c in contexts:
                for seed in SEEDS if c == 5 else (0,):
                    runs.append(
                        Run(
                            f"step/{base}_c{c}_seed{seed}",
                            f"sine/{base}.gin",
                            [*common, f"SEED={seed}", f"CONTEXT_DIM={c}"],
                            row=method,
                        )
                    )
            if base != method:
                runs.append(
                    Run(
                        f"step/{base}_vark",
                        f"sine/{base}_vark.gin",
                        [*common, "SEED=0"],
                        eval_shots=EVAL_SHOTS,
                        row=method,
                    )
                )
    for seed in SEEDS:
        runs.append(
            Run(
                f"step/metasgd_relviable_seed{seed}",
                "sine/metasgd_relviable.gin",
                [*common, f"SEED={seed}"],
                row="relviable_tanh",
            )
        )
    return sorted(runs, key=_expected_cost, reverse=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work_dir", required=True)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--num_steps", type=int, default=50_000)
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    runs = [r for r in plan(args.num_steps) if r.name.startswith(args.only)]
    todo = [r for r in runs if not finished(r, args.work_dir)]
    print(f"{len(runs) - len(todo)} of {len(runs)} runs finished; {len(todo)} to go", flush=True)
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = {pool.submit(_execute, r, args.work_dir, 1): r for r in todo}
        for future in concurrent.futures.as_completed(futures):
            print(future.result(), flush=True)


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    main()
