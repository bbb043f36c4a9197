"""Early stopping on the meta-validation metric: the best value and step so far, and a
stop after `patience` validations without improvement. Its state is variables, saved in
the training checkpoint (names unchanged: best_val, best_step, evals_since_best,
stopped_early), so a resumed run stops where an uninterrupted one would."""

from __future__ import annotations

import math

import tensorflow as tf


class EarlyStopping:
    """Keeps the best validation value: the lowest (MSE) or the highest (accuracy)."""

    def __init__(self, *, higher_is_better: bool, patience: int | None) -> None:
        if patience is not None and patience < 1:
            raise ValueError(f"EvaluationSpec.patience must be >= 1 or None, got {patience}")
        self.patience = patience
        self.sign = -1.0 if higher_is_better else 1.0
        self.best_val = tf.Variable(self.sign * math.inf, trainable=False, name="best_val")
        self.best_step = tf.Variable(-1, dtype=tf.int64, trainable=False, name="best_step")
        self.evals_since_best = tf.Variable(0, dtype=tf.int64, trainable=False)
        self.stopped_early = tf.Variable(False, trainable=False)

    def checkpoint_items(self) -> dict[str, tf.Variable]:
        """The state, by its names in the training checkpoint."""
        return {
            "best_val": self.best_val,
            "best_step": self.best_step,
            "evals_since_best": self.evals_since_best,
            "stopped_early": self.stopped_early,
        }

    def update(self, step: int, value: float) -> bool:
        """Records a validation at `step`; True if it is the best so far."""
        if self.sign * value < self.sign * float(self.best_val.numpy()):
            self.best_val.assign(value)
            self.best_step.assign(step)
            self.evals_since_best.assign(0)
            return True
        self.evals_since_best.assign_add(1)
        if self.patience is not None and int(self.evals_since_best.numpy()) >= self.patience:
            self.stopped_early.assign(True)
        return False

    @property
    def stopped(self) -> bool:
        return bool(self.stopped_early.numpy())
