"""The Trainer's settings by concern (what evaluates, what runs fast), each checked when
it is made (one clear line each)."""

from __future__ import annotations

import dataclasses
import sys
import time

import gin
import tensorflow as tf

from viable_tf.precision import check as check_precision


def _at_least_one(owner: str, **values) -> None:
    for name, value in values.items():
        if value < 1:
            raise ValueError(f"{owner}.{name} must be >= 1, got {value}")


def _one_or_more_or_none(owner: str, **values) -> None:
    for name, value in values.items():
        if value is not None and value < 1:
            raise ValueError(f"{owner}.{name} must be >= 1 or None, got {value}")


@gin.configurable
@dataclasses.dataclass(frozen=True)
class EvaluationSpec:
    """When the trainer validates, checkpoints, stops and reports.

    Args:
      eval_every: meta-validate and checkpoint every this many meta-updates.
      patience: stop after this many validations without improvement (None: never).
      figure_every: log a figure of adapted fits at the validations that fall on a
        multiple of this (0: never).
      summary_every: a point of the training summaries every this many meta-updates.
      keep_checkpoints: how many latest checkpoints to keep.
    """

    eval_every: int = 500
    patience: int | None = None
    figure_every: int = 5_000
    summary_every: int = 100
    keep_checkpoints: int = 2

    def __post_init__(self) -> None:
        _at_least_one(
            "EvaluationSpec",
            eval_every=self.eval_every,
            summary_every=self.summary_every,
            keep_checkpoints=self.keep_checkpoints,
        )
        _one_or_more_or_none("EvaluationSpec", patience=self.patience)


@gin.configurable
@dataclasses.dataclass(frozen=True)
class PerformanceSpec:
    """How the trainer runs: none of these changes what it computes beyond rounding.

    Args:
      steps_per_call: meta-updates per call of the compiled step function (at most;
        a call also ends at each validation).
      draw_ahead: the tasks of this many meta-updates are drawn in one go (None: as
        many as task_stream.tasks_ahead allows). The same tasks whatever its value.
      tasks_per_pass: the meta-gradient is computed over at most this many tasks at a
        time and summed (None: a replica's whole share at once): peak memory falls
        with it, the update is the same up to rounding (meta_gradient.py;
        `meta_batch_size` must then be a multiple of the replica count).
      jit_compile: compile the meta-update with XLA (single device only); 'auto': with
        XLA where a meta-gradient measured at start-up runs faster so (logged). Every
        stateless draw states its algorithm (`ops.RNG_ALG`), so a seed gives the same
        training tasks with or without XLA, on one device or mirrored.
      precision: what the prediction network computes in, 'float32' or 'bfloat16'
        (viable_tf/precision.py; gin/precision/bfloat16.gin): float32 weights, state,
        losses, meta-gradient and optimizer either way. Where the CPU lacks native
        bfloat16 the run says so and computes in float32, unless `force_precision`.
    """

    steps_per_call: int = 500
    draw_ahead: int | None = None
    tasks_per_pass: int | None = None
    jit_compile: bool | str = True
    precision: str = "float32"
    force_precision: bool = False

    def __post_init__(self) -> None:
        check_precision(self.precision)
        if self.jit_compile not in (True, False, "auto"):
            raise ValueError(
                "PerformanceSpec.jit_compile must be True, False or 'auto', "
                f"got {self.jit_compile!r}"
            )
        _at_least_one("PerformanceSpec", steps_per_call=self.steps_per_call)
        _one_or_more_or_none(
            "PerformanceSpec", draw_ahead=self.draw_ahead, tasks_per_pass=self.tasks_per_pass
        )


def faster_with_xla(meta_gradients, *, repeats: int = 2) -> bool:
    """`PerformanceSpec.jit_compile='auto'`: whether `meta_gradients` (a function of no
    arguments, changing no state) runs faster compiled by XLA than on TensorFlow's own
    kernels (oneDNN) on this machine: each traced, then the best of `repeats` calls;
    the choice and both times are logged to stderr. Which path wins differs between
    machines and network sizes (docs/PERFORMANCE.md), and the two compute the same
    meta-gradient up to rounding."""
    seconds = {}
    for xla in (True, False):
        function = tf.function(meta_gradients, jit_compile=xla, autograph=False)
        function()  # traced (and compiled) before timing
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            tf.nest.map_structure(lambda t: t.numpy(), function())
            best = min(best, time.perf_counter() - start)
        seconds[xla] = best
    xla = seconds[True] < seconds[False]
    choice = "with XLA" if xla else "on TensorFlow's kernels"
    print(
        f"PerformanceSpec.jit_compile='auto': a meta-gradient took {seconds[True]:.4f} s "
        f"compiled by XLA and {seconds[False]:.4f} s on TensorFlow's kernels; "
        f"training runs {choice}",
        file=sys.stderr,
        flush=True,
    )
    return xla


def check_replicas(replicas: int, meta_batch_size: int, tasks_per_pass: int | None) -> None:
    """Every replica needs a task, and a static share where the gradient runs in passes."""
    if replicas > meta_batch_size:
        raise ValueError(
            f"meta_batch_size={meta_batch_size} is smaller than the {replicas} replicas; "
            "expected at least one task per replica"
        )
    if tasks_per_pass is not None and meta_batch_size % replicas:
        raise ValueError(
            f"PerformanceSpec.tasks_per_pass needs meta_batch_size ({meta_batch_size}) to be a "
            f"multiple of the {replicas} replicas, so that every share has a static size"
        )


def check_task_loss(learner, tasks) -> None:
    """The learner must score tasks with the family's own task loss."""
    if learner.task_loss_name != tasks.task_loss:
        raise ValueError(
            f"the learner's task loss {learner.task_loss_name!r} does not fit "
            f"{type(tasks).__name__}, whose tasks are scored with {tasks.task_loss!r}; "
            f"expected {type(learner).__name__}.task_loss = {tasks.task_loss!r}"
        )
