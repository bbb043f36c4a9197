"""Omniglot support sets with label noise, on frozen encoder features (docs/method.md §8):
the nearest-prototype rule with the class mean, the geometric median and the
similarity-weighted mean of each class's support features, beside the oracle that drops
the noisy shots, on the protocol's 1,000 test episodes. No training: what a hand-made
robust rule recovers, the bar a learned loss must clear.

    .venv/bin/python lab/label_noise_table.py --features W/features \
        [--settings 5way5shot,20way5shot] [--noise clean,swap1,swap2,outlier1,outlier2]

W/features is what `viable-omniglot` (stage 1) writes. Prints a Markdown table of test
accuracy (%), mean ± 95% CI.
"""

from __future__ import annotations

import argparse
import re

NOISE = re.compile(r"^(clean|swap|outlier)(\d*)$")


def accuracy(evaluator, prototype: str, drop_noisy: int = 0):
    """Nearest-prototype accuracy per episode over the evaluator's episodes; with
    `drop_noisy` = m, each class's first m shots (the noisy ones) take no part."""
    import numpy as np
    import tensorflow as tf

    from viable_tf.evaluation.statistics import mean_confidence_interval
    from viable_tf.learners.prototypes import class_prototypes

    sampler = evaluator.sampler
    n, k = sampler.num_ways, sampler.num_shots
    clean = tf.constant(np.arange(n * k) % k >= drop_noisy, tf.float32)  # [N*K]
    per_episode = []
    for batch in evaluator.dataset:
        members = tf.one_hot(batch.support_y, n) * clean[None, :, None]  # [B, N*K, N]
        prototypes = class_prototypes(batch.support_x, members, prototype)  # [B, N, E]
        distance = tf.reduce_sum(
            tf.square(batch.query_x[:, :, None, :] - prototypes[:, None, :, :]), axis=-1
        )  # [B, N*V, N]
        predicted = tf.argmin(distance, axis=-1, output_type=tf.int32)
        hits = tf.cast(tf.equal(predicted, batch.query_y), tf.float32)
        per_episode.append(tf.reduce_mean(hits, axis=1).numpy())
    result = mean_confidence_interval(np.concatenate(per_episode))
    return result.mean, result.ci95


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--features", required=True, help="W/features of viable-omniglot")
    parser.add_argument("--settings", default="5way5shot,20way5shot")
    parser.add_argument("--noise", default="clean,swap1,swap2,outlier1,outlier2")
    parser.add_argument("--episodes", type=int, default=1000)
    args = parser.parse_args()
    from viable_tf.cli.common import parse_gin
    from viable_tf.evaluation.classification import classification_test_evaluator
    from viable_tf.tasks.classification import FewShotEpisodes

    header = "| support set | class mean | geometric median | weighted mean | oracle |"
    lines = [header, "|---|---:|---:|---:|---:|"]
    for setting in args.settings.split(","):
        ways, shots = (int(v) for v in setting.removesuffix("shot").split("way"))
        for noise in args.noise.split(","):
            match = NOISE.match(noise)
            if not match:
                parser.error(f"--noise: {noise!r} is not clean, swapM or outlierM")
            kind, m = match.group(1), int(match.group(2) or 0)
            parse_gin(
                ["omniglot/base.gin"],
                [
                    f"DATA_DIR={args.features!r}",
                    f"NUM_WAYS={ways}",
                    f"NUM_SHOTS={shots}",
                    f"classification_test_evaluator.num_episodes={args.episodes}",
                    f"FewShotEpisodes.label_noise={'none' if kind == 'clean' else kind!r}",
                    f"FewShotEpisodes.noisy_shots={m}",
                ],
            )
            evaluator = classification_test_evaluator(FewShotEpisodes())
            cells = []
            for prototype, drop in (("mean", 0), ("median", 0), ("weighted", 0), ("mean", m)):
                mean, ci = accuracy(evaluator, prototype, drop)
                cells.append(f"{100 * mean:.1f} ± {100 * ci:.1f}")
            label = f"{ways}-way {shots}-shot, " + (
                "clean" if kind == "clean" else f"{m} {kind} shot{'s' * (m > 1)} per class"
            )
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
            print(lines[-1], flush=True)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
