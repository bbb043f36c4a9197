"""The served Omniglot classifier against a nearest neighbour on the same encoder's
features, on held-out episodes from the test alphabets (which neither the encoder nor
meta-training nor early stopping saw).

    .venv/bin/python benchmarks/served_vs_nearest.py --work_dir=runs/omniglot_proto \\
        --setting=20way1shot --episodes=200

Each episode's images go through the exported SavedModel's `serving_default` (the graph
`viable-serve` and TF Serving run: encoder, adaptation, prediction); the reference
encodes the same images with the frozen encoder of the work folder and gives each query
the label of its nearest support feature (Euclidean, on l2-normalised features as the
pipeline's features are; at one shot the nearest class mean). Prints a Markdown table
with 95% Student-t CIs over episodes.
"""

from __future__ import annotations

import argparse
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import numpy as np
import tensorflow as tf

from viable_tf.datasets import omniglot
from viable_tf.evaluation.statistics import mean_confidence_interval


def episodes(test: omniglot.OmniglotSplit, ways: int, shots: int, queries: int, count: int):
    """`count` episodes of the test split, seeds 10_000.. (apart from the client's)."""
    classes = np.array(test.classes)
    names = np.unique(classes)
    for seed in range(10_000, 10_000 + count):
        rng = np.random.default_rng(seed)
        chosen = rng.choice(names, ways, replace=False)
        support, query = [], []
        for label, name in enumerate(chosen):
            rows = rng.permutation(np.flatnonzero(classes == name))[: shots + queries]
            support += [(row, label) for row in rows[:shots]]
            query += [(row, label) for row in rows[shots:]]
        yield tuple(np.array([p[i] for p in pairs]) for pairs in (support, query) for i in (0, 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work_dir", required=True, help="a viable-omniglot work folder")
    parser.add_argument("--data_dir", default="../shared/data/omniglot")
    parser.add_argument("--setting", default="20way1shot")
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--queries", type=int, default=5, help="per class")
    args = parser.parse_args()
    ways, shots = (int(n) for n in args.setting.removesuffix("shot").split("way"))
    with open(os.path.join(args.work_dir, "results.json")) as f:
        served = json.load(f)["served"][args.setting]
    base = os.path.join(args.work_dir, "export", served)
    version = max(int(v) for v in os.listdir(base) if v.isdigit())
    serve = tf.saved_model.load(os.path.join(base, str(version))).signatures["serving_default"]
    encoder = keras.saving.load_model(os.path.join(args.work_dir, "encoder", "encoder.keras"))
    test = omniglot.read_omniglot(args.data_dir)["test"]
    model, nearest = [], []
    for s_rows, s_labels, q_rows, q_labels in episodes(
        test, ways, shots, args.queries, args.episodes
    ):
        out = serve(
            support_x=tf.constant(test.images[s_rows][None]),
            support_y=tf.constant(s_labels[None].astype(np.int32)),
            query_x=tf.constant(test.images[q_rows][None]),
        )
        model.append(np.mean(out["classes"].numpy()[0] == q_labels))
        features = omniglot.encode(encoder, test.images[np.concatenate([s_rows, q_rows])])
        features /= np.linalg.norm(features, axis=1, keepdims=True)
        support, query = features[: len(s_rows)], features[len(s_rows) :]
        distances = ((query[:, None] - support[None]) ** 2).sum(-1)
        nearest.append(np.mean(s_labels[distances.argmin(1)] == q_labels))
    print(f"{args.setting}, {args.episodes} test-alphabet episodes, {args.queries} queries/class\n")
    print("| classifier | accuracy (%) |")
    print("|---|---:|")
    for name, scores in (
        (f"served: {served} (version {version})", model),
        ("nearest neighbour on the encoder's features", nearest),
    ):
        result = mean_confidence_interval(np.array(scores))
        mean, ci = result.mean, result.ci95
        print(f"| {name} | {100 * mean:.1f} ± {100 * ci:.1f} |")


if __name__ == "__main__":
    main()
