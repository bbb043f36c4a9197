"""Does a transductive learner's answer depend on the queries it adapts with? MeTAL's query
term reads the query points of the request it answers, so a server's answer to one query
image depends on what else the request holds (docs/lab/metal_query_groups.md).

    python -m lab.query_groups RUN_DIR [--sizes 1,2,5,20] [--episodes 1000] \
        [--gin_param=DATA_DIR='W/features']

The run's best weights on its own test episodes, each episode's Q queries split into
groups of g, every group adapted on the episode's support set and its own g queries
alone, as a server answers Q/g requests of g query images each: the query accuracy per
size g, and its difference from all Q queries together (the first row), paired per
episode. Group j of an episode holds its queries j, j + Q/g, j + 2Q/g, ..., so a group
mixes classes as the episode's order does. Prints one Markdown table; nothing is trained
and the run is not touched. A learner whose adaptation reads no query scores the same
at every size (a check, not a question).
"""

from __future__ import annotations

import argparse
import os


def parse_sizes(text: str) -> list[int]:
    """'1,2,5' -> [1, 2, 5]; raises ValueError naming a bad item."""
    sizes = []
    for item in text.split(","):
        try:
            size = int(item)
        except ValueError:
            raise ValueError(f"--sizes: expected whole numbers like 1,5,20, got {item!r}") from None
        if size < 1:
            raise ValueError(f"--sizes: a group holds at least one query, got {item!r}")
        sizes.append(size)
    return sizes


def check_sizes(sizes: list[int], num_query: int) -> None:
    """Raises ValueError naming a size that does not divide the episodes' queries."""
    for size in sizes:
        if num_query % size:
            raise ValueError(f"--sizes: {size} does not divide the episodes' {num_query} queries")


def grouped(batch, size: int):
    """`batch` [B tasks, Q queries] as B * Q/size tasks of `size` queries each: task
    b * Q/size + j is task b's support set with its queries j, j + Q/size, ..."""
    import tensorflow as tf

    from viable_tf.tasks import TaskBatch

    groups = batch.query_x.shape[1] // size

    def split(query):  # [B, Q, ...] -> [B * G, size, ...]
        shape = tf.shape(query)
        query = tf.reshape(query, tf.concat([[shape[0], size, groups], shape[2:]], 0))
        rank = len(query.shape)
        query = tf.transpose(query, [0, 2, 1, *range(3, rank)])
        return tf.reshape(query, tf.concat([[-1, size], shape[2:]], 0))

    def repeat(support):  # [B, K, ...] -> [B * G, K, ...]
        return tf.repeat(support, groups, axis=0)

    return TaskBatch(
        support_x=repeat(batch.support_x),
        support_y=repeat(batch.support_y),
        support_mask=repeat(batch.support_mask),
        query_x=split(batch.query_x),
        query_y=split(batch.query_y),
    )


def evaluate(
    model_dir: str, sizes: list[int], episodes: int | None = None, gin_params: tuple = ()
) -> list[dict]:
    """Per size: {'size', 'accuracy' [E]}, all queries together first, each size once."""
    import numpy as np
    import tensorflow as tf

    from viable_tf.config import load_run
    from viable_tf.evaluation.core import Evaluator, score_batch
    from viable_tf.evaluation.protocols import test_protocol
    from viable_tf.tasks import TaskBatch

    extra = list(gin_params)
    if episodes is not None:
        extra.append(f"classification_test_evaluator.num_episodes={episodes}")
    run = load_run(model_dir, tuple(extra))
    evaluator = test_protocol(run.tasks)
    metric = None if type(evaluator).score is Evaluator.score else evaluator.score
    if metric is None:
        raise ValueError("the run's test scores a query loss, not an accuracy per task")
    batches = list(evaluator.batches())
    num_query = batches[0].query_x.shape[1]
    check_sizes(sizes, num_query)
    score = tf.function(lambda batch: score_batch(run.learner, batch, metric)[0], autograph=False)
    rows = []
    for size in dict.fromkeys([num_query, *sizes]):
        per_task = []
        for batch in batches:
            tasks = batch.query_x.shape[0]  # as many tasks a call as the test's batches hold
            groups = grouped(batch, size)
            scores = [
                score(TaskBatch(*(part[start : start + tasks] for part in groups))).numpy()
                for start in range(0, groups.query_x.shape[0], tasks)
            ]
            per_task.append(np.concatenate(scores).reshape(tasks, -1).mean(axis=1))
        rows.append({"size": size, "accuracy": np.concatenate(per_task)})
    return rows


def table(rows: list[dict]) -> str:
    from viable_tf.evaluation.statistics import mean_confidence_interval

    def cell(values, digits=1, sign=""):
        found = mean_confidence_interval(values)
        return f"{100 * found.mean:{sign}.{digits}f} ± {100 * found.ci95:.{digits}f}"

    lines = [
        "| queries adapted together | accuracy (%) | against all together, paired |",
        "|---:|---:|---:|",
    ]
    together = rows[0]["accuracy"]
    for i, row in enumerate(rows):
        size = f"{row['size']} (all)" if i == 0 else str(row["size"])
        against = "" if i == 0 else cell(row["accuracy"] - together, digits=2, sign="+")
        lines.append(f"| {size} | {cell(row['accuracy'])} | {against} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model_dir")
    parser.add_argument("--sizes", default="1,2,5,20", help="queries per group, comma-separated")
    parser.add_argument("--episodes", type=int, default=None, help="default: the run's test")
    parser.add_argument("--gin_param", action="append", default=[])
    args = parser.parse_args()
    try:
        sizes = parse_sizes(args.sizes)
    except ValueError as error:
        parser.error(str(error))
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    try:
        rows = evaluate(args.model_dir, sizes, args.episodes, tuple(args.gin_param))
    except (ValueError, FileNotFoundError) as error:
        parser.exit(2, f"{parser.prog}: {error}\n")
    print(table(rows), flush=True)


if __name__ == "__main__":
    main()
