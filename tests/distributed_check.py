"""Run as a script: a meta-update under MirroredStrategy over 2 logical CPUs vs one device.

    python tests/distributed_check.py CLIP [CLIP ...]

Prints one JSON line, an object by clipping bound, comparing the two: the meta-loss
and the summed, clipped meta-gradient of the same tasks, and the weights after the
update where Adam's step is well defined, each difference in float32 ulps of the
compared quantity's scale (tests/tolerances.py). Logical devices must be set up
before TensorFlow starts, hence a separate process.
"""

import json
import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import tensorflow as tf
from tolerances import ulps

from viable_tf.learners import VIABLE
from viable_tf.tasks import SineTasks
from viable_tf.training import (
    ClipElementwise,
    OptimizerChain,
    PerformanceSpec,
    Trainer,
    make_strategy,
)


def trainer(strategy, clip, **kwargs):
    # The single-device trainer compiles with XLA, the mirrored one cannot: the tasks
    # are the same because every stateless draw states its algorithm (philox).
    return Trainer(
        model_dir=tempfile.mkdtemp(),
        tasks=SineTasks(),
        learner=VIABLE,  # relVIABLE
        seed=3,
        optimizer=OptimizerChain(transforms=() if clip is None else (ClipElementwise(clip),)),
        show_progress=False,
        strategy=strategy,
        **{"meta_batch_size": 25, **kwargs},  # 13 + 12 tasks: an uneven split on purpose
    )


def compare(mirrored_strategy, clip: float) -> dict:
    single = trainer(tf.distribute.get_strategy(), clip)
    mirrored = trainer(mirrored_strategy, clip)
    initial = max(
        float(np.max(np.abs(a.numpy() - b.numpy())))
        for a, b in zip(single.variables, mirrored.variables, strict=True)
    )
    results = []
    for model in (single, mirrored):
        loss, _, grads = tf.function(model.meta_gradients, autograph=False)()
        model.train_chunk(tf.constant(1))
        results.append((float(loss), [g.numpy() for g in grads]))
    (loss_a, grads_a), (loss_b, grads_b) = results
    grad_scale = max(float(np.max(np.abs(a))) for a in grads_a)
    at_bound = sum(int(np.sum(np.abs(a) == clip)) for a in grads_a)  # clipped elements
    weight_ulps = 0.0
    for a, b, g in zip(single.variables, mirrored.variables, grads_a, strict=True):
        clear = np.abs(g) > 1e-3 * grad_scale  # Adam's first step is +-lr: sign-stable only
        if clear.any():
            a, b = a.numpy(), b.numpy()
            weight_ulps = max(weight_ulps, ulps(b[clear], a[clear], float(np.max(np.abs(a)))))
    return {
        "replicas": mirrored.strategy.num_replicas_in_sync,
        "initial_weight_diff": initial,
        "loss_single": loss_a,
        "loss_mirrored": loss_b,
        "loss_ulps": ulps(loss_b, loss_a),
        "grad_ulps": gradient_ulps(grads_a, grads_b),
        "grad_scale": grad_scale,
        "clipped_elements": at_bound,
        "weight_ulps": weight_ulps,
        "steps": [int(single.step.numpy()), int(mirrored.step.numpy())],
    }


def gradient_ulps(expected, actual) -> float:
    """The largest difference, in ulps of each variable's largest gradient entry."""
    return max(ulps(b, a) for a, b in zip(expected, actual, strict=True))


def passes(mirrored_strategy) -> dict:
    """Each replica's 12 tasks in passes of 5, 5 and 2 (`PerformanceSpec.tasks_per_pass`) vs one
    device in one pass: the meta-gradient (what a meta-update applies)."""
    results = []
    for strategy, per_pass in ((tf.distribute.get_strategy(), None), (mirrored_strategy, 5)):
        performance = PerformanceSpec(tasks_per_pass=per_pass)
        model = trainer(strategy, 10.0, meta_batch_size=24, performance=performance)
        loss, _, grads = tf.function(model.meta_gradients, autograph=False)()
        results.append((float(loss), [g.numpy() for g in grads]))
    (loss_a, grads_a), (loss_b, grads_b) = results
    try:
        trainer(mirrored_strategy, 10.0, performance=PerformanceSpec(tasks_per_pass=5))  # 25 tasks
        refused = ""
    except ValueError as error:
        refused = str(error)
    return {
        "loss_ulps": ulps(loss_b, loss_a),
        "grad_ulps": gradient_ulps(grads_a, grads_b),
        "grad_scale": max(float(np.max(np.abs(a))) for a in grads_a),
        "uneven_error": refused,
    }


def main() -> None:
    # One process for every bound: logical devices are set up once, before TF starts.
    mirrored_strategy = make_strategy("mirrored", logical_cpus=2)
    clips = sys.argv[1:] or ["10"]
    checks = {clip: compare(mirrored_strategy, float(clip)) for clip in clips}
    checks["passes"] = passes(mirrored_strategy)
    print(json.dumps(checks))


if __name__ == "__main__":
    main()
