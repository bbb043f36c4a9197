"""Is one trained run better than another on the same test tasks, counting that the tasks
are shared? The question behind simVIABLE against CAVIA at Omniglot 5-way 5-shot end to
end, whose separate CIs overlap (docs/RESULTS.md).

    python -m lab.paired_difference RUN_A RUN_B [--num_support K] \
        [--gin_param=DATA_DIR='W/features']

Both runs' best checkpoints are scored by their own test protocol (the task set their
`results.json` was measured on: the same fixed tasks for runs of one family and
settings, which the probe checks), and the per-task difference A - B is summarised
with its 95% CI. Two methods' separate CIs can overlap while the paired one excludes 0:
the tasks that are hard for one are mostly hard for the other, and the pairing removes
that shared spread. Prints one Markdown row.
"""

from __future__ import annotations

import argparse
import os

import numpy as np


def per_task(model_dir: str, num_support: int | None, gin_params: tuple[str, ...]):
    """(the run's per-task test metric [N], the first task's support inputs, metric name)."""
    from viable_tf.config import load_run
    from viable_tf.evaluation.protocols import test_protocol

    run = load_run(model_dir, gin_params)
    evaluator = test_protocol(run.tasks, num_support=num_support)
    evaluation = evaluator(run.learner)
    first = next(iter(evaluator.batches())).support_x[0].numpy()
    return evaluation.per_task, first, evaluation.metric


def paired_difference(
    run_a: str, run_b: str, num_support: int | None = None, gin_params: tuple[str, ...] = ()
) -> dict:
    """{'a', 'b', 'difference': MeanWithCI of A, B and A - B per task, 'metric'}; raises
    ValueError if the two runs are not scored on the same tasks."""
    from viable_tf.evaluation.statistics import mean_confidence_interval

    a, first_a, metric = per_task(run_a, num_support, gin_params)
    b, first_b, metric_b = per_task(run_b, num_support, gin_params)
    if metric != metric_b or a.shape != b.shape or not np.array_equal(first_a, first_b):
        raise ValueError(
            f"{run_a} and {run_b} are not scored on the same test tasks "
            f"({metric} on {a.size} tasks against {metric_b} on {b.size}, or other tasks): "
            "expected two runs of one task family and setting"
        )
    return {
        "a": mean_confidence_interval(a),
        "b": mean_confidence_interval(b),
        "difference": mean_confidence_interval(a - b),
        "metric": metric,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_a")
    parser.add_argument("run_b")
    parser.add_argument("--num_support", type=int, default=None)
    parser.add_argument("--gin_param", action="append", default=[])
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    found = paired_difference(args.run_a, args.run_b, args.num_support, tuple(args.gin_param))
    scale = 100.0 if found["metric"] == "accuracy" else 1.0
    cells = [
        f"{scale * found[key].mean:.2f} ± {scale * found[key].ci95:.2f}"
        for key in ("a", "b", "difference")
    ]
    name = lambda path: os.path.basename(path.rstrip("/"))  # noqa: E731
    print(f"| A | B | A ({found['metric']}) | B | A - B, paired over {found['a'].num} tasks |")
    print("|---|---|---:|---:|---:|")
    print(f"| {name(args.run_a)} | {name(args.run_b)} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
