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
from timing import header

from serving.omniglot_client import omniglot_episode
from viable_tf.evaluation.statistics import mean_confidence_interval
from viable_tf.export import layout
from viable_tf.networks import omniglot_encoder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work_dir", required=True, help="a viable-omniglot work folder")
    parser.add_argument("--data_dir", default="../shared/data/omniglot")
    parser.add_argument("--setting", default="20way1shot")
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--queries", type=int, default=5, help="per class")
    parser.add_argument("--run", default="", help="the export to score (default: results.json's)")
    args = parser.parse_args()
    ways, shots = (int(n) for n in args.setting.removesuffix("shot").split("way"))
    served = args.run
    if not served:
        with open(os.path.join(args.work_dir, "results.json")) as f:
            served = json.load(f)["served"][args.setting]
    base = os.path.join(args.work_dir, "export", served)
    version = layout.version_folders(base)[-1]
    serve = tf.saved_model.load(os.path.join(base, str(version))).signatures["serving_default"]
    encoder = keras.saving.load_model(os.path.join(args.work_dir, "encoder", "encoder.keras"))
    model, nearest = [], []
    for seed in range(10_000, 10_000 + args.episodes):  # apart from the client's seeds
        support_x, support_y, query_x, query_y = omniglot_episode(
            args.data_dir, ways, shots, args.queries, seed
        )
        out = serve(support_x=support_x, support_y=support_y, query_x=query_x)
        model.append(np.mean(out["classes"].numpy() == query_y))
        features = omniglot_encoder.encode(encoder, np.concatenate([support_x[0], query_x[0]]))
        features /= np.linalg.norm(features, axis=1, keepdims=True)
        support, query = features[: support_y.size], features[support_y.size :]
        distances = ((query[:, None] - support[None]) ** 2).sum(-1)
        nearest.append(np.mean(support_y[0][distances.argmin(1)] == query_y[0]))
    print(
        header(
            f"{args.setting}, {args.episodes} test-alphabet episodes, {args.queries} queries/class"
        )
    )
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
