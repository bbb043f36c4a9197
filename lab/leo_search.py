"""LEO's weights for the Omniglot features, searched on meta-validation only.

    .venv/bin/python lab/leo_search.py --features W/features --work_dir runs/leo_search \
        [--points 12] [--num_steps 5000] [--setting 20way1shot] [--jobs 2] \
        [--beyond_edge | --inner]

Draws `points` settings at random (seed 0) from the grid below, trains LEO on each from
gin/omniglot/leo_<setting>.gin through viable-train (one thread each, `jobs` at a time),
and prints a Markdown table sorted by the best meta-validation accuracy. Test episodes
are not looked at: each run's test evaluation is cut to 10 episodes and not reported.
Rerun to resume: a finished point is read back, not trained again.

`--beyond_edge`: instead, the chosen point (`CHOSEN`, gin/omniglot/leo_weights.gin) and
its neighbours past the grid's edge, one weight moved at a time (`BEYOND`): where the
chosen point sits at the grid's largest dropout or learning rate, the grid cannot say
whether larger ones are better.

`--inner`: the chosen point and, one at a time, the parts of LEO the grid held at the public
code's values (`INNER`): the initial fine-tuning and latent rates (both meta-learned from
there), the number of fine-tuning and latent steps, the number of latents.
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import itertools
import json
import os
import random
import re
import subprocess
import sys

GRID = {
    "OUTER_LR": (1e-4, 3e-4, 1e-3),
    "KL_WEIGHT": (1e-3, 0.1, 0.75),
    "DROPOUT_RATE": (0.0, 0.3, 0.5),
    "ORTHOGONALITY_PENALTY_WEIGHT": (1e-3, 0.19),
    "ENCODER_PENALTY_WEIGHT": (1e-9, 5.8e-6),
}


#: The point the search chose (gin/omniglot/leo_weights.gin).
CHOSEN = {
    "OUTER_LR": 1e-3,
    "KL_WEIGHT": 0.75,
    "DROPOUT_RATE": 0.5,
    "ORTHOGONALITY_PENALTY_WEIGHT": 0.19,
    "ENCODER_PENALTY_WEIGHT": 1e-9,
}
#: Values past the grid's edge, tried one weight at a time from CHOSEN.
BEYOND = {"OUTER_LR": (2e-3, 3e-3), "KL_WEIGHT": (1.5,), "DROPOUT_RATE": (0.6, 0.7)}


#: The inner loop's settings (the public code's in gin/classification/leo.gin) at other
#: values, tried one at a time from CHOSEN.
INNER = {
    "FINETUNING_LR": (0.01, 0.1, 1.0),
    "LATENT_LR": (0.3, 3.0),
    "FINETUNING_STEPS": (10,),
    "LATENT_STEPS": (10,),
    "NUM_LATENTS": (128,),
}


def one_at_a_time(moves: dict) -> list[dict]:
    """CHOSEN, then CHOSEN with one of `moves`' settings changed, each of its values."""
    return [CHOSEN] + [{**CHOSEN, key: v} for key, values in moves.items() for v in values]


def beyond_edge() -> list[dict]:
    return one_at_a_time(BEYOND)


def points(count: int) -> list[dict]:
    every = [dict(zip(GRID, values, strict=True)) for values in itertools.product(*GRID.values())]
    return random.Random(0).sample(every, count)


def name(point: dict) -> str:
    """The point's folder: GRID's settings by their first word, the others in full."""
    words = {key: key.split("_")[0].lower() if key in GRID else key.lower() for key in point}
    return "_".join(f"{words[key]}{value:g}" for key, value in point.items())


def train(point: dict, args: argparse.Namespace) -> dict:
    model_dir = os.path.join(args.work_dir, name(point))
    results = os.path.join(model_dir, "results.json")
    log_path = os.path.join(model_dir, "search.log")
    if not os.path.exists(results) and not _diverged(log_path):
        command = [
            os.path.join(os.path.dirname(sys.executable), "viable-train"),
            f"--gin_file=omniglot/leo_{args.setting}.gin",
            f"--gin_param=DATA_DIR={args.features!r}",
            f"--gin_param=NUM_STEPS={args.num_steps}",
            "--gin_param=META_BATCH_SIZE=4",
            "--gin_param=EvaluationSpec.eval_every=500",
            "--gin_param=Trainer.show_progress=False",
            "--gin_param=classification_validation_evaluator.num_episodes=200",
            "--gin_param=classification_test_evaluator.num_episodes=10",
            *(f"--gin_param={key}={value!r}" for key, value in point.items()),
            f"--model_dir={model_dir}",
        ]
        env = {**os.environ, "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}
        env["TF_CPP_MIN_LOG_LEVEL"] = "3"
        os.makedirs(model_dir, exist_ok=True)
        with open(log_path, "w") as log:
            subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    if _diverged(log_path):  # a point where LEO's meta-loss became NaN: a search outcome
        return {**point, "validation": float("nan"), "best_at": "diverged"}
    with open(results) as f:
        record = json.load(f)
    return {
        **_macros(model_dir),
        **point,
        "validation": record["best_validation_accuracy"],
        "best_at": record["checkpoint_step"],
    }


def _macros(model_dir: str) -> dict:
    """The gin macros a finished run used, from its operative config: the table shows
    the values a point kept (the config's) beside those it set."""
    with open(os.path.join(model_dir, "operative_config.gin")) as f:
        text = f.read()
    block = text.split("# Macros:", 1)[-1].split("# Parameters", 1)[0]
    pairs = re.findall(r"^([A-Z][A-Z0-9_]*) = (.+)$", block, flags=re.MULTILINE)
    return {key: ast.literal_eval(value) for key, value in pairs}


def _diverged(log_path: str) -> bool:
    if not os.path.exists(log_path):
        return False
    with open(log_path) as f:
        return "meta-loss is not finite" in f.read()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--features", required=True, help="viable-omniglot's W/features")
    parser.add_argument("--work_dir", required=True)
    parser.add_argument("--points", type=int, default=12)
    parser.add_argument("--num_steps", type=int, default=5000)
    parser.add_argument("--setting", default="20way1shot")
    parser.add_argument("--jobs", type=int, default=2)
    study = parser.add_mutually_exclusive_group()
    study.add_argument("--beyond_edge", action="store_true", help="CHOSEN and past the edge")
    study.add_argument("--inner", action="store_true", help="CHOSEN and the inner loop's moves")
    args = parser.parse_args()
    if args.beyond_edge:
        chosen = beyond_edge()
    elif args.inner:
        chosen = one_at_a_time(INNER)
    else:
        chosen = points(args.points)
    columns = list(dict.fromkeys(key for point in chosen for key in point))
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(lambda p: train(p, args), chosen))
    rows.sort(key=lambda row: -row["validation"] if row["validation"] == row["validation"] else 1)
    print(f"LEO, omniglot {args.setting}, {args.num_steps} meta-updates, B = 4; "
          "best meta-validation accuracy (200 episodes)\n")  # fmt: skip
    print("| " + " | ".join([*columns, "validation (%)", "best at"]) + " |")
    print("|" + "---:|" * (len(columns) + 2))
    for row in rows:
        cells = [f"{row[key]:g}" if key in row else "?" for key in columns]
        accuracy = "NaN loss" if row["best_at"] == "diverged" else f"{100 * row['validation']:.1f}"
        cells += [accuracy, str(row["best_at"])]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
