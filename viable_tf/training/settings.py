"""The Trainer's settings, checked before anything is built (one clear line each), and
the optimizer they configure."""

from __future__ import annotations

import sys
import time

import keras
import tensorflow as tf


def check_settings(
    *,
    num_steps: int,
    meta_batch_size: int,
    eval_every: int,
    steps_per_call: int,
    summary_every: int,
    lr_decay_steps: int,
    keep_checkpoints: int,
    draw_ahead: int | None,
    tasks_per_pass: int | None,
    jit_compile: bool | str = True,
) -> None:
    """Raises ValueError naming the first setting out of its range."""
    if jit_compile not in (True, False, "auto"):
        raise ValueError(f"Trainer.jit_compile must be True, False or 'auto', got {jit_compile!r}")
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


def faster_with_xla(meta_gradients, *, repeats: int = 2) -> bool:
    """`Trainer.jit_compile='auto'`: whether `meta_gradients` (a function of no
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
        f"Trainer.jit_compile='auto': a meta-gradient took {seconds[True]:.4f} s compiled by "
        f"XLA and {seconds[False]:.4f} s on TensorFlow's kernels; training runs {choice}",
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
            f"Trainer.tasks_per_pass needs meta_batch_size ({meta_batch_size}) to be a "
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


def adam_with_decay(variables, learning_rate: float, decay_steps: int, decay_rate: float):
    """(schedule, Adam) at learning_rate * decay_rate ** floor(t / decay_steps), built on
    `variables` (call inside the strategy's scope: its slots are then mirrored)."""
    schedule = keras.optimizers.schedules.ExponentialDecay(
        learning_rate, decay_steps, decay_rate, staircase=True
    )
    optimizer = keras.optimizers.Adam(schedule)
    optimizer.build(variables)
    return schedule, optimizer
