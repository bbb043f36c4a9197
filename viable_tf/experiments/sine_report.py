"""The sine reproduction's report: Markdown tables of (a), (b), the seeds, the
variations and the run times, and the reference table viable-train prints beside a
run's own number (`sine_reference.json`, shipped in viable_tf/evaluation)."""

from __future__ import annotations

from viable_tf.evaluation.reference import (  # noqa: F401 (kept importable from here)
    REFERENCE_FILE,
    reference_lines,
    shipped_reference,
)
from viable_tf.experiments.sine_study import (
    EVAL_SHOTS_B,
    LONG_ROW,
    ROWS,
    ROWS_A,
    ROWS_B,
    VARIATIONS,
    selected,
)


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
    rows_a, rows_b = selected(ROWS_A, rows), selected(ROWS_B, rows)
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
    for key in selected(ROWS_B, rows):
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
