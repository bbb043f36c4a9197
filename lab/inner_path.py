"""A gradient learner's inner loop step by step, as `GradientLearner.adapt` runs it, for
the lab's probes that read what each step does to the context phi (collapse_probe,
inner_loop_jumps, loss_network_anatomy, adaptation_gain, inner_step_probe).

At each state: the learner's inner loss at that step (its per-step networks and the
task's query inputs where it reads them, as MeTAL's does) and the support set's task
loss, with their gradients in phi. `walk` steps phi on either loss at any rate: on the
inner loss at the learner's rate it is the learner's own loop, and on the task loss it is
CAVIA's step on the same weights. Not a command: the probes import it.

Needs a learner that adapts the context phi alone at one rate (CAVIA, VIABLE and MeTAL
on CAVIA): MAML's adapted weights, a head stepped beside phi and Meta-SGD's learned rates
are refused, since stepping phi alone at one rate would not be their loop.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # TensorFlow is imported when a probe runs, not when it answers --help
    import tensorflow as tf

    from viable_tf.learners.base import AdaptedState


@dataclasses.dataclass(frozen=True)
class Step:
    """One state of the inner loop (before its step), per task."""

    index: int  # the inner step k = 0, 1, ...
    state: AdaptedState
    inner: tf.Tensor  # the learner's inner loss at step k [B]
    task: tf.Tensor  # the support set's task loss [B]
    inner_grad: tf.Tensor  # d inner / d phi [B, P]
    task_grad: tf.Tensor  # d task / d phi [B, P]

    @property
    def cosine(self) -> tf.Tensor:
        """cos(d inner / d phi, d task / d phi) [B]."""
        import tensorflow as tf

        norms = tf.norm(self.inner_grad, axis=1) * tf.norm(self.task_grad, axis=1)
        return tf.reduce_sum(self.inner_grad * self.task_grad, 1) / (norms + 1e-12)


def support_of(batch) -> tuple:
    """(x, y, mask) of the batch's support set, a padded point's label made 0 as
    `adapt` makes it."""
    from viable_tf.ops import real_labels

    return batch.support_x, real_labels(batch.support_y, batch.support_mask), batch.support_mask


def check(learner) -> None:
    """Refuses, in one line naming the learner, one whose loop is not phi's alone at one
    rate."""
    name = learner.method_name
    if getattr(learner, "learned_inner_lr", False):
        raise ValueError(f"{name} steps at Meta-SGD's learned rates; the lab's walk steps at one")
    if tuple(learner.capabilities.adapted_parts) != ("context",):
        raise ValueError(
            f"{name} adapts {', '.join(learner.capabilities.adapted_parts)}; "
            "the lab's walk steps the context phi alone"
        )


def at(learner, batch, state: AdaptedState, index: int = 0) -> Step:
    """The inner loss at step `index` and the task loss at `state`, and their gradients."""
    import tensorflow as tf

    support = support_of(batch)
    query_x = batch.query_x if learner.capabilities.reads_queries else None
    phi = state.context
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(phi)
        here = state.replace(context=phi)
        inner = learner.inner_loss(here, *support, step=index, query_x=query_x)  # [B]
        task = learner.support_loss(here, *support)  # [B]
        inner_total, task_total = tf.reduce_sum(inner), tf.reduce_sum(task)
    inner_grad, task_grad = tape.gradient(inner_total, phi), tape.gradient(task_total, phi)
    return Step(index, state, inner, task, inner_grad, task_grad)


def walk(
    learner, batch, *, steps: int | None = None, stepped: str = "inner", rate: float | None = None
) -> tuple[list[Step], AdaptedState]:
    """`steps` (the learner's number by default) steps from the learner's start state,
    each phi <- phi - rate * the gradient of the `stepped` loss ("inner" or "task"),
    `rate` the learner's inner rate by default. Returns each step's Step (the state
    before it) and the state after the last."""
    check(learner)
    if stepped not in ("inner", "task"):
        raise ValueError(f"stepped is 'inner' or 'task', not {stepped!r}")
    steps = learner.num_inner_steps if steps is None else steps
    if steps > learner.num_inner_steps and getattr(learner, "per_step", False):
        raise ValueError(
            f"{learner.method_name} has a loss network for each of its "
            f"{learner.num_inner_steps} inner steps, none for a walk of {steps}"
        )
    rate = learner.inner_lr if rate is None else rate
    state = learner.start_state(*support_of(batch))
    path = []
    for index in range(steps):
        step = at(learner, batch, state, index)
        path.append(step)
        grad = step.inner_grad if stepped == "inner" else step.task_grad
        state = state.replace(context=state.context - rate * grad)
    return path, state
