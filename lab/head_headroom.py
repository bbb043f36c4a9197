"""How much can adapting the classifier on the support set add to the class means?

    python -m lab.head_headroom --features=W/features \
        [--settings=5way1shot,20way1shot,5way5shot] [--episodes=1000] [--gin_param=...]

On the frozen features that viable-omniglot writes (W/features), for fixed episodes of
the meta-validation and test classes (the evaluators' seeds, so the test episodes are
the runs' own), each rule is scored by its query accuracy (mean ± 95% CI):

  class means           the reference: nearest class mean, squared Euclidean distance
  cosine class means    the same on l2-normalised features (the cosine head, 0 steps)
  fine-tuned head       the cosine prototype head (w_c = 2 mu_c, b_c = -||mu_c||^2,
                        logits / tau) fine-tuned by S gradient steps of the support
                        cross-entropy at rate lr, every (tau, lr, S) of a grid: what
                        Proto-MAML's inner loop does to the output layer alone.

Of the grid, one point is chosen on the validation episodes (an honest rule) and the best
on the test episodes is shown too (chosen on test, so an optimistic bound for this
family). Together they bound what an inner loop on top of the prototypes could add on
these features: the room a learned inner loss would have to show a gain in.
Prints one Markdown table per setting.

Shape legend: B episodes, P points, N way, H feature dim.
"""

from __future__ import annotations

import argparse
import itertools
import os

import numpy as np

TAUS = (0.1, 0.05)
RATES = (0.01, 0.03, 0.1, 0.3, 1.0)
STEPS = (1, 2, 5, 10, 25)


def _episodes(features: str, setting: str, episodes: int, gin_params: tuple[str, ...]):
    """The validation and test evaluators of `setting`, as gin/omniglot/base.gin sets them."""
    from viable_tf.cli.common import parse_gin
    from viable_tf.evaluation.classification import (
        classification_test_evaluator,
        classification_validation_evaluator,
    )
    from viable_tf.tasks.classification import FewShotEpisodes

    ways, shots = (int(n) for n in setting.removesuffix("shot").split("way"))
    parse_gin(
        ["omniglot/base.gin"],
        [
            f"DATA_DIR={features!r}",
            f"NUM_WAYS={ways}",
            f"NUM_SHOTS={shots}",
            f"classification_validation_evaluator.num_episodes={episodes}",
            f"classification_test_evaluator.num_episodes={episodes}",
            *gin_params,
        ],
    )
    tasks = FewShotEpisodes()
    return {
        "validation": classification_validation_evaluator(tasks),
        "test": classification_test_evaluator(tasks),
    }


def head_accuracies(batch, ways: int) -> dict[tuple, np.ndarray]:
    """Per-episode accuracy [B] of every rule on one batch of episodes, keyed
    ('means',), ('cosine',) or ('tuned', tau, lr, steps)."""
    import tensorflow as tf

    support = tf.math.l2_normalize(batch.support_x, axis=-1)  # [B, P, H]
    query = tf.math.l2_normalize(batch.query_x, axis=-1)  # [B, P, H]
    onehot = tf.one_hot(batch.support_y, ways)  # [B, P, N]

    def accuracy(logits):
        predicted = tf.argmax(logits, -1, output_type=tf.int32)
        return tf.reduce_mean(tf.cast(predicted == batch.query_y, tf.float32), 1).numpy()

    def class_means(x):
        return tf.einsum("bpn,bph->bnh", onehot, x) / tf.reduce_sum(onehot, 1)[..., None]

    def prototype_logits(x, means):  # -||x - mu_c||^2 + ||x||^2, [B, P, N]
        return 2.0 * tf.einsum("bph,bnh->bpn", x, means) - tf.reduce_sum(means**2, -1)[:, None]

    result = {
        ("means",): accuracy(prototype_logits(batch.query_x, class_means(batch.support_x))),
        ("cosine",): accuracy(prototype_logits(query, class_means(support))),
    }
    means = class_means(support)
    for tau, lr in itertools.product(TAUS, RATES):
        kernel = tf.transpose(2.0 * means, [0, 2, 1])  # [B, H, N]
        bias = -tf.reduce_sum(means**2, -1)  # [B, N]
        for step in range(1, max(STEPS) + 1):
            with tf.GradientTape() as tape:
                tape.watch([kernel, bias])
                logits = (tf.matmul(support, kernel) + bias[:, None]) / tau
                loss = tf.reduce_sum(
                    tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(onehot, logits), 1)
                )
            grad_kernel, grad_bias = tape.gradient(loss, [kernel, bias])
            kernel, bias = kernel - lr * grad_kernel, bias - lr * grad_bias
            if step in STEPS:
                tuned = tf.matmul(query, kernel) + bias[:, None]
                result[("tuned", tau, lr, step)] = accuracy(tuned)
    return result


def headroom(features: str, setting: str, episodes: int, gin_params=()) -> dict:
    """{split: {rule: per-episode accuracies}} for the validation and test episodes."""
    out = {}
    for split, evaluator in _episodes(features, setting, episodes, tuple(gin_params)).items():
        ways = evaluator.sampler.num_ways
        per_batch = [head_accuracies(batch, ways) for batch in evaluator.batches()]
        out[split] = {key: np.concatenate([b[key] for b in per_batch]) for key in per_batch[0]}
    return out


def _cell(values: np.ndarray) -> str:
    from viable_tf.evaluation.statistics import mean_confidence_interval

    mean, ci, _ = mean_confidence_interval(values)
    return f"{100 * mean:.1f} ± {100 * ci:.1f}"


def report(setting: str, result: dict) -> str:
    val, test = result["validation"], result["test"]
    tuned = [key for key in test if key[0] == "tuned"]
    on_val = max(tuned, key=lambda key: val[key].mean())
    on_test = max(tuned, key=lambda key: test[key].mean())

    def name(key):
        return "tau = {}, lr = {}, {} steps".format(*key[1:])

    rows = [
        ("class means (reference)", ("means",)),
        ("cosine class means (0 steps)", ("cosine",)),
        (f"fine-tuned head, chosen on validation ({name(on_val)})", on_val),
        (f"fine-tuned head, best on test ({name(on_test)})", on_test),
    ]
    lines = [f"### {setting}", "", "| rule | validation | test |", "|---|---:|---:|"]
    lines += [f"| {label} | {_cell(val[key])} | {_cell(test[key])} |" for label, key in rows]
    worst = min(tuned, key=lambda key: test[key].mean())
    lines += [
        "",
        f"Grid of {len(tuned)} points; the worst on test: {name(worst)}, {_cell(test[worst])}.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--features", required=True, help="viable-omniglot's W/features")
    parser.add_argument("--settings", default="5way1shot,20way1shot,5way5shot")
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--gin_param", action="append", default=[])
    args = parser.parse_args()
    if args.episodes < 1:
        parser.error(f"--episodes must be >= 1, got {args.episodes}")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    for setting in args.settings.split(","):
        print(report(setting, headroom(args.features, setting, args.episodes, args.gin_param)))


if __name__ == "__main__":
    main()
