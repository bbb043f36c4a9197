"""A model directory written by viable-train, every file of it by name (loading a trained
run from it is `viable_tf.config.load_run`, which needs every configurable registered).

    D/operative_config.gin   every gin binding the run used (written by the main job)
    D/results.json           the test result of the best checkpoint, with hyper-parameters
    D/eval_k<K>.json         viable-eval's result at K support points
    D/checkpoints/           latest training state (weights, optimizer, step, early stopping)
    D/best/                  the weights with the best meta-validation result
    D/log.txt                a driver's log of the run (viable-sine-paper, viable-omniglot)
    D/events.out.tfevents.*  TensorBoard summaries
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class RunDir:
    """The paths of one model directory."""

    path: str

    @property
    def operative_config(self) -> str:
        return os.path.join(self.path, "operative_config.gin")

    @property
    def results(self) -> str:
        return os.path.join(self.path, "results.json")

    @property
    def checkpoints(self) -> str:
        return os.path.join(self.path, "checkpoints")

    @property
    def best(self) -> str:
        return os.path.join(self.path, "best")

    @property
    def log(self) -> str:
        return os.path.join(self.path, "log.txt")

    def evaluation(self, num_support: int) -> str:
        """viable-eval's result at K = `num_support`."""
        return os.path.join(self.path, f"eval_k{num_support}.json")

    def per_task(self, num_support: int | None = None) -> str:
        """Each test task's metric, of results.json (or of viable-eval's at K)."""
        name = "per_task.json" if num_support is None else f"eval_k{num_support}_per_task.json"
        return os.path.join(self.path, name)

    def read_results(self) -> dict:
        with open(self.results) as f:
            return json.load(f)

    def best_checkpoint(self) -> str | None:
        """The best weights' checkpoint, falling back to the latest state's (None: none)."""
        import tensorflow as tf

        return tf.train.latest_checkpoint(self.best) or tf.train.latest_checkpoint(self.checkpoints)

    def training_state(self) -> dict[str, float | int]:
        """Step and early-stopping state of the latest checkpoint ({} if there is none)."""
        import tensorflow as tf

        latest = tf.train.latest_checkpoint(self.checkpoints)
        if latest is None:
            return {}
        reader = tf.train.load_checkpoint(latest)
        value = "{}/.ATTRIBUTES/VARIABLE_VALUE".format
        return {
            "step": int(reader.get_tensor(value("step"))),
            "best_val": float(reader.get_tensor(value("best_val"))),
        }
