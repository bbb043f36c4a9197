"""Where the end-to-end Omniglot runs stand (docs/lab/omniglot/end_to_end.md), read from their
model directories while they train or after: meta-updates done, the validation curve's
best and last points, validations since the best (the patience rule stops a run at 10),
the jumps of its training loss (the summary points after 1,000 updates above 1.3 times
the median of the points within five of them, itself included, and at least 0.1 above
it: a meta-batch or a few whose loss exploded, as relVIABLE's at 20 ways; the bar of 0.1
keeps a converged run's small losses from jumping by sampling alone), the training
wall-clock across resumptions, and the test result once written. A run carried from
another machine (lab/carry_runs.py) reads the curves its earlier machines wrote from its
curves.json, beneath its own events.

    .venv/bin/python lab/e2e_status.py --work_dir /work/runs/e2e

With `--pace 2000,6000,13500`: how far each run's meta-training has gone by those
meta-updates, beside its validation there: the training query loss (`train/meta_loss`,
the outer objective, averaged over the summaries of the 1,000 updates up to the step),
and, per run, the validation curve's unsteadiness (the mean absolute change between
consecutive validations after the first 5,000 updates, in points; `--steady A,B`: between
A and B updates, to compare runs over the same stretch).

With `--plot PNG --match 20way1shot`: the validation curves of the runs whose name holds
the text, drawn into PNG (accuracy against meta-updates; the work directories may be
several, `--work_dir` repeated).
"""

from __future__ import annotations

import argparse
import glob
import itertools
import json
import os
import statistics

import tensorflow as tf
from tensorboard.backend.event_processing import event_accumulator

from viable_tf.training.checkpoints import WallClock

#: The training query loss is averaged over the summaries of this many updates up to a step.
PACE_WINDOW = 1000
#: Unsteadiness is measured on the validations after this many updates (the early rise is
#: no swing).
STEADY_AFTER = 5000
#: A training summary point is a jump when above JUMP_FACTOR times the median of the points
#: within JUMP_RADIUS of it and at least JUMP_RISE above it; points of the first JUMP_AFTER
#: updates (the early fall) are none.
JUMP_FACTOR, JUMP_RISE, JUMP_RADIUS, JUMP_AFTER = 1.3, 0.1, 5, 1000


#: The scalar curves a run carried from another machine brings (lab/carry_runs.py writes
#: it): {tag: [[step, value], ...]} of the summaries its earlier machines wrote.
CARRIED_CURVES = "curves.json"


def scalar_curves(model_dir: str, *tags: str) -> dict[str, list[tuple[int, float]]]:
    """Per tag (every scalar tag if none is named), (step, value) of that scalar summary
    from the run's carried curves and every events file of the run, by step (a resumed
    run's later file wins where steps repeat); each file is read once."""
    points: dict[str, dict[int, float]] = {tag: {} for tag in tags}
    carried = os.path.join(model_dir, CARRIED_CURVES)
    if os.path.exists(carried):
        with open(carried) as f:
            for tag, curve in json.load(f).items():
                if tag in points or not tags:
                    points.setdefault(tag, {}).update((int(s), float(v)) for s, v in curve)
    for path in sorted(glob.glob(os.path.join(model_dir, "events.out.tfevents.*"))):
        accumulator = event_accumulator.EventAccumulator(
            path, size_guidance={event_accumulator.TENSORS: 0}
        )
        accumulator.Reload()
        present = accumulator.Tags()["tensors"]
        for tag in tags or present:
            if tag not in present:
                continue
            for event in accumulator.Tensors(tag):
                value = tf.make_ndarray(event.tensor_proto)
                if value.ndim == 0 and value.dtype.kind in "fiu":  # no text, histogram, image
                    points.setdefault(tag, {})[event.step] = float(value)
    return {tag: sorted(by_step.items()) for tag, by_step in points.items()}


def scalar_curve(model_dir: str, tag: str) -> list[tuple[int, float]]:
    """(step, value) of one scalar summary, as `scalar_curves` reads it."""
    return scalar_curves(model_dir, tag)[tag]


def validation_curve(model_dir: str) -> list[tuple[int, float]]:
    """(step, validation accuracy) from every events file of the run, by step."""
    return scalar_curve(model_dir, "validation/accuracy")


def window_mean(curve: list[tuple[int, float]], step: int, window: int = PACE_WINDOW):
    """The mean of a curve's points in (step - window, step], None if it has none there."""
    values = [value for at, value in curve if step - window < at <= step]
    return sum(values) / len(values) if values else None


def unsteadiness(
    curve: list[tuple[int, float]], after: int = STEADY_AFTER, until: int | None = None
):
    """Mean absolute change between consecutive validations in (after, until]."""
    values = [value for at, value in curve if at > after and (until is None or at <= until)]
    changes = [abs(b - a) for a, b in itertools.pairwise(values)]
    return sum(changes) / len(changes) if changes else None


def jumps(curve: list[tuple[int, float]]) -> list[int]:
    """The steps of a curve's points after JUMP_AFTER that exceed the median of the points
    within JUMP_RADIUS of them (themselves included) JUMP_FACTOR times and by JUMP_RISE."""
    values = [value for _, value in curve]
    found = []
    for i, (step, value) in enumerate(curve):
        median = statistics.median(values[max(0, i - JUMP_RADIUS) : i + JUMP_RADIUS + 1])
        if step > JUMP_AFTER and value > JUMP_FACTOR * median and value - median >= JUMP_RISE:
            found.append(step)
    return found


def pace(
    model_dir: str, steps: list[int], steady: tuple[int, int | None] = (STEADY_AFTER, None)
) -> dict:
    """Validation accuracy (%) and training query loss at each step, and unsteadiness."""
    curves = scalar_curves(model_dir, "validation/accuracy", "train/meta_loss")
    validation = dict(curves["validation/accuracy"])
    training = curves["train/meta_loss"]
    row = {"run": os.path.basename(model_dir)}
    for step in steps:
        loss = window_mean(training, step)
        accuracy = validation.get(step)
        row[str(step)] = (
            f"{'' if accuracy is None else f'{100 * accuracy:.1f}'} / "
            f"{'' if loss is None else f'{loss:.3f}'}"
        )
    swing = unsteadiness(sorted(validation.items()), *steady)
    row["unsteadiness"] = "" if swing is None else f"{100 * swing:.2f}"
    return row


def status(model_dir: str) -> dict:
    curves = scalar_curves(model_dir, "validation/accuracy", "train/meta_loss")
    curve = curves["validation/accuracy"]
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
    row["loss_jumps"] = " ".join(map(str, jumps(curves["train/meta_loss"])))
    if clock:
        row["wall_clock_h"] = round(clock[max(clock, key=int)] / 3600, 2)
    results = os.path.join(model_dir, "results.json")
    if os.path.exists(results):
        with open(results) as f:
            record = json.load(f)
        row["test"] = f"{100 * record['mean']:.1f} ± {100 * record['ci95']:.1f}"
    return row


def plot(model_dirs: list[str], path: str, title: str) -> None:
    """Each run's validation accuracy (%) against meta-updates, into the PNG at path."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(9.5, 4.2))
    axes = figure.add_subplot()
    for model_dir in model_dirs:
        curve = validation_curve(model_dir)
        if curve:
            steps, accuracy = zip(*curve, strict=True)
            axes.plot(steps, [100 * a for a in accuracy], label=os.path.basename(model_dir), lw=1.2)
    axes.set_xlabel("meta-updates")
    axes.set_ylabel("validation accuracy (%)")
    axes.set_title(title)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    figure.tight_layout()
    figure.savefig(path, dpi=90)


def run_dirs(work_dirs: list[str], match: str = "") -> list[str]:
    """Every run directory under each WORK_DIR/runs whose name holds `match`; the files
    beside them (a run's log, W/runs/<run>.out) are no runs."""
    return sorted(
        model_dir
        for work_dir in work_dirs
        for model_dir in glob.glob(os.path.join(work_dir, "runs", "*"))
        if match in os.path.basename(model_dir) and os.path.isdir(model_dir)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work_dir", action="append", required=True)
    parser.add_argument(
        "--pace",
        type=lambda text: [int(step) for step in text.split(",")],
        help="comma-separated meta-updates: validation %% / training query loss at each",
    )
    parser.add_argument(
        "--steady",
        type=lambda text: tuple(int(step) for step in text.split(",")),
        default=(STEADY_AFTER, None),
        help="A,B: the unsteadiness of --pace over validations after A, up to B updates",
    )
    parser.add_argument("--plot", help="PNG: the validation curves of the --match runs")
    parser.add_argument("--match", default="", help="a run's name must hold this text")
    args = parser.parse_args()
    model_dirs = run_dirs(args.work_dir, args.match)
    if args.plot:
        plot(model_dirs, args.plot, f"Omniglot end to end: {args.match or 'every run'}")
        return
    if args.pace:
        columns = ("run", *map(str, args.pace), "unsteadiness")
        report = lambda model_dir: pace(model_dir, args.pace, args.steady)  # noqa: E731
    else:
        columns = ("run", "step", "validations", "best", "best_at", "last", "since_best")
        columns += ("loss_jumps", "wall_clock_h", "test")
        report = status
    print("| " + " | ".join(columns) + " |")
    print("|---" * len(columns) + "|")
    for model_dir in model_dirs:
        row = report(model_dir)
        print("| " + " | ".join(str(row.get(c, "")) for c in columns) + " |")


if __name__ == "__main__":
    main()
