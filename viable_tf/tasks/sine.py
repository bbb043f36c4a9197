"""Sine-wave regression tasks (docs/method.md §4), sampled inside the TensorFlow graph.

Task: y = A * sin(x - p), A ~ U[0.1, 5.0], p ~ U[0, pi], x ~ U[-5, 5].

Sampling is stateless: a batch is a pure function of a seed of shape [2], so the
trainer derives the seed from (run seed, step) and a resumed run sees exactly the
tasks an uninterrupted one would, with no Python round trip per meta-update.

With `outliers` = m, m of each task's real support points get y drawn uniformly over the
output range [-A_max, A_max] instead of the curve; with `noise_std` = s, every support y
gets N(0, s^2) added (docs/method.md §8; tasks/corruption.py). The query points stay clean.

Shape legend: B tasks, K support points (padded), Q query points, D = Y = 1.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import gin
import numpy as np
import tensorflow as tf

from viable_tf import ops
from viable_tf.tasks import corruption
from viable_tf.tasks.base import TaskBatch, TaskFamily


class SineParams(NamedTuple):
    """The hidden parameters of B sine tasks, for plots and checks."""

    amplitude: tf.Tensor  # [B]
    phase: tf.Tensor  # [B]


def sine_curve(params: SineParams, x: tf.Tensor) -> tf.Tensor:
    """y = A * sin(x - p) for x of shape [B, N, 1]; returns [B, N, 1]."""
    amplitude = params.amplitude[:, None, None]  # [B, 1, 1]
    phase = params.phase[:, None, None]  # [B, 1, 1]
    return amplitude * tf.sin(x - phase)


@gin.configurable
class SineTasks(TaskFamily):
    """Sampler of sine regression tasks with a per-task support size.

    Support sets are padded to `num_support` points with a boolean mask; each
    task's real support size is drawn uniformly from {min_support, ...,
    num_support}, so one batch can mix K = 0 ... 20. K = 0 means "no adaptation".
    """

    input_dim = 1
    output_dim = 1
    task_loss = "mse"

    def __init__(
        self,
        *,
        num_support: int = 10,
        min_support: int | None = None,
        num_query: int = 10,
        amplitude_range: tuple[float, float] = (0.1, 5.0),
        phase_range: tuple[float, float] = (0.0, math.pi),
        input_range: tuple[float, float] = (-5.0, 5.0),
        outliers: int = 0,
        noise_std: float = 0.0,
    ) -> None:
        min_support = num_support if min_support is None else min_support
        if num_support < 0:
            raise ValueError(f"num_support must be >= 0, got {num_support}")
        if not 0 <= min_support <= num_support:
            raise ValueError(
                f"min_support={min_support} is outside [0, num_support={num_support}]: K is "
                f"drawn from [min_support, num_support] and num_support is the padded size"
            )
        if num_query < 1:
            raise ValueError(f"num_query must be >= 1, got {num_query}")
        for name, (low, high) in (
            ("amplitude_range", amplitude_range),
            ("phase_range", phase_range),
            ("input_range", input_range),
        ):
            if not low < high:
                raise ValueError(f"{name} must be (low, high) with low < high, got {(low, high)}")
        corruption.check_outliers(outliers, noise_std, num_support)
        self.outliers = outliers  # m
        self.noise_std = float(noise_std)  # s
        self.num_support = num_support
        self.min_support = min_support
        self.num_query = num_query
        self.amplitude_range = tuple(float(v) for v in amplitude_range)
        self.phase_range = tuple(float(v) for v in phase_range)
        self.input_range = tuple(float(v) for v in input_range)

    def hparams(self) -> dict[str, int | float]:
        """K (the padded size when K varies), the smallest K, and the corruption of the
        support sets, for results and HParams."""
        return {
            "num_support": self.num_support,
            "min_support": self.min_support,
            "outliers": self.outliers,
            "noise_std": self.noise_std,
        }

    @property
    def output_range(self) -> tuple[float, float]:
        """Where y lies: [-A_max, A_max]; an outlier's y is drawn uniformly from it."""
        return (-self.amplitude_range[1], self.amplitude_range[1])

    def sample(self, seed: tf.Tensor, batch_size: int) -> TaskBatch:
        """B training tasks as a pure function of `seed` [2] (see `sample_tasks`)."""
        return self.sample_tasks(seed, batch_size)[0]

    def warmup_inputs(
        self, rng: np.random.Generator, *, num_support: int, num_query: int
    ) -> dict[str, np.ndarray]:
        return self.request(rng, num_support=num_support, num_query=num_query)[0]

    def request(
        self,
        rng: np.random.Generator,
        *,
        num_support: int,
        num_query: int,
        grid: bool = False,
        outliers: int = 0,
    ) -> tuple[dict[str, np.ndarray], tuple[float, float]]:
        """One task as a serving request, drawn from `rng`: ({support_x [1, K, 1],
        support_y, query_x [1, Q, 1]}, (amplitude, phase)). The query inputs are drawn too,
        or (`grid`) evenly spaced over the input range. With `outliers` = m, m support
        points at random get y uniform over the output range (the client sending a
        corrupted support set). What the warm-up requests, the client and the serving
        benchmarks send."""
        if not 0 <= outliers <= num_support:
            raise ValueError(f"outliers must be in [0, num_support={num_support}], got {outliers}")
        amplitude, phase = rng.uniform(*self.amplitude_range), rng.uniform(*self.phase_range)
        support_x = rng.uniform(*self.input_range, (1, num_support, 1)).astype(np.float32)
        if grid:
            query_x = np.linspace(*self.input_range, num_query, dtype=np.float32)
        else:
            query_x = rng.uniform(*self.input_range, (1, num_query, 1)).astype(np.float32)
        support_y = amplitude * np.sin(support_x - phase)  # [1, K, 1]
        if outliers:
            bad = rng.choice(num_support, size=outliers, replace=False)
            support_y[0, bad, 0] = rng.uniform(*self.output_range, outliers)
        inputs = {
            "support_x": support_x,
            "support_y": support_y.astype(np.float32),
            "query_x": query_x.reshape(1, num_query, 1),
        }
        return inputs, (float(amplitude), float(phase))

    def sample_tasks(
        self,
        seed: tf.Tensor,
        batch_size: int,
        *,
        num_support: int | None = None,
        query_x: tf.Tensor | None = None,
    ) -> tuple[TaskBatch, SineParams]:
        """Draws `batch_size` tasks as a pure function of `seed`, with their parameters.

        Args:
          seed: int [2], a stateless-RNG seed (see `seed_for`).
          batch_size: B.
          num_support: if given, every task gets exactly this many support points
            (evaluation at a chosen K); otherwise K is drawn per task as configured.
          query_x: if given, float32 [Q], the same query inputs for every task
            (evaluation on an evenly spaced grid); otherwise Q = num_query random.

        Returns:
          The TaskBatch and the tasks' hidden parameters.
        """
        if num_support is not None and num_support < 0:
            raise ValueError(f"num_support must be >= 0, got {num_support}")
        seeds = ops.split_seed(seed, 5)
        amplitude = ops.uniform([batch_size], seeds[0], *self.amplitude_range)  # [B]
        phase = ops.uniform([batch_size], seeds[1], *self.phase_range)  # [B]
        params = SineParams(amplitude, phase)

        padded_k = self.num_support if num_support is None else num_support
        support_x = ops.uniform([batch_size, padded_k, 1], seeds[2], *self.input_range)  # [B, K, 1]
        if num_support is None and self.min_support < self.num_support:
            task_k = ops.uniform(
                [batch_size],
                seeds[3],
                minval=self.min_support,
                maxval=self.num_support + 1,
                dtype=tf.int32,
            )  # [B]
            support_mask = tf.range(padded_k)[None, :] < task_k[:, None]  # [B, K]
        else:
            support_mask = tf.ones([batch_size, padded_k], tf.bool)  # [B, K]

        if query_x is None:
            query_x = ops.uniform(
                [batch_size, self.num_query, 1], seeds[4], *self.input_range
            )  # [B, Q, 1]
        else:
            query_x = tf.tile(tf.reshape(query_x, [1, -1, 1]), [batch_size, 1, 1])  # [B, Q, 1]

        support_y = sine_curve(params, support_x)  # [B, K, 1]
        if self.outliers or self.noise_std:
            # Its own seed, after the five above (a clean family's draws are unchanged).
            support_y, _ = corruption.corrupt_targets(
                ops.split_seed(seed, 6)[5],
                support_y,
                support_mask,
                outliers=self.outliers,
                noise_std=self.noise_std,
                output_range=self.output_range,
            )
        batch = TaskBatch(
            support_x=support_x,
            support_y=support_y,
            support_mask=support_mask,
            query_x=query_x,
            query_y=sine_curve(params, query_x),
        )
        return batch, params

    def evaluation_grid(self, num_points: int = 100) -> tf.Tensor:
        """float32 [Q]: `num_points` evenly spaced inputs over the input range."""
        return tf.linspace(self.input_range[0], self.input_range[1], num_points)
