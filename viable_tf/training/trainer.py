"""Meta-training (docs/method.md §1, outer loop): the optimizer chain on theta (and psi)
and early stopping.

One call of the compiled step function runs many meta-updates in a
`tf.while_loop`, so there is no Python round trip per meta-update. The tasks of
meta-update t are drawn from the stateless seed (seed, t): a run killed at any
point and restarted resumes from its last checkpoint and ends in exactly the
state of an uninterrupted run, where TensorFlow's kernels repeat themselves bit for bit
(the tested runs do; the conv runs at 20 ways and 5-way 5-shot do not, so a resumed one
goes on as a rerun would: docs/lab/omniglot/end_to_end.md, "Runs do not retrace their
path"). The tasks of
several meta-updates are drawn together, ahead of the loop that uses them
(`draw_ahead`): drawn inside the loop's body, XLA's CPU code ran sine's meta-update
1.5-1.7x slower (docs/PERFORMANCE.md).

Around the compiled chunks, the Python loop (loop.py) does as little as it can on the
training thread: a call of the compiled function runs up to the next step a periodic
job is due at (a validation: 500 updates) and returns the losses summed per 100
updates, so that summaries keep their points; the periodic jobs are triggers
(triggers.py) run between chunks; checkpoints are written by TensorFlow's
CheckpointManager (checkpoints.py).

This module wires the pieces, one concern each: the meta-gradient (meta_gradient.py:
shares, passes, the all-reduce, clipping), the compiled chunk (chunk.py: the task stream
of task_stream.py, the loss summaries per segment of segments.py), the loop and its
triggers (loop.py, triggers.py), early stopping, checkpoints (D/checkpoints/, D/best/;
checkpoints.py), summaries and figures (summaries.py), errors (errors.py) and the
settings' checks (settings.py). Under a tf.distribute strategy (distribute.py) the update
equals the single-device one; only the chief writes checkpoints, summaries and results.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import gin
import keras
import tensorflow as tf

from viable_tf import precision
from viable_tf.evaluation.protocols import figures, validation_protocol
from viable_tf.learners.base import Learner
from viable_tf.ops import seed_for
from viable_tf.run_dir import RunDir
from viable_tf.tasks.base import TaskBatch
from viable_tf.training import chunk, loop, summaries
from viable_tf.training.checkpoints import TrainingCheckpoints
from viable_tf.training.distribute import is_chief
from viable_tf.training.early_stopping import EarlyStopping
from viable_tf.training.errors import NonFiniteLossError, WorkerLostError
from viable_tf.training.meta_gradient import (
    MetaUpdate,
    apply_transforms,
    gradients_in_passes,
    replica_gradients,
    sum_over_replicas,
)
from viable_tf.training.optimizer import OptimizerChain
from viable_tf.training.settings import (
    EvaluationSpec,
    PerformanceSpec,
    check_replicas,
    check_task_loss,
    faster_with_xla,
)
from viable_tf.training.triggers import Figures, Flush, FunctionTrigger, Trigger, Validation

__all__ = ["NonFiniteLossError", "Trainer", "WorkerLostError", "gradients_in_passes"]


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
      optimizer: the meta-gradient's transforms, then the optimizer at its schedule
        (optimizer.py; None: `OptimizerChain()` as gin configures it, the paper's Adam).
      evaluation: when to validate, checkpoint, stop and report (settings.py; None:
        `EvaluationSpec()` as gin configures it).
      performance: how to run (settings.py; None: `PerformanceSpec()` as gin configures
        it); none of it changes the update beyond rounding.
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
        optimizer: OptimizerChain | None = None,
        evaluation: EvaluationSpec | None = None,
        performance: PerformanceSpec | None = None,
        show_progress: bool = True,
        strategy: tf.distribute.Strategy | None = None,
    ) -> None:
        for name, value in (("num_steps", num_steps), ("meta_batch_size", meta_batch_size)):
            if value < 1:
                raise ValueError(f"Trainer.{name} must be >= 1, got {value}")
        self.chain = optimizer or OptimizerChain()
        evaluation = evaluation or EvaluationSpec()
        performance = performance or PerformanceSpec()
        self.strategy = strategy or tf.distribute.get_strategy()
        self.chief = is_chief(self.strategy)
        replicas = self.strategy.num_replicas_in_sync
        check_replicas(replicas, meta_batch_size, performance.tasks_per_pass)
        distributed = self.strategy is not tf.distribute.get_strategy() or replicas > 1
        self.model_dir = model_dir
        self.tasks = tasks
        self.num_steps = num_steps
        self.meta_batch_size = meta_batch_size  # B
        self.seed = seed
        #: Whether an update may take a fallback (then counted).
        self.falls_back = self.chain.falls_back
        self.eval_every = evaluation.eval_every
        self.summary_every = evaluation.summary_every
        self.figure_every = evaluation.figure_every
        self.steps_per_call = performance.steps_per_call
        self.draw_ahead = performance.draw_ahead
        self.tasks_per_pass = performance.tasks_per_pass
        self.show_progress = show_progress and self.chief

        self.validate = validation_protocol(tasks)
        #: What the prediction network computes in (precision.py): as asked, or float32
        #: where the CPU has no native bfloat16 (said in one line).
        self.precision = precision.resolve(performance.precision, force=performance.force_precision)
        keras.utils.set_random_seed(seed)
        with self.strategy.scope(), precision.building(self.precision):  # variables mirrored
            self.learner: Learner = learner(input_dim=tasks.input_dim, output_dim=tasks.output_dim)
            check_task_loss(self.learner, tasks)
            self.transforms = self.chain.bind(self.learner)  # refuses a chain it cannot apply
            self.variables = list(self.learner.trainable_variables)  # theta (and psi)
            self.lr_schedule, self.optimizer = self.chain.build(self.variables)
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
            # Updates that took the learner's fallback (counted where one may).
            self.fallback_updates = tf.Variable(0, dtype=tf.int64, trainable=False)
            self.early_stopping = EarlyStopping(
                higher_is_better=self.validate.higher_is_better, patience=evaluation.patience
            )
        checkpoint = tf.train.Checkpoint(
            learner=self.learner,
            optimizer=self.optimizer,
            step=self.step,
            **self.early_stopping.checkpoint_items(),
            **({"fallback_updates": self.fallback_updates} if self.falls_back else {}),
        )
        self.run_dir = RunDir(model_dir)
        self.checkpoints = TrainingCheckpoints(
            self.run_dir,
            checkpoint,
            tf.train.Checkpoint(learner=self.learner, step=self.step),
            chief=self.chief,
            keep=evaluation.keep_checkpoints,
        )
        self.summaries = summaries.TrainingSummaries(
            model_dir, chief=self.chief, metric=self.validate.metric
        )
        # XLA compiles one device's training only; 'auto' is measured at the first chunk.
        self.jit_compile = False if distributed else performance.jit_compile
        self._train_chunk = None

    @property
    def train_chunk(self):
        """The compiled chunk: `run_meta_updates` in one call (what benchmarks time)."""
        if self._train_chunk is None:
            if self.jit_compile == "auto":
                self.jit_compile = faster_with_xla(self.meta_gradients)
            self._train_chunk = tf.function(  # its loops are tf.while_loops: no AutoGraph
                self.run_meta_updates, jit_compile=self.jit_compile, autograph=False
            )
        return self._train_chunk

    # -- the compiled part -------------------------------------------------------

    def draw_tasks(self, step: tf.Tensor) -> TaskBatch:
        """The meta-batch of meta-update `step`: B tasks drawn from the seed (seed, step)."""
        return self.tasks.sample(seed_for(self.seed, step), self.meta_batch_size)

    def meta_gradients(
        self, batch: TaskBatch | None = None
    ) -> tuple[tf.Tensor, tf.Tensor, list[tf.Tensor]]:
        """(meta-loss, inner loss, meta-gradients) of `meta_update`."""
        return self.meta_update(batch)[:3]

    def meta_update(self, batch: TaskBatch | None = None) -> MetaUpdate:
        """The meta-update on `batch` (default: the tasks of meta-update `step`), summed
        over replicas (the same, up to rounding, whatever the replica count: every replica
        gets the whole batch and takes its share), through the optimizer chain's
        transforms."""
        if batch is None:
            batch = self.draw_tasks(self.step)
        share = functools.partial(  # this replica's share of the meta-batch
            replica_gradients,
            self.learner,
            self.variables,
            meta_batch_size=self.meta_batch_size,
            replicas=self.strategy.num_replicas_in_sync,
            tasks_per_pass=self.tasks_per_pass,
        )
        loss, inner, grads = sum_over_replicas(self.strategy, share, batch, self.variables)
        # Transformed after the sum, as on one device.
        update = MetaUpdate(loss, inner, grads, tf.constant(1.0))
        return apply_transforms(self.transforms, update, self.variables)

    def apply_meta_update(self, batch: TaskBatch) -> MetaUpdate:
        """One meta-update on `batch`, applied; returns it (its `counted` 1 if it counts
        in the loss summaries, else 0)."""
        update = self.meta_update(batch)
        if self.falls_back:
            self.fallback_updates.assign_add(tf.cast(1.0 - update.counted, tf.int64))
        self.optimizer.apply_gradients(zip(update.grads, self.variables, strict=True))
        self.step.assign_add(1)
        return update

    def run_meta_updates(self, num_updates: tf.Tensor):
        """Up to `num_updates` (at most `steps_per_call`) meta-updates, stopping at the
        first non-finite meta-loss: chunk.py's `run_meta_updates` on this trainer."""
        return chunk.run_meta_updates(self, num_updates)

    # -- the Python loop ---------------------------------------------------------

    def restore(self) -> int:
        """Restores the chief's latest checkpoint, if any; returns the step it is at."""
        self.checkpoints.restore()
        return int(self.step.numpy())

    def default_triggers(self, figure_writer: summaries.FigureWriter, writer) -> list[Trigger]:
        """The trainer's periodic jobs, in the order they run."""
        jobs: list[Trigger] = [
            Validation(
                self.eval_every,
                validate=self.validate,
                learner=self.learner,
                early_stopping=self.early_stopping,
                checkpoints=self.checkpoints,
                summaries=self.summaries,
                fallback_updates=self.fallback_updates if self.falls_back else None,
            )
        ]
        if self.chief and self.figure_every:
            # Computed at the step, drawn by the figure worker while training goes on.
            make = functools.partial(figures, self.tasks, self.learner)
            jobs.append(Figures(self.eval_every, self.figure_every, make, figure_writer))
        latest = self.checkpoints.latest
        jobs.append(FunctionTrigger(self.eval_every, lambda s: latest.save(checkpoint_number=s)))
        jobs.append(Flush(self.eval_every, figure_writer, writer))  # up to that checkpoint
        return jobs

    def train(self, triggers: Sequence[Trigger] = ()) -> None:
        """Meta-trains up to `num_steps` (resuming if a checkpoint exists): the Python
        loop of loop.py runs the compiled chunks, and between them the periodic jobs of
        `default_triggers`, then `triggers`."""
        loop.train(self, self.default_triggers, triggers)

    def restore_best(self) -> int:
        """Loads the best weights (falling back to the latest); returns their step."""
        return self.checkpoints.restore_best(self.learner)
