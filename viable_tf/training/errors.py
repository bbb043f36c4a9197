"""Why training stops before its last meta-update, each as one clear line."""

from __future__ import annotations

import contextlib

import tensorflow as tf


class NonFiniteLossError(RuntimeError):
    """The meta-loss became NaN or infinite; nothing after the last checkpoint is saved."""


class WorkerLostError(RuntimeError):
    """A worker of a multi-worker job stopped answering; the job stops, resumable."""


#: What a collective op raises when a peer dies or stops answering.
PEER_FAILURES = (
    tf.errors.UnavailableError,
    tf.errors.DeadlineExceededError,
    tf.errors.CancelledError,
    tf.errors.AbortedError,
)


def non_finite_message(checkpoints: str, bad_step: int) -> str:
    """NonFiniteLossError's message; `checkpoints` is the run's checkpoint folder."""
    latest = tf.train.latest_checkpoint(checkpoints)
    kept = f"the last good checkpoint {latest} is kept" if latest else "no checkpoint yet"
    return (
        f"meta-loss is not finite (NaN or inf) at meta-update {bad_step}; training "
        f"stopped and {kept}. Expected a finite loss: lower StaircaseDecay.learning_rate or "
        f"the learner's inner_lr, or keep the meta-gradient clipped (OptimizerChain.transforms)."
    )


def worker_lost_message(checkpoints: str, step: int, error: Exception) -> str:
    """WorkerLostError's message after a collective op failed with `error`."""
    latest = tf.train.latest_checkpoint(checkpoints)
    where = f"the last checkpoint is {latest}" if latest else "no checkpoint was written yet"
    return (
        f"lost contact with another worker after meta-update {step} (the collective "
        f"all-reduce failed with {type(error).__name__}); the job stopped and {where}. "
        "Restart every worker with the same command to resume from it."
    )


@contextlib.contextmanager
def peers_answering(checkpoints: str, step: int):
    """Turns a collective op's failure (a peer died or stopped answering) into
    WorkerLostError with its one line."""
    try:
        yield
    except PEER_FAILURES as error:
        raise WorkerLostError(worker_lost_message(checkpoints, step, error)) from None


def check_finite(checkpoints: str, step: int, first_bad: int) -> None:
    """Raises NonFiniteLossError if a chunk that started after meta-update `step` met a
    non-finite meta-loss at its update `first_bad` (-1: none)."""
    if first_bad >= 0:
        raise NonFiniteLossError(non_finite_message(checkpoints, step + first_bad + 1))
