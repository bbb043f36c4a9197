"""Where the end-to-end Omniglot runs stand (docs/omniglot/end_to_end.md), read from their
model directories while they train or after: meta-updates done, the validation curve's
best and last points, validations since the best (the patience rule stops a run at 10),
the training wall-clock across resumptions, and the test result once written.

    .venv/bin/python tools/e2e_status.py --work_dir /work/runs/e2e
"""

from __future__ import annotations

import argparse
import glob
import json
import os

import tensorflow as tf
from tensorboard.backend.event_processing import event_accumulator

from viable_tf.training.checkpoints import WallClock


def validation_curve(model_dir: str) -> list[tuple[int, float]]:
    """(step, validation accuracy) from every events file of the run, by step."""
    points = {}
    for path in sorted(glob.glob(os.path.join(model_dir, "events.out.tfevents.*"))):
        accumulator = event_accumulator.EventAccumulator(
            path, size_guidance={event_accumulator.TENSORS: 0}
        )
        accumulator.Reload()
        if "validation/accuracy" in accumulator.Tags()["tensors"]:
            for event in accumulator.Tensors("validation/accuracy"):
                points[event.step] = float(tf.make_ndarray(event.tensor_proto))
    return sorted(points.items())


def status(model_dir: str) -> dict:
    curve = validation_curve(model_dir)
    clock = WallClock.read(os.path.join(model_dir, "checkpoints"))
    row = {"run": os.path.basename(model_dir), "validations": len(curve)}
    if curve:
        best_step, best = max(curve, key=lambda point: (point[1], -point[0]))
        last_step, last = curve[-1]
        row.update(
            step=last_step,
            best=round(100 * best, 1),
            best_at=best_step,
            last=round(100 * last, 1),
            since_best=sum(1 for step, _ in curve if step > best_step),
        )
    if clock:
        row["wall_clock_h"] = round(clock[max(clock, key=int)] / 3600, 2)
    results = os.path.join(model_dir, "results.json")
    if os.path.exists(results):
        with open(results) as f:
            record = json.load(f)
        row["test"] = f"{100 * record['mean']:.1f} ± {100 * record['ci95']:.1f}"
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work_dir", required=True)
    args = parser.parse_args()
    columns = ("run", "step", "validations", "best", "best_at", "last", "since_best")
    columns += ("wall_clock_h", "test")
    print("| " + " | ".join(columns) + " |")
    print("|---" * len(columns) + "|")
    for model_dir in sorted(glob.glob(os.path.join(args.work_dir, "runs", "*"))):
        row = status(model_dir)
        print("| " + " | ".join(str(row.get(c, "")) for c in columns) + " |")


if __name__ == "__main__":
    main()
