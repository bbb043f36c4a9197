"""How far does a trained gradient learner's inner loop take it? The question behind
MAML's 5-way 5-shot cell end to end, which sits at its 5-way 1-shot cell's figure
(docs/lab/omniglot/maml_inner_steps.md).

    python -m lab.inner_steps RUN_DIR [--loops 2x0.1,4x0.1,8x0.1,2x0.2] \
        [--checkpoint RUN_DIR/checkpoints/ckpt-2500] [--episodes 1000] \
        [--gin_param=DATA_DIR='W/features']

The run's weights (its best checkpoint, or --checkpoint) adapted by other inner loops,
each STEPSxRATE (the learner's `num_inner_steps` and `inner_lr`), on the run's own test
episodes: the query accuracy, the inner loss after the last step, and the accuracy's
difference from the loop the run trained with (the first row), paired per episode.
Prints one Markdown table; nothing is trained and the run is not touched. A gradient
learner only; one that learns its rates (Meta-SGD) keeps them, so only its step count
can change.
"""

from __future__ import annotations

import argparse
import os
import re


def parse_loops(text: str) -> list[tuple[int, float]]:
    """'2x0.1,8x0.1' -> [(2, 0.1), (8, 0.1)]; raises ValueError naming a bad item."""
    loops = []
    for item in text.split(","):
        match = re.fullmatch(r"\s*(\d+)\s*x\s*(\S+?)\s*", item)
        try:
            steps, rate = int(match[1]), float(match[2])
        except (TypeError, ValueError):  # no match, or no number after the x
            raise ValueError(
                f"--loops: expected STEPSxRATE items like 8x0.1, got {item!r}"
            ) from None
        if not 0 < rate < float("inf"):
            raise ValueError(f"--loops: a rate must be a number > 0, got {item!r}")
        loops.append((steps, rate))
    return loops


def learner_name(operative_config: str) -> str:
    """The configurable the run's Trainer.learner names (`MAML` for `@MAML`)."""
    match = re.search(r"^Trainer\.learner\s*=\s*@([\w.]+)", operative_config, re.MULTILINE)
    if match is None:
        raise ValueError("the operative config binds no Trainer.learner = @Learner")
    return match[1]


def evaluate(
    model_dir: str,
    loops: list[tuple[int, float]],
    checkpoint: str | None = None,
    episodes: int | None = None,
    gin_params: tuple[str, ...] = (),
) -> list[dict]:
    """Per loop: {'loop', 'accuracy' [E], 'inner_loss_post' [E]}, the run's own loop first
    and each other loop once."""
    import tensorflow as tf

    from viable_tf.config import load_run
    from viable_tf.evaluation.protocols import test_protocol
    from viable_tf.learners.gradient import GradientLearner
    from viable_tf.run_dir import RunDir

    with open(RunDir(model_dir).operative_config) as f:
        name = learner_name(f.read())
    trained = load_run(model_dir, gin_params)
    if not isinstance(trained.learner, GradientLearner):
        raise ValueError(f"{name} is not a gradient learner: it has no inner loop of steps")
    own = (trained.learner.num_inner_steps, trained.learner.inner_lr)
    if trained.learner.learned_inner_lr and any(rate != own[1] for _, rate in loops):
        raise ValueError(f"{name} learns its rates (Meta-SGD): only its step count can change")
    extra = list(gin_params)
    if episodes is not None:
        extra.append(f"classification_test_evaluator.num_episodes={episodes}")
    rows = []
    for steps, rate in dict.fromkeys([own, *loops]):
        params = (f"{name}.num_inner_steps={steps}", f"{name}.inner_lr={rate}", *extra)
        run = load_run(model_dir, params)
        if checkpoint is not None:
            tf.train.Checkpoint(learner=run.learner).read(checkpoint).expect_partial()
        found = test_protocol(run.tasks)(run.learner)
        rows.append(
            {
                "loop": (steps, rate),
                "accuracy": found.per_task,
                "inner_loss_post": found.inner_loss_post,
            }
        )
    return rows


def table(rows: list[dict]) -> str:
    from viable_tf.evaluation.statistics import mean_confidence_interval

    def cell(values, scale=100.0, digits=1, sign=""):
        found = mean_confidence_interval(values)
        return f"{scale * found.mean:{sign}.{digits}f} ± {scale * found.ci95:.{digits}f}"

    lines = [
        "| inner loop | accuracy (%) | inner loss after | against the trained loop, paired |",
        "|---|---:|---:|---:|",
    ]
    own = rows[0]["accuracy"]
    for i, row in enumerate(rows):
        steps, rate = row["loop"]
        loop = f"{steps} x {rate:g}" + (" (trained)" if i == 0 else "")
        against = "" if i == 0 else cell(row["accuracy"] - own, digits=2, sign="+")
        loss = cell(row["inner_loss_post"], scale=1.0, digits=3)
        lines.append(f"| {loop} | {cell(row['accuracy'])} | {loss} | {against} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model_dir")
    parser.add_argument("--loops", default="1x0.1,4x0.1,8x0.1,2x0.05,2x0.2")
    parser.add_argument("--checkpoint", default=None, help="a checkpoint path (default: best)")
    parser.add_argument("--episodes", type=int, default=None, help="default: the run's test")
    parser.add_argument("--gin_param", action="append", default=[])
    args = parser.parse_args()
    try:
        loops = parse_loops(args.loops)
    except ValueError as error:
        parser.error(str(error))
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    try:
        rows = evaluate(
            args.model_dir, loops, args.checkpoint, args.episodes, tuple(args.gin_param)
        )
    except (ValueError, FileNotFoundError) as error:
        parser.exit(2, f"{parser.prog}: {error}\n")
    print(table(rows), flush=True)


if __name__ == "__main__":
    main()
