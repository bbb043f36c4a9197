"""The Python loop around a `Trainer`'s compiled chunks: resume, run a chunk up to the
next step a trigger is due at, check it, write its loss summaries, run the due triggers
(triggers.py), until the run's last step or early stopping.

The periodic jobs a `Trainer` runs, in order (`Trainer.default_triggers`): validation with
its summaries, early stopping and the best weights, every `eval_every` updates and at
the last; figures of adapted fits at the validations on a multiple of `figure_every`
(chief only; drawn by a worker process while training goes on); the latest training
checkpoint and the summaries' flush with validation. A run's own triggers follow them.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np
import tensorflow as tf
from tqdm import tqdm

from viable_tf.run_dir import RunDir
from viable_tf.training import errors, summaries
from viable_tf.training.checkpoints import TrainingCheckpoints
from viable_tf.training.early_stopping import EarlyStopping
from viable_tf.training.triggers import Trigger, Validation, chunk_end


class ChunkedTraining(Protocol):
    """What the loop runs (a `Trainer`): a compiled chunk of up to `steps_per_call`
    meta-updates, `train_chunk(n)` -> (updates run, loss sums per summary segment...,
    the index of the first non-finite meta-loss or -1), and the run's state."""

    model_dir: str
    run_dir: RunDir
    num_steps: int
    steps_per_call: int
    chief: bool
    show_progress: bool
    early_stopping: EarlyStopping
    checkpoints: TrainingCheckpoints
    summaries: summaries.TrainingSummaries

    def restore(self) -> int: ...

    def train_chunk(self, num_updates: tf.Tensor) -> tuple: ...


def train(
    trainer: ChunkedTraining,
    make_triggers: Callable[[summaries.FigureWriter, object], list[Trigger]],
    triggers: Sequence[Trigger] = (),
) -> None:
    """Meta-trains `trainer` up to its `num_steps`, resuming from its latest checkpoint;
    between chunks the jobs of `make_triggers(figure_writer, summary_writer)`, then
    `triggers`; the progress bar shows the last value of the first `Validation`."""
    step = trainer.restore()
    if step and trainer.chief:
        print(
            f"resuming from {trainer.model_dir}/checkpoints at meta-update {step} "
            f"of {trainer.num_steps}",
            file=sys.stderr,
            flush=True,
        )
    last_step = trainer.num_steps
    writer = trainer.summaries.writer()
    with writer.as_default(), contextlib.ExitStack() as stack:
        figure_writer = summaries.FigureWriter(stack)  # a worker at the first figure
        jobs = [*make_triggers(figure_writer, writer), *triggers]
        validation = next((job for job in jobs if isinstance(job, Validation)), None)
        if trainer.chief:
            summaries.operative_config(trainer.model_dir, step)
        show = dict(unit="step", disable=not trainer.show_progress, dynamic_ncols=True)
        bar = tqdm(total=last_step, initial=step, **show)
        try:
            while step < last_step and not trainer.early_stopping.stopped:
                chunk = chunk_end(step, last_step, trainer.steps_per_call, jobs) - step
                start_time = time.perf_counter()
                with errors.peers_answering(trainer.run_dir.checkpoints, step):
                    ran, *segments, first_bad = trainer.train_chunk(tf.constant(chunk))
                    ran, first_bad = int(ran), int(first_bad)  # waits for the chunk
                seconds = time.perf_counter() - start_time
                errors.check_finite(trainer.run_dir.checkpoints, step, first_bad)
                trainer.summaries.points(np.int64(step), *segments, np.float32(ran / seconds))
                step += ran
                bar.update(ran)
                postfix = {"meta_loss": f"{segments[0].numpy().sum() / ran:.4f}"}
                for job in jobs:
                    if job.due(step, last_step):
                        job(step)
                        if job is validation:
                            postfix[f"val_{job.validate.metric}"] = f"{job.last:.4f}"
                bar.set_postfix(postfix, refresh=False)
            figure_writer.write(wait=True)
        finally:
            bar.close()
            trainer.checkpoints.close()  # a worker's temporary folder goes
    writer.flush()
