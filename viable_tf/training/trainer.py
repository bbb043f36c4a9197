"""Meta-training (SPEC §1, outer loop): Adam on theta (and psi), early stopping.

One call of the compiled step function runs many meta-updates in a
`tf.while_loop`, so there is no Python round trip per meta-update. The tasks of
meta-update t are drawn from the stateless seed (seed, t): a run killed at any
point and restarted resumes from its last checkpoint and ends in exactly the
state of an uninterrupted run. The tasks of several meta-updates are drawn
together, ahead of the loop that uses them (`draw_ahead`): drawn inside the loop's
body, XLA's CPU code ran sine's meta-update 1.5-1.7x slower (docs/BENCHMARKS.md).

Around the compiled chunks the loop does as little as it can on the training
thread: a call of the compiled function runs up to a validation (500 updates) and
returns the losses summed per 100 updates, so that summaries keep their points; a
checkpoint is one graph call (checkpoints.py); the validation tasks are drawn once;
summaries are flushed at each validation; figures are drawn by a worker process.

It writes, in a model directory D (see run_dir.RunDir for every file):
  D/checkpoints/   latest state (weights, optimizer, step, early-stopping state)
  D/best/          weights with the best meta-validation result so far (MSE or accuracy)
  D/events*        TensorBoard summaries

Under a tf.distribute strategy (see distribute.py) every replica computes the
gradient of its share of the meta-batch; the gradients are summed (one all-reduce of
them all, packed into one vector), clipped and applied once, so the update equals
the single-device one. Only the chief writes checkpoints, summaries and results;
other workers write checkpoints to a temporary folder (as tf.distribute requires
every worker to save) and drop it.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import shutil
import sys
import tempfile
import time

import gin
import keras
import numpy as np
import tensorflow as tf
from tqdm import tqdm

from viable_tf.evaluation.protocols import validation_protocol
from viable_tf.figure_worker import FigureWorker
from viable_tf.learners.base import Learner
from viable_tf.ops import seed_for
from viable_tf.run_dir import RunDir
from viable_tf.tasks.base import TaskBatch
from viable_tf.training import summaries
from viable_tf.training.checkpoints import CheckpointWriter
from viable_tf.training.distribute import is_chief, replica_slice

#: The tasks of several meta-updates are drawn together (Trainer.draw_ahead), up to
#: this many updates and this size (a block is drawn whole, even where a call ends
#: sooner).
DRAW_AHEAD_UPDATES = 100
DRAW_AHEAD_BYTES = 16 * 2**20


def _summary_points(start, loss_sums, inner_sums, counts, rates, updates_per_second) -> None:
    """A chunk's points of the training summaries from its per-segment sums [S] (see
    `Trainer._run_meta_updates`), traced into one graph call: a call per point cost
    ~1 ms from Python."""
    ends = start + tf.cumsum(tf.cast(counts, tf.int64))
    for i in tf.range(tf.size(counts)):
        if counts[i] > 0:  # a point every summary_every updates, and at the end
            with tf.name_scope("train/"):  # absolute: keeps the loop's scope out of the tags
                tf.summary.scalar("meta_loss", loss_sums[i] / counts[i], step=ends[i])
                tf.summary.scalar("inner_loss_pre", inner_sums[i] / counts[i], step=ends[i])
                tf.summary.scalar("learning_rate", rates[i], step=ends[i])
                tf.summary.scalar("meta_updates_per_second", updates_per_second, step=ends[i])


def _validation_point(step, value, inner_loss_pre, inner_loss_post, *, metric: str) -> None:
    """A validation's summaries (one graph call, as `_summary_points`)."""
    tf.summary.scalar(f"validation/{metric}", value, step=step)
    tf.summary.scalar("validation/inner_loss_pre", inner_loss_pre, step=step)
    tf.summary.scalar("validation/inner_loss_post", inner_loss_post, step=step)


class NonFiniteLossError(RuntimeError):
    """The meta-loss became NaN or infinite; nothing after the last checkpoint is saved."""


class WorkerLostError(RuntimeError):
    """A worker of a multi-worker job stopped answering; the job stops, resumable."""


# What a collective op raises when a peer dies or stops answering.
_PEER_FAILURES = (
    tf.errors.UnavailableError,
    tf.errors.DeadlineExceededError,
    tf.errors.CancelledError,
    tf.errors.AbortedError,
)


def _pack(result) -> tf.Tensor:
    """(loss, inner loss, gradients) as one float32 vector [2 + number of weights]."""
    loss, inner, grads = result
    return tf.concat([tf.stack([loss, inner])] + [tf.reshape(g, [-1]) for g in grads], 0)


def _unpack(packed: tf.Tensor, variables) -> tuple[tf.Tensor, tf.Tensor, list[tf.Tensor]]:
    """`_pack`'s inverse, the gradients shaped as `variables`."""
    sizes = [2] + [int(v.shape.num_elements()) for v in variables]
    head, *flat = tf.split(packed, sizes)
    return head[0], head[1], [tf.reshape(g, v.shape) for g, v in zip(flat, variables, strict=True)]


def weighted_gradients(learner: Learner, variables, batch: TaskBatch, weight):
    """(weight x meta-loss, weight x pre-update inner loss, their gradients) on `batch`."""
    with tf.GradientTape() as tape:
        loss, metrics = learner.meta_loss(batch)
        loss = loss * weight
    grads = tape.gradient(loss, variables)
    return loss, metrics.get("inner_loss_pre", tf.constant(0.0)) * weight, grads


def gradients_in_passes(
    learner: Learner, variables, batch: TaskBatch, start, size: int, per_pass: int, total: int
):
    """`weighted_gradients` of tasks [start, start + size) of `batch`, each weighted by
    1 / `total`, computed `per_pass` tasks at a time and summed. Each pass starts after
    the previous one's gradients exist, so that the graph executor cannot overlap them
    (and hold the activations of both)."""
    result = None
    for first in range(0, size, per_pass):
        last = min(first + per_pass, size)
        wait = [] if result is None else tf.nest.flatten(result)
        with tf.control_dependencies(wait):
            part = type(batch)(*(t[start + first : start + last] for t in batch))
            done = weighted_gradients(learner, variables, part, (last - first) / total)
        result = done if result is None else tf.nest.map_structure(tf.add, result, done)
    return result


@gin.configurable
class Trainer:
    """Meta-trains a learner on a task sampler; see the module docstring.

    Args:
      model_dir: where checkpoints and summaries go (D).
      tasks: the task sampler.
      learner: a factory called with `input_dim` and `output_dim` of the tasks.
      num_steps: meta-updates in total.
      meta_batch_size: tasks per meta-update (B).
      seed: the run's seed (task stream and weight initialisation).
      learning_rate: beta, Adam's initial learning rate ...
      lr_decay_steps, lr_decay_rate: ... multiplied by `lr_decay_rate` every
        `lr_decay_steps` meta-updates (staircase).
      clip_value: meta-gradients are clipped elementwise to [-clip_value,
        clip_value], as in the public CAVIA code; None disables clipping.
      eval_every: meta-validate and checkpoint every this many meta-updates.
      patience: stop after this many validations without improvement (None: never).
      steps_per_call: meta-updates per call of the compiled step function (at most;
        a call also ends at each validation).
      summary_every: a point of the training summaries every this many meta-updates.
      draw_ahead: the tasks of this many meta-updates are drawn in one go, before
        the updates (None: `DRAW_AHEAD_UPDATES`, fewer where their tasks would
        exceed `DRAW_AHEAD_BYTES` or `steps_per_call`). The same tasks whatever its
        value.
      tasks_per_pass: the meta-gradient is computed over at most this many tasks
        at a time and summed (None: a replica's whole share at once). Peak memory
        of a meta-update falls with it (the tasks' forward and backward passes run
        one group after another); the update is the same up to rounding. For
        relVIABLE's second-order meta-gradient this is the memory lever:
        `tf.recompute_grad` cannot be differentiated twice (docs/BENCHMARKS.md).
        A replica's share must then be static: `meta_batch_size` a multiple of
        the replica count.
      jit_compile: compile the meta-update with XLA (single device only). Every
        stateless draw states its algorithm (`ops.RNG_ALG`), so a seed gives the same
        training tasks with or without XLA, on one device or mirrored.
      figure_every: log a figure of adapted fits every this many meta-updates (0: never).
      keep_checkpoints: how many latest checkpoints to keep.
      show_progress: show a progress bar on the console.
      strategy: a tf.distribute strategy (default: the current one, one device).
    """

    def __init__(
        self,
        *,
        model_dir: str,
        tasks=gin.REQUIRED,
        learner=gin.REQUIRED,
        num_steps: int = 50_000,
        meta_batch_size: int = 25,
        seed: int = 0,
        learning_rate: float = 1e-3,
        lr_decay_steps: int = 5_000,
        lr_decay_rate: float = 0.9,
        clip_value: float | None = 10.0,
        eval_every: int = 500,
        patience: int | None = None,
        steps_per_call: int = 500,
        summary_every: int = 100,
        draw_ahead: int | None = None,
        tasks_per_pass: int | None = None,
        jit_compile: bool = True,
        figure_every: int = 5_000,
        keep_checkpoints: int = 2,
        show_progress: bool = True,
        strategy: tf.distribute.Strategy | None = None,
    ) -> None:
        for name, value in (
            ("num_steps", num_steps),
            ("meta_batch_size", meta_batch_size),
            ("eval_every", eval_every),
            ("steps_per_call", steps_per_call),
            ("summary_every", summary_every),
            ("lr_decay_steps", lr_decay_steps),
            ("keep_checkpoints", keep_checkpoints),
        ):
            if value < 1:
                raise ValueError(f"Trainer.{name} must be >= 1, got {value}")
        if draw_ahead is not None and draw_ahead < 1:
            raise ValueError(f"Trainer.draw_ahead must be >= 1 or None, got {draw_ahead}")
        if tasks_per_pass is not None and tasks_per_pass < 1:
            raise ValueError(f"Trainer.tasks_per_pass must be >= 1 or None, got {tasks_per_pass}")
        if clip_value is not None and not clip_value > 0:
            raise ValueError(f"Trainer.clip_value must be > 0 or None, got {clip_value}")
        if patience is not None and patience < 1:
            raise ValueError(f"Trainer.patience must be >= 1 or None, got {patience}")
        self.strategy = strategy or tf.distribute.get_strategy()
        self.chief = is_chief(self.strategy)
        replicas = self.strategy.num_replicas_in_sync
        if replicas > meta_batch_size:
            raise ValueError(
                f"meta_batch_size={meta_batch_size} is smaller than the {replicas} replicas; "
                "expected at least one task per replica"
            )
        if tasks_per_pass is not None and meta_batch_size % replicas:
            raise ValueError(
                f"Trainer.tasks_per_pass needs meta_batch_size ({meta_batch_size}) to be a "
                f"multiple of the {replicas} replicas, so that every share has a static size"
            )
        distributed = self.strategy is not tf.distribute.get_strategy() or replicas > 1
        self.model_dir = model_dir
        self.tasks = tasks
        self.num_steps = num_steps
        self.meta_batch_size = meta_batch_size  # B
        self.seed = seed
        self.clip_value = clip_value
        self.eval_every = eval_every
        self.patience = patience
        self.steps_per_call = steps_per_call
        self.summary_every = summary_every
        self.draw_ahead = draw_ahead
        self.tasks_per_pass = tasks_per_pass
        self.figure_every = figure_every
        self.show_progress = show_progress and self.chief

        self.validate = validation_protocol(tasks)
        # Early stopping keeps the best validation metric: lowest MSE, highest accuracy.
        self._sign = -1.0 if self.validate.higher_is_better else 1.0
        keras.utils.set_random_seed(seed)
        with self.strategy.scope():  # every variable, the optimizer's too, is mirrored
            self.learner: Learner = learner(input_dim=tasks.input_dim, output_dim=tasks.output_dim)
            if self.learner.task_loss_name != tasks.task_loss:
                raise ValueError(
                    f"the learner's task loss {self.learner.task_loss_name!r} does not fit "
                    f"{type(tasks).__name__}, whose tasks are scored with {tasks.task_loss!r}; "
                    f"expected {type(self.learner).__name__}.task_loss = {tasks.task_loss!r}"
                )
            self.variables = list(self.learner.trainable_variables)  # theta (and psi)
            self.lr_schedule = keras.optimizers.schedules.ExponentialDecay(
                learning_rate, lr_decay_steps, lr_decay_rate, staircase=True
            )
            self.optimizer = keras.optimizers.Adam(self.lr_schedule)
            self.optimizer.build(self.variables)
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
            self.best_val = tf.Variable(self._sign * math.inf, trainable=False, name="best_val")
            self.best_step = tf.Variable(-1, dtype=tf.int64, trainable=False, name="best_step")
            self.evals_since_best = tf.Variable(0, dtype=tf.int64, trainable=False)
            self.stopped_early = tf.Variable(False, trainable=False)
        checkpoint = tf.train.Checkpoint(
            learner=self.learner,
            optimizer=self.optimizer,
            step=self.step,
            best_val=self.best_val,
            best_step=self.best_step,
            evals_since_best=self.evals_since_best,
            stopped_early=self.stopped_early,
        )
        # Non-chief workers save too (tf.distribute needs every worker to), but into a
        # temporary folder that is dropped; everyone restores from the chief's.
        self.run_dir = RunDir(model_dir)
        write_dir = model_dir if self.chief else tempfile.mkdtemp(prefix="viable-worker-")
        self._scratch = None if self.chief else write_dir
        writes = RunDir(write_dir)
        self.manager = CheckpointWriter(
            checkpoint, writes.checkpoints, max_to_keep=keep_checkpoints
        )
        self.best_manager = CheckpointWriter(
            tf.train.Checkpoint(learner=self.learner, step=self.step), writes.best, max_to_keep=1
        )
        self._figure_worker: FigureWorker | None = None  # while train() runs
        self._training: contextlib.ExitStack | None = None  # train()'s, for the worker
        self._writer = None  # see _summary_writer
        # One graph call each writes a chunk's summary points and a validation's.
        segments = tf.TensorSpec([None], tf.float32)
        self._log_points = tf.function(
            _summary_points,
            input_signature=[tf.TensorSpec([], tf.int64)] + [segments] * 4 + [tf.TensorSpec([])],
        )
        self._log_validation = tf.function(
            functools.partial(_validation_point, metric=self.validate.metric),
            input_signature=[tf.TensorSpec([], tf.int64)] + [tf.TensorSpec([])] * 3,
        )
        # XLA compiles single-device training only; multi-device functions run as graphs.
        self.jit_compile = jit_compile and not distributed
        self._train_chunk = tf.function(self._run_meta_updates, jit_compile=self.jit_compile)

    # -- the compiled part -------------------------------------------------------

    def draw_tasks(self, step: tf.Tensor) -> TaskBatch:
        """The meta-batch of meta-update `step`: B tasks drawn from the seed (seed, step)."""
        return self.tasks.sample(seed_for(self.seed, step), self.meta_batch_size)

    def _replica_gradients(self, batch: TaskBatch):
        """This replica's share of the meta-batch: (loss, inner loss, gradients), weighted
        by its share of B so that summing over replicas gives the global mean's."""
        start, end = replica_slice(self.meta_batch_size)
        if self.tasks_per_pass is not None:
            size = self.meta_batch_size // self.strategy.num_replicas_in_sync
            return gradients_in_passes(
                self.learner,
                self.variables,
                batch,
                start,
                size,
                self.tasks_per_pass,
                self.meta_batch_size,
            )
        batch = type(batch)(*(t[start:end] for t in batch))
        share = tf.cast(end - start, tf.float32) / self.meta_batch_size
        return weighted_gradients(self.learner, self.variables, batch, share)

    def meta_gradients(
        self, batch: TaskBatch | None = None
    ) -> tuple[tf.Tensor, tf.Tensor, list[tf.Tensor]]:
        """(meta-loss, inner loss, clipped meta-gradients) on `batch` (default: the tasks
        of meta-update `step`), summed over replicas: the same, up to rounding, whatever
        the replica count. Every replica gets the whole batch and takes its share."""
        if batch is None:
            batch = self.draw_tasks(self.step)
        if self.strategy.num_replicas_in_sync == 1:
            per_replica = self.strategy.run(self._replica_gradients, args=(batch,))
            loss, inner, grads = tf.nest.map_structure(
                lambda t: self.strategy.reduce(tf.distribute.ReduceOp.SUM, t, axis=None),
                per_replica,
            )
        else:  # one all-reduce of everything, not one per variable (docs/DISTRIBUTED.md)
            packed = self.strategy.run(
                lambda batch: _pack(self._replica_gradients(batch)), args=(batch,)
            )
            summed = self.strategy.reduce(tf.distribute.ReduceOp.SUM, packed, axis=None)
            loss, inner, grads = _unpack(summed, self.variables)
        if self.clip_value is not None:  # on the summed gradient, as on one device
            grads = [tf.clip_by_value(g, -self.clip_value, self.clip_value) for g in grads]
        return loss, inner, grads

    def _meta_update(self, batch: TaskBatch) -> tuple[tf.Tensor, tf.Tensor]:
        """One meta-update on `batch`; returns (loss, inner loss)."""
        loss, inner, grads = self.meta_gradients(batch)
        self.optimizer.apply_gradients(zip(grads, self.variables, strict=True))
        self.step.assign_add(1)
        return loss, inner

    def _tasks_ahead(self, spec: TaskBatch) -> int:
        """How many meta-updates' tasks are drawn in one go (see `draw_ahead`)."""
        if self.draw_ahead is not None:
            return self.draw_ahead
        most = min(
            self.steps_per_call, DRAW_AHEAD_BYTES // max(spec.num_bytes, 1), DRAW_AHEAD_UPDATES
        )
        return int(max(1, most))

    def _run_meta_updates(self, num_updates: tf.Tensor):
        """Up to `num_updates` (at most `steps_per_call`) meta-updates; stops at the
        first non-finite meta-loss.

        The tasks of `_tasks_ahead` meta-updates are drawn in one go (the same tasks
        as drawn one update at a time), then the updates run on them.

        Returns:
          (updates run; per summary segment [S], the updates between two multiples of
          `summary_every`, in order: sums of meta-losses and of pre-update inner
          losses, update counts (0 for a segment not reached) and the learning rate
          after its last update; the index of the first non-finite meta-loss or -1).
        """
        spec = tf.nest.map_structure(  # a batch traced for its shapes only (then pruned)
            tf.TensorSpec.from_tensor, self.draw_tasks(tf.constant(0, tf.int64))
        )
        ahead = self._tasks_ahead(spec)
        num_updates = tf.minimum(num_updates, self.steps_per_call)
        every = tf.constant(self.summary_every, tf.int64)
        first_segment = self.step.read_value() // every

        def draw_block(first_step):
            steps = first_step + tf.range(ahead, dtype=tf.int64)
            return tf.map_fn(
                lambda step: tuple(self.draw_tasks(step)), steps, fn_output_signature=tuple(spec)
            )

        def keep_going(i, sums, first_bad):
            return tf.logical_and(i < num_updates, first_bad < 0)

        def run_block(i, sums, first_bad):
            block = draw_block(self.step.read_value())
            block_end = tf.minimum(num_updates, i + ahead)
            start = i

            def block_going(i, sums, first_bad):
                return tf.logical_and(i < block_end, first_bad < 0)

            def body(i, sums, first_bad):
                segment = self.step.read_value() // every - first_segment
                batch = TaskBatch(*(t[i - start] for t in block))
                loss, inner = self._meta_update(batch)
                sums = tf.tensor_scatter_nd_add(sums, [[segment]], [tf.stack([loss, inner, 1.0])])
                first_bad = tf.where(tf.math.is_finite(loss), first_bad, i)
                return i + 1, sums, first_bad

            return tf.while_loop(block_going, body, (i, sums, first_bad))

        # A tiny carry: a buffer of every update's losses made XLA's loop copy it.
        sums = tf.zeros([self.steps_per_call // self.summary_every + 2, 3])
        ran, sums, first_bad = tf.while_loop(
            keep_going, run_block, (tf.constant(0), sums, tf.constant(-1))
        )
        # The learning rate after each segment's last update (iterations = updates).
        counts = tf.cast(sums[:, 2], tf.int64)
        ends = self.optimizer.iterations - tf.cast(ran, tf.int64) + tf.cumsum(counts)
        rates = tf.cast(self.lr_schedule(ends), tf.float32)
        return ran, sums[:, 0], sums[:, 1], sums[:, 2], rates, first_bad

    # -- the Python loop ---------------------------------------------------------

    def restore(self) -> int:
        """Restores the chief's latest checkpoint, if any; returns the step it is at."""
        latest = tf.train.latest_checkpoint(self.run_dir.checkpoints)
        if latest:
            self.manager.checkpoint.restore(latest).assert_consumed()
        return int(self.step.numpy())

    def train(self) -> None:
        """Meta-trains up to `num_steps` (resuming if a checkpoint exists)."""
        step = self.restore()
        if step and self.chief:
            print(
                f"resuming from {self.model_dir}/checkpoints at meta-update {step} "
                f"of {self.num_steps}",
                file=sys.stderr,
                flush=True,
            )
        writer = self._summary_writer()
        with writer.as_default(), contextlib.ExitStack() as stack:
            self._training = stack  # the figure worker starts at the first figure
            if self.chief:
                summaries.operative_config(self.model_dir, step)
            bar = tqdm(
                total=self.num_steps,
                initial=step,
                unit="step",
                disable=not self.show_progress,
                dynamic_ncols=True,
            )
            try:
                while step < self.num_steps and not bool(self.stopped_early.numpy()):
                    chunk = min(self.steps_per_call, self.eval_every - step % self.eval_every)
                    chunk = min(chunk, self.num_steps - step)
                    start_time = time.perf_counter()
                    try:
                        ran, *segments, first_bad = self._train_chunk(tf.constant(chunk))
                        ran, first_bad = int(ran), int(first_bad)  # waits for the chunk
                    except _PEER_FAILURES as error:
                        raise WorkerLostError(self._worker_lost_message(step, error)) from None
                    seconds = time.perf_counter() - start_time
                    if first_bad >= 0:
                        raise NonFiniteLossError(self._non_finite_message(step + first_bad + 1))
                    self._log_points(np.int64(step), *segments, np.float32(ran / seconds))
                    step += ran
                    bar.update(ran)
                    postfix = {"meta_loss": f"{segments[0].numpy().sum() / ran:.4f}"}
                    if step % self.eval_every == 0 or step == self.num_steps:
                        value = self._validate_and_checkpoint(step)
                        postfix[f"val_{self.validate.metric}"] = f"{value:.4f}"
                        self._write_figures(wait=False)
                        writer.flush()  # the summaries up to the checkpoint just written
                    bar.set_postfix(postfix, refresh=False)
                self._write_figures(wait=True)
            finally:
                bar.close()
                self._figure_worker = self._training = None
        writer.flush()
        self._drop_scratch()

    def _summary_writer(self):
        """The run's writer, one per trainer: the summary graph calls (`_log_points`,
        `_log_validation`) hold the writer they were traced with."""
        if self._writer is None:
            if self.chief:
                # Flushed at each validation (in train()), not every 10 summaries: a
                # flush is a file write on the training thread.
                self._writer = tf.summary.create_file_writer(self.model_dir, max_queue=10_000)
            else:
                self._writer = tf.summary.create_noop_writer()
        return self._writer

    def _drop_scratch(self) -> None:
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)

    def _worker_lost_message(self, step: int, error: Exception) -> str:
        latest = tf.train.latest_checkpoint(self.run_dir.checkpoints)
        where = f"the last checkpoint is {latest}" if latest else "no checkpoint was written yet"
        return (
            f"lost contact with another worker after meta-update {step} (the collective "
            f"all-reduce failed with {type(error).__name__}); the job stopped and {where}. "
            "Restart every worker with the same command to resume from it."
        )

    def _validate_and_checkpoint(self, step: int) -> float:
        result = self.validate(self.learner)
        self._log_validation(
            np.int64(step),
            np.float32(result.mean),
            np.float32(result.inner_loss_pre.mean()),
            np.float32(result.inner_loss_post.mean()),
        )
        if self._sign * result.mean < self._sign * float(self.best_val.numpy()):
            self.best_val.assign(result.mean)
            self.best_step.assign(step)
            self.evals_since_best.assign(0)
            self.best_manager.save(checkpoint_number=step)
        else:
            self.evals_since_best.assign_add(1)
            if self.patience is not None and int(self.evals_since_best.numpy()) >= self.patience:
                self.stopped_early.assign(True)
        if self.chief and self.figure_every and step % self.figure_every == 0:
            self._log_figures(step)
        self.manager.save(checkpoint_number=step)
        return result.mean

    def _log_figures(self, step: int) -> None:
        """The task family's figures at `step`: computed here, drawn by the figure
        worker process (started at the first figure) while training goes on, written
        when drawn (`_write_figures`). Drawing on the training thread would hold the
        GIL for ~0.2 s a figure."""
        figures = self.tasks.figures(self.learner) or {}
        if figures and self._figure_worker is None:
            self._figure_worker = self._training.enter_context(FigureWorker())
        for name, draw in figures.items():
            self._figure_worker.submit((name, step), draw)

    def _write_figures(self, *, wait: bool) -> None:
        """Writes the figures the worker has drawn (all of them, waiting, if `wait`)."""
        worker = self._figure_worker
        if worker is not None:
            for (name, step), png in worker.wait() if wait else worker.done():
                tf.summary.image(name, summaries.png_to_image(png), step=step)

    def _non_finite_message(self, bad_step: int) -> str:
        latest = tf.train.latest_checkpoint(self.run_dir.checkpoints)
        kept = f"the last good checkpoint {latest} is kept" if latest else "no checkpoint yet"
        return (
            f"meta-loss is not finite (NaN or inf) at meta-update {bad_step}; training "
            f"stopped and {kept}. Expected a finite loss: lower Trainer.learning_rate or "
            f"the learner's inner_lr, or keep Trainer.clip_value set."
        )

    def restore_best(self) -> int:
        """Loads the best weights (falling back to the latest); returns their step."""
        path = tf.train.latest_checkpoint(
            os.path.join(self.model_dir, "best")
        ) or tf.train.latest_checkpoint(self.run_dir.checkpoints)
        if path is None:
            raise FileNotFoundError(
                f"no checkpoint in {self.model_dir}: expected {self.model_dir}/best or "
                f"{self.model_dir}/checkpoints, as written by viable-train"
            )
        tf.train.Checkpoint(learner=self.learner).read(path).expect_partial()
        return int(path.rsplit("-", 1)[-1])
