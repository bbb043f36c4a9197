"""Corrupted support sets (docs/method.md §8): what a practitioner's support set holds, drawn in the
graph from the task's seed like everything else, so a seed gives the same corruption with
or without XLA and a resumed run sees the same tasks.

- Sine outliers: m of a task's K real support points keep their x and get y drawn
  uniformly over the output range instead of the curve.
- Gaussian noise: y + N(0, s^2) on every real support point.
- Label noise (after TraNFS, Liang et al. 2022), in an N-way K-shot episode: m shots of
  each class replaced by drawings of another class of the same episode ("swap"), or of a
  class outside the episode ("outlier"); the shot keeps its class's label.

The query set is always clean, and a corrupted point keeps its mask bit: nothing tells the
learner which points are corrupted.

Shape legend: B tasks, K support points (padded), N way, Y output dim.
"""

from __future__ import annotations

import math

import tensorflow as tf

from viable_tf import ops

#: Label noise of an episode: none, or what replaces m shots of each class.
LABEL_NOISE = ("none", "swap", "outlier")


def check_outliers(outliers: int, noise_std: float, num_support: int) -> None:
    """Refuses, with one line, what a sine family cannot draw."""
    if outliers < 0:
        raise ValueError(f"outliers must be >= 0, got {outliers}")
    if outliers > num_support:
        raise ValueError(
            f"outliers={outliers} is more than the num_support={num_support} support points "
            "a task has"
        )
    if not noise_std >= 0:
        raise ValueError(f"noise_std must be >= 0, got {noise_std}")


def standard_normal(shape, seed: tf.Tensor) -> tf.Tensor:
    """N(0, 1) draws by Box-Muller from `ops.uniform`'s, so the same bits with or without
    XLA (TensorFlow's stateless_normal and XLA's differ)."""
    first, second = tf.unstack(ops.split_seed(seed, 2))
    radius = tf.sqrt(-2.0 * tf.math.log(1.0 - ops.uniform(shape, first)))  # 1 - u in (0, 1]
    return radius * tf.cos(2.0 * math.pi * ops.uniform(shape, second))


def chosen_points(seed: tf.Tensor, mask: tf.Tensor, count: int) -> tf.Tensor:
    """bool [B, K]: `count` of each task's real points (mask [B, K]) at random, all of
    them where a task has fewer."""
    scores = ops.uniform(tf.shape(mask), seed)  # [B, K]
    scores = tf.where(mask, scores, 2.0)  # padding ranks last
    ranks = tf.argsort(tf.argsort(scores, axis=1, stable=True), axis=1, stable=True)
    return tf.logical_and(mask, ranks < count)


def corrupt_targets(
    seed: tf.Tensor,
    support_y: tf.Tensor,
    mask: tf.Tensor,
    *,
    outliers: int,
    noise_std: float,
    output_range: tuple[float, float],
) -> tuple[tf.Tensor, tf.Tensor]:
    """support_y float [B, K, Y] -> (the corrupted targets [B, K, Y], which points are
    outliers bool [B, K]). Noise first, then the outliers replace their points' y."""
    outlier_seed, value_seed, noise_seed = tf.unstack(ops.split_seed(seed, 3))
    y = support_y
    if noise_std > 0:
        noise = standard_normal(tf.shape(y), noise_seed)
        y = y + noise_std * noise * tf.cast(mask, y.dtype)[..., None]
    corrupted = chosen_points(outlier_seed, mask, outliers)  # [B, K]
    values = ops.uniform(tf.shape(y), value_seed, *output_range)  # [B, K, Y]
    return tf.where(corrupted[..., None], values, y), corrupted


def check_label_noise(
    label_noise: str,
    noisy_shots: int,
    *,
    num_shots: int,
    num_ways: int,
    spare_drawings: int,
    fewest_drawings: int,
    num_classes: int,
) -> None:
    """Refuses, with one line, label noise an episode sampler cannot draw: a kind that
    does not exist, more noisy shots than shots, a swap without the spare drawings to
    swap in, outliers without classes outside the episode or without enough drawings of
    them (`fewest_drawings`: the smallest class's) to take each at most once."""
    if label_noise not in LABEL_NOISE:
        raise ValueError(f"label_noise must be one of {LABEL_NOISE}, got {label_noise!r}")
    if noisy_shots < 0:
        raise ValueError(f"noisy_shots must be >= 0, got {noisy_shots}")
    if label_noise == "none":
        if noisy_shots:
            raise ValueError(f"noisy_shots={noisy_shots} needs a label_noise ('swap', 'outlier')")
        return
    if noisy_shots > num_shots:
        raise ValueError(f"noisy_shots={noisy_shots} is more than the {num_shots} shots of a class")
    if label_noise == "swap" and num_ways < 2:
        raise ValueError("label_noise='swap' needs at least 2 classes in an episode")
    if label_noise == "swap" and noisy_shots > spare_drawings:
        raise ValueError(
            f"label_noise='swap' with noisy_shots={noisy_shots} takes {noisy_shots} spare "
            f"drawings of every class; the smallest class has {spare_drawings} beyond its "
            "shots and queries"
        )
    if label_noise == "outlier" and num_classes <= num_ways:
        raise ValueError(
            f"label_noise='outlier' needs classes outside the episode: the split has "
            f"{num_classes}, an episode takes {num_ways}"
        )
    if label_noise == "outlier":
        repeats = -(-num_ways * noisy_shots // (num_classes - num_ways))  # ceil
        if repeats > fewest_drawings:
            raise ValueError(
                f"label_noise='outlier' with noisy_shots={noisy_shots} takes up to {repeats} "
                f"drawings of each of the {num_classes - num_ways} classes outside an episode"
            )


def swap_positions(seed: tf.Tensor, batch_size, *, num_ways: int, noisy_shots: int):
    """For label_noise='swap': int [B, N, m], the position in the episode (0..N-1) of the
    class whose drawing shot j of class i holds: (i + s_j) mod N, s_j uniform in 1..N-1 per
    episode and j, so every class gives exactly one drawing per j and none to itself."""
    n, m = num_ways, noisy_shots
    shift = ops.uniform([batch_size, 1, m], seed, minval=1, maxval=n, dtype=tf.int32)
    return (tf.range(n)[None, :, None] + shift) % n  # [B, N, m]


def outside_positions(seed: tf.Tensor, batch_size, num_classes, *, num_ways: int, noisy_shots: int):
    """For label_noise='outlier': (int [B, N*m] positions N..C-1 in the episode's order of
    the split's classes, int [N*m] how many noisy shots took that class before). The N*m
    noisy shots take the C - N outside classes in a random order, each once before any
    twice, so no drawing is used twice when each takes its class's next drawing."""
    total = num_ways * noisy_shots
    outside = num_classes - num_ways
    order = tf.argsort(ops.uniform([batch_size, outside], seed), axis=1, stable=True)
    shot = tf.range(total)
    return num_ways + tf.gather(order, shot % outside, axis=1), shot // outside
