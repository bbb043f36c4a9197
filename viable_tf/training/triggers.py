"""The training loop's periodic jobs, as triggers the loop runs between compiled chunks
(after TF-Agents' `Learner` and its triggers).

A trigger has an `interval` in meta-updates and is called with the step the run has
reached whenever that step is a multiple of it, or the run's last step if `at_end`. The
loop ends its compiled chunks at every multiple of every trigger's interval, so a trigger
never waits for a chunk to end past its step, and calls the due triggers in their order.
`Trainer.train` runs, in this order: validation (summaries, early stopping, the best
weights), figures of adapted fits, the latest training checkpoint, and the summaries'
flush; `train(triggers=...)` appends a run's own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import tensorflow as tf

from viable_tf.training.checkpoints import TrainingCheckpoints
from viable_tf.training.early_stopping import EarlyStopping
from viable_tf.training.summaries import FigureWriter, TrainingSummaries


class Trigger:
    """A periodic job: called at every multiple of `interval` (and at the run's last step
    if `at_end`). Subclasses implement `__call__(step)`."""

    def __init__(self, interval: int, *, at_end: bool = True) -> None:
        if interval < 1:
            raise ValueError(f"a trigger's interval must be >= 1, got {interval}")
        self.interval = interval
        self.at_end = at_end

    def due(self, step: int, last_step: int) -> bool:
        return step % self.interval == 0 or (self.at_end and step == last_step)

    def __call__(self, step: int) -> None:
        raise NotImplementedError


class FunctionTrigger(Trigger):
    """A trigger that calls `fn(step)`."""

    def __init__(self, interval: int, fn: Callable[[int], None], *, at_end: bool = True):
        super().__init__(interval, at_end=at_end)
        self.fn = fn

    def __call__(self, step: int) -> None:
        self.fn(step)


def chunk_end(step: int, last_step: int, steps_per_call: int, triggers: Sequence[Trigger]) -> int:
    """Where the compiled chunk that starts at `step` ends: at most `steps_per_call`
    updates on, at the run's last step, and at the next multiple of any interval."""
    end = min(step + steps_per_call, last_step)
    for trigger in triggers:
        end = min(end, (step // trigger.interval + 1) * trigger.interval)
    return end


class Validation(Trigger):
    """Meta-validates the learner, writes the validation summaries, and keeps the best
    weights by the early-stopping rule; `last` holds the value for the progress bar."""

    def __init__(
        self,
        interval: int,
        *,
        validate,
        learner,
        early_stopping: EarlyStopping,
        checkpoints: TrainingCheckpoints,
        summaries: TrainingSummaries,
        fallback_updates: tf.Variable | None,
    ) -> None:
        super().__init__(interval)
        self.validate = validate
        self.learner = learner
        self.early_stopping = early_stopping
        self.checkpoints = checkpoints
        self.summaries = summaries
        self.fallback_updates = fallback_updates  # counted where a transform falls back
        self.last: float | None = None

    def __call__(self, step: int) -> None:
        result = self.validate(self.learner)
        self.summaries.validation(
            np.int64(step),
            np.float32(result.mean),
            np.float32(result.inner_loss_pre.mean()),
            np.float32(result.inner_loss_post.mean()),
        )
        if self.fallback_updates is not None and self.summaries.chief:
            tf.summary.scalar("fallback_updates", self.fallback_updates, step=step)
        if self.early_stopping.update(step, result.mean):
            self.checkpoints.best.save(checkpoint_number=step)
        self.last = result.mean


class Figures(Trigger):
    """At the validations (every `interval`, and the last step) that fall on a multiple
    of `every`: computes the figures of adapted fits now (`make()`: {name: draw}) and
    hands them to the figure worker, which draws them while training goes on."""

    def __init__(
        self,
        interval: int,
        every: int,
        make: Callable[[], dict],
        writer: FigureWriter,
    ) -> None:
        super().__init__(interval)
        self.every = every
        self.make = make
        self.writer = writer

    def due(self, step: int, last_step: int) -> bool:
        return super().due(step, last_step) and step % self.every == 0

    def __call__(self, step: int) -> None:
        self.writer.submit(step, self.make())


class Flush(Trigger):
    """Writes the figures drawn so far and flushes the summary writer (a file write on the
    training thread, so only this often)."""

    def __init__(self, interval: int, figures: FigureWriter, writer) -> None:
        super().__init__(interval)
        self.figures = figures
        self.writer = writer

    def __call__(self, step: int) -> None:
        self.figures.write(wait=False)
        self.writer.flush()
