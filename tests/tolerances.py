"""Tolerances between two float paths, in float32 ulps of the compared quantity's scale.

Two computations that are mathematically equal but run on other kernels (XLA vs
TensorFlow's, oneDNN vs Eigen, one device vs a sum over replicas) differ by rounding:
a few float32 epsilons times the size of what is compared, more where many terms are
summed in another order. A fixed absolute tolerance is a claim about one machine's
kernels; `k x EPS32 x scale` is a claim about the arithmetic. Each use states its k
and why (docs/TESTING.md lists them). Exact equality is kept only for the same
computation on the same path in the same process (say so where it is asserted).

`VIABLE_TF_SHOW_ULPS=1` prints every comparison's measured ulps (to size a k).
"""

from __future__ import annotations

import os

import numpy as np

EPS32 = float(np.finfo(np.float32).eps)  # 2^-23 = 1.19e-7


def ulps(actual, expected, scale: float | None = None) -> float:
    """The largest difference between `actual` and `expected`, in float32 ulps of `scale`
    (default: the largest magnitude of `expected`)."""
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    if scale is None:
        scale = float(np.max(np.abs(expected))) if expected.size else 0.0
    scale = max(scale, np.finfo(np.float32).tiny)
    return float(np.max(np.abs(actual - expected), initial=0.0)) / (EPS32 * scale)


def assert_within_ulps(actual, expected, k: float, *, scale: float | None = None, what=""):
    """|actual - expected| <= k x EPS32 x scale, elementwise; the message gives the ulps."""
    measured = ulps(actual, expected, scale)
    if os.environ.get("VIABLE_TF_SHOW_ULPS"):
        print(f"ulps {what}: {measured:.2f} (allowed {k})")
    assert measured <= k, f"{what}: {measured:.1f} float32 ulps of the scale apart, allowed {k}"
