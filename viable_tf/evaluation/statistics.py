"""Summary statistics of per-task results."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy import special


class MeanWithCI(NamedTuple):
    mean: float
    ci95: float  # half-width of the 95% confidence interval
    num: int


def mean_confidence_interval(values: np.ndarray, confidence: float = 0.95) -> MeanWithCI:
    """Mean and half-width of its Student-t confidence interval over independent values."""
    values = np.asarray(values, dtype=np.float64).ravel()
    if values.size == 0:
        raise ValueError("mean_confidence_interval needs at least one value, got none")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    mean = float(values.mean())
    if values.size == 1:
        return MeanWithCI(mean, float("nan"), 1)
    sem = values.std(ddof=1) / np.sqrt(values.size)
    # Student's t quantile: what scipy.stats.t.ppf computes (stdtrit), without importing
    # scipy.stats, ~0.5 s of every start-up.
    half_width = special.stdtrit(values.size - 1, 0.5 + confidence / 2) * sem
    return MeanWithCI(mean, float(half_width), int(values.size))
