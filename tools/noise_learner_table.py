"""The learned cells of the Omniglot label-noise tables (docs/corrupted_support_sets.md),
read from the runs' results.json.

    python tools/noise_learner_table.py --runs W/runs [--runs W/runs_8e91b43 ...]

A run is W/runs/<method>_<N>way<K>shot_<noise>_<prototype>/ (noise clean, swapM,
outlierM), as the issue-41 queue names them; a later --runs directory wins for a cell
both hold (the median cells retrained from a later commit). Prints one Markdown table per
setting and noise: a row per prototype, a column per method, test accuracy (%) mean ±
95% CI over the run's test episodes, and the updates the run trained and its best's.
"""

from __future__ import annotations

import argparse
import json
import os
import re

NAME = re.compile(
    r"(?P<method>.+)_(?P<setting>\d+way\d+shot)_(?P<noise>clean|swap\d|outlier\d)_(?P<proto>mean|median|weighted)$"
)
METHODS = ("cavia", "simviable", "attviable", "relviable_relu64", "relviable_tanh64")
NOISES = ("swap2", "outlier2", "swap1", "outlier1", "clean")


def cells(run_dirs: list[str]) -> dict[tuple[str, str, str, str], tuple[dict, str]]:
    found = {}
    for runs in run_dirs:
        for name in sorted(os.listdir(runs)):
            match = NAME.match(name)
            path = os.path.join(runs, name, "results.json")
            if match and os.path.exists(path):
                with open(path) as f:
                    found[tuple(match.group("setting", "noise", "proto", "method"))] = (
                        json.load(f),
                        runs,
                    )
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
    args = parser.parse_args()
    found = cells(args.runs)
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
            print("| prototype | " + " | ".join(methods) + " |")
            print("|---|" + "---:|" * len(methods))
            for proto in ("mean", "median"):
                row = []
                for method in methods:
                    cell = found.get((setting, noise, proto, method))
                    if cell is None:
                        row.append("")
                        continue
                    result, _ = cell
                    row.append(
                        f"{100 * result['mean']:.1f} ± {100 * result['ci95']:.1f} "
                        f"({result['steps_trained']:,}; {result['checkpoint_step']:,})"
                    )
                print(f"| {proto} | " + " | ".join(row) + " |")
            print()
    sources = sorted({runs for _, runs in found.values()})
    print("cells from: " + ", ".join(sources))


if __name__ == "__main__":
    main()
