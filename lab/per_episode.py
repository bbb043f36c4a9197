"""Research record: each test episode's accuracy of trained runs, for paired comparisons.

    python -m lab.per_episode --out DIR --gin_param="DATA_DIR='W/features'" RUN [RUN ...]

Restores each run's best checkpoint, scores it by its own test protocol (the fixed
episodes its results.json was measured on) and writes DIR/<run>.json with the per-task
metric; the mean is checked against the run's results.json, which it must repeat
(to 0.1 points: another machine's kernels may move an episode's last bits).
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--out", required=True)
    parser.add_argument("--gin_param", action="append", default=[])
    args = parser.parse_args()
    from lab.paired_difference import per_task as scored
    from viable_tf.run_dir import RunDir

    os.makedirs(args.out, exist_ok=True)
    for model_dir in args.runs:
        name = os.path.basename(model_dir.rstrip("/"))
        path = os.path.join(args.out, f"{name}.json")
        if os.path.exists(path):
            continue
        values, _, metric = scored(model_dir, None, tuple(args.gin_param))
        reported = RunDir(model_dir).read_results()["mean"]
        per_task = np.asarray(values, np.float64)
        record = {
            "run": name,
            "metric": metric,
            "mean": float(per_task.mean()),
            "reported_mean": reported,
            "per_task": per_task.tolist(),
        }
        with open(path, "w") as f:
            json.dump(record, f)
        scale = 100.0 if metric == "accuracy" else 1.0
        mean, shown = scale * per_task.mean(), scale * reported
        print(f"{name}: {mean:.4g} (reported {shown:.4g})", flush=True)
        if abs(per_task.mean() - reported) > 1e-3:
            raise SystemExit(f"{name}: the mean differs from the reported one")


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    main()
