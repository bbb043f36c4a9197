"""The learned cells of the Omniglot label-noise tables (docs/lab/corrupted_support_sets.md),
read from the runs' results.json.

    python lab/noise_learner_table.py --runs W/runs [--runs W/runs_8e91b43 ...] \
        [--rules RULES.md] [--steps] [--dagger W/runs]

A run is W/runs/<method>_<N>way<K>shot_<noise>_<prototype>/ (noise clean, swapM,
outlierM), as the issue-41 queue names them; a later --runs directory wins for a cell
both hold (the median cells retrained from a later commit). Prints one Markdown table per
setting and noise: a row per prototype, a column per method, test accuracy (%) mean ±
95% CI over the run's test episodes (with --steps, also the updates the run trained and
its best's). A run whose directory holds eval_clean.txt (viable-eval's JSON for the same
model tested on clean episodes of the setting) adds a row under the noisy table: the
model trained with the noise, tested clean. With --rules, the output of
lab/label_noise_table.py for the same features: a first column with each rule alone,
untrained, and its weighted-mean and oracle rows. With --dagger DIR, the median cells
read from DIR carry a dagger (the median cells of an older commit not yet retrained).
"""

from __future__ import annotations

import argparse
import json
import os
import re

NAME = re.compile(
    r"(?P<method>.+)_(?P<setting>\d+way\d+shot)_(?P<noise>clean|swap\d|outlier\d)_(?P<proto>mean|median|weighted)$"
)
METHODS = {
    "cavia": "CAVIA",
    "simviable": "simVIABLE",
    "attviable": "attVIABLE",
    "relviable_relu64": "relVIABLE, 2 x 64 ReLU pairs",
    "relviable_tanh64": "relVIABLE, 2 x 64 tanh pairs",
}
NOISES = ("swap2", "outlier2", "swap1", "outlier1", "clean")
PROTOTYPES = {
    "mean": "class mean",
    "median": "geometric median",
    "weighted": "similarity-weighted mean",
    "oracle": "oracle (the noisy shots dropped)",
}
RULE_ROW = re.compile(
    r"\| (\d+)-way (\d+)-shot, (clean|(\d) (swap|outlier) shots? per class) \|(.*)\|$"
)


def cells(
    run_dirs: list[str], file: str = "results.json"
) -> dict[tuple[str, str, str, str], tuple[dict, str]]:
    """(setting, noise, prototype, method) -> (the run's `file` as JSON, its directory)."""
    found = {}
    for runs in run_dirs:
        for name in sorted(os.listdir(runs)):
            match = NAME.match(name)
            path = os.path.join(runs, name, file)
            if match and os.path.exists(path):
                with open(path) as f:
                    found[tuple(match.group("setting", "noise", "proto", "method"))] = (
                        json.load(f),
                        runs,
                    )
    return found


def cell_text(result: dict) -> str:
    return f"{100 * result['mean']:.1f} ± {100 * result['ci95']:.1f}"


def rules(path: str) -> dict[tuple[str, str], list[str]]:
    """(setting, noise) -> the rule's cells [mean, median, weighted, oracle] from the
    Markdown of lab/label_noise_table.py."""
    found = {}
    with open(path) as f:
        for line in f:
            match = RULE_ROW.match(line.strip())
            if match:
                ways, shots, clean, count, kind, values = match.groups()
                noise = "clean" if clean == "clean" else f"{kind}{count}"
                found[(f"{ways}way{shots}shot", noise)] = [v.strip() for v in values.split("|")]
    return found


def noise_title(setting: str, noise: str) -> str:
    ways, shots = re.match(r"(\d+)way(\d+)shot", setting).groups()
    head = f"{ways}-way {shots}-shot"
    if noise == "clean":
        return f"{head}, clean support sets"
    count = noise[-1]
    kind = (
        "swapped to another class of the episode"
        if noise.startswith("swap")
        else "drawn from a class outside the episode"
    )
    return f"{head}, {count} of {shots} shots per class {kind}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", action="append", required=True)
    parser.add_argument("--rules", help="lab/label_noise_table.py's output")
    parser.add_argument("--steps", action="store_true")
    parser.add_argument("--dagger", help="mark the median cells read from this run directory")
    args = parser.parse_args()
    found = cells(args.runs)
    tested_clean = cells(args.runs, "eval_clean.txt")
    rule_cells = rules(args.rules) if args.rules else {}
    for setting in sorted({k[0] for k in found}, key=lambda s: int(s.split("way")[0])):
        for noise in NOISES:
            methods = [
                m
                for m in METHODS
                if any(k[0] == setting and k[1] == noise and k[3] == m for k in found)
            ]
            if not methods:
                continue
            print(f"{noise_title(setting, noise)}:\n")
            rule = rule_cells.get((setting, noise))
            columns = (["the rule alone"] if rule else []) + [METHODS[m] for m in methods]
            print("| prototype | " + " | ".join(columns) + " |")
            print("|---|" + "---:|" * len(columns))
            for index, proto in enumerate(PROTOTYPES if rule else ("mean", "median")):
                row = [rule[index]] if rule else []
                for method in methods:
                    cell = found.get((setting, noise, proto, method))
                    if cell is None:
                        row.append("")
                        continue
                    result, source = cell
                    text = cell_text(result)
                    if proto == "median" and args.dagger and source == args.dagger:
                        text += " †"
                    if args.steps:
                        text += f" ({result['steps_trained']:,}; {result['checkpoint_step']:,})"
                    row.append(text)
                print(f"| {PROTOTYPES[proto]} | " + " | ".join(row) + " |")
            for proto in ("mean", "median"):
                clean = [tested_clean.get((setting, noise, proto, m)) for m in methods]
                if noise != "clean" and any(clean):
                    row = ([""] if rule else []) + [cell_text(c[0]) if c else "" for c in clean]
                    print(f"| {PROTOTYPES[proto]}, tested clean | " + " | ".join(row) + " |")
            print()
    sources = sorted({runs for _, runs in found.values()})
    print("cells from: " + ", ".join(sources))


if __name__ == "__main__":
    main()
