"""How a learner's meta-loss moves while it overfits one fixed sine batch.

    .venv/bin/python benchmarks/overfit_trajectory.py attviable --lr 5e-3 --clip 0
    .venv/bin/python benchmarks/overfit_trajectory.py attviable --lr 1e-3 --clip 10 --norm pre

Run it once per float path (the default, TF_ENABLE_ONEDNN_OPTS=0, ONEDNN_MAX_CPU_ISA=AVX2)
to see whether a trajectory is stable or only lands low on one CPU's kernels. Prints one
JSON line: the initial and last loss, the median of the last 20, the best, the number of
single updates that raised the loss by more than 20%, and the loss every 25 updates.
The batch is the overfit test's (5 sine tasks of seed (0, 0), K = Q = 10), the learner the
shipped default of its name, Adam with elementwise clipping as the Trainer applies it.
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

from viable_tf.learners import CAVIA, MAML, MAMLVIABLE, VIABLE
from viable_tf.networks import AttentionLossNetwork, RelationLossNetwork, SimpleLossNetwork
from viable_tf.tasks import SineTasks, seed_for


def learner(name: str, norm: str):
    losses = {
        "simviable": SimpleLossNetwork,
        "relviable": RelationLossNetwork,
        "attviable": lambda: AttentionLossNetwork(norm=norm),
    }
    if name in ("cavia", "maml"):
        return {"cavia": CAVIA, "maml": MAML}[name](input_dim=1, output_dim=1)
    if name.startswith("maml_"):
        return MAMLVIABLE(input_dim=1, output_dim=1, loss_network=losses[name[5:]])
    return VIABLE(input_dim=1, output_dim=1, loss_network=losses[name])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("learner", help="cavia, maml, simviable, relviable, attviable, maml_*")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--clip", type=float, default=10.0, help="0: no clipping")
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--norm", default="post", help="attVIABLE's LayerNorm: post or pre")
    parser.add_argument("--seed", type=int, default=0, help="the initial weights' seed")
    args = parser.parse_args()
    keras.utils.set_random_seed(args.seed)
    model = learner(args.learner, args.norm)
    batch = SineTasks().sample(seed_for(0, 0), 5)
    optimizer = keras.optimizers.Adam(args.lr)
    variables = model.trainable_variables
    optimizer.build(variables)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss, _ = model.meta_loss(batch)
        grads = tape.gradient(loss, variables)
        if args.clip > 0:
            grads = [tf.clip_by_value(g, -args.clip, args.clip) for g in grads]
        optimizer.apply_gradients(zip(grads, variables, strict=True))
        return loss

    losses = np.array(
        [float(step()) for _ in range(args.steps)] + [float(model.meta_loss(batch)[0])]
    )
    print(
        json.dumps(
            {
                "learner": args.learner,
                "lr": args.lr,
                "clip": args.clip,
                "norm": args.norm,
                "initial": float(losses[0]),
                "last": float(losses[-1]),
                "median_last_20": float(np.median(losses[-20:])),
                "best": float(losses.min()),
                "jumps_over_20pct": int(np.sum(losses[1:] > 1.2 * losses[:-1])),
                "every_25": [round(float(x), 4) for x in losses[::25]],
                "machine": header().strip(),
            }
        )
    )


if __name__ == "__main__":
    main()
