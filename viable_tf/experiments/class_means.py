"""The Omniglot drivers' reference row: each query labelled by the nearest class mean of its
support set's inputs (features or pixels), on the runs' own test episodes, nothing learned."""

from __future__ import annotations

import os


def reference(setting: str, test_episodes: int, *, configs: str, data: tuple[str, ...]) -> dict:
    """Nearest class mean at `setting` (e.g. 5way1shot) on the test episodes of
    `configs`/base.gin with the data bindings `data`."""
    import gin

    from viable_tf.cli.common import parse_gin
    from viable_tf.config import evaluate_reference
    from viable_tf.evaluation.classification import (
        classification_test_evaluator,
        nearest_mean_accuracy,
    )

    ways, shots = (int(n) for n in setting.removesuffix("shot").split("way"))
    # The data and episodes exactly as the runs' configs set them (CONFIGS/base.gin).
    parse_gin(
        [f"{configs}/base.gin"],
        [
            *data,
            f"NUM_WAYS={ways}",
            f"NUM_SHOTS={shots}",
            f"classification_test_evaluator.num_episodes={test_episodes}",
        ],
    )
    tasks = evaluate_reference(gin.get_bindings("Trainer", resolve_references=False)["tasks"])
    result = nearest_mean_accuracy(classification_test_evaluator(tasks))
    return {"mean": result.mean, "ci95": result.ci95, "num_tasks": result.num_tasks}


def write_reference(
    work_dir: str,
    settings: tuple[str, ...],
    test_episodes: int,
    *,
    configs: str,
    data: tuple[str, ...],
) -> dict:
    """The drivers' `--reference_only`: the nearest class mean of every setting, printed
    and written to W/reference.json, nothing trained."""
    from viable_tf.training.experiment import write_json

    found = {s: reference(s, test_episodes, configs=configs, data=data) for s in settings}
    os.makedirs(work_dir, exist_ok=True)
    write_json(found, os.path.join(work_dir, "reference.json"))
    for setting, result in found.items():
        print(
            f"{setting}: nearest class mean {100 * result['mean']:.1f} ± "
            f"{100 * result['ci95']:.1f}%",
            flush=True,
        )
    return found
