"""What one tanh costs on relVIABLE's pair activations, compiled by XLA and on TensorFlow's
kernels, beside two exp-based forms and a multiply (docs/lab/history/speed_2026-11.md,
"tanh under XLA").

    .venv/bin/python benchmarks/tanh_under_xla.py [--repeats 3] [--jax_python ../jaxenv/bin/python]

Each form is applied 1,000 times in one compiled loop (`tf.function` over a `while_loop`,
XLA or not) to a [25, 10, 10, 32] tensor, the shape of sine relVIABLE's pair activations;
the best of `repeats` loops, in microseconds per application. The error column is the
largest difference from float64's tanh in float32 ulps of each entry's own size, over a
grid of [-12, 12] and +-10^-8..10 (the exp form loses relative precision near 0). With
`--jax_python`, the same loop of `jnp.tanh` and of a multiply under `jax.jit`, in that
Python (the JAX peer's environment; the project never imports JAX).
"""

from __future__ import annotations

import argparse
import os
import subprocess

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
from timing import best_of, header

SHAPE = (25, 10, 10, 32)
APPLICATIONS = 1000

JAX_SIDE = f"""
import sys, jax, jax.numpy as jnp
sys.path.insert(0, {{here!r}})
from timing import best_of  # stdlib only at import
x = jax.random.normal(jax.random.PRNGKey(0), {SHAPE})
for name, fn in (("tanh", jnp.tanh), ("multiply", lambda v: v * 0.9)):
    f = jax.jit(lambda x: jax.lax.fori_loop(0, {APPLICATIONS}, lambda i, a: fn(a * 0.5 + 0.1), x))
    seconds = best_of(lambda: f(x).block_until_ready(), {{repeats}})
    print(name, seconds / {APPLICATIONS} * 1e6)
"""


def forms() -> dict:
    import tensorflow as tf

    def from_expm1(v):
        t = tf.math.expm1(-2.0 * tf.abs(v))  # in (-1, 0]: no overflow, exact at 0
        return tf.math.sign(v) * (-t / (2.0 + t))

    return {
        "tanh": tf.math.tanh,
        "sign(x) (-t / (2 + t)), t = expm1(-2 abs(x))": from_expm1,
        "1 - 2 / (exp(2x) + 1)": lambda v: 1.0 - 2.0 / (tf.exp(2.0 * v) + 1.0),
        "a multiply (the loop's floor)": lambda v: v * 0.9,
    }


def microseconds(fn, *, jit_compile: bool, repeats: int) -> float:
    import tensorflow as tf

    x = tf.random.normal(SHAPE, seed=0)

    @tf.function(jit_compile=jit_compile)
    def loop(x):
        body = lambda i, a: (i + 1, fn(a * 0.5 + 0.1))  # noqa: E731
        return tf.while_loop(lambda i, a: i < APPLICATIONS, body, (0, x))[1]

    return best_of(lambda: loop(x).numpy(), repeats) / APPLICATIONS * 1e6


def error_ulps(fn) -> float:
    import tensorflow as tf

    grid = np.concatenate(
        [np.linspace(-12, 12, 200001), np.logspace(-8, 1, 10000), -np.logspace(-8, 1, 10000)]
    ).astype(np.float32)
    exact = np.tanh(grid.astype(np.float64))
    ours = tf.function(fn, jit_compile=True)(tf.constant(grid)).numpy().astype(np.float64)
    sized = exact != 0
    own_ulp = np.spacing(np.abs(exact[sized]).astype(np.float32)).astype(np.float64)
    return float(np.max(np.abs(ours[sized] - exact[sized]) / own_ulp))


def jax_side(python: str, repeats: int) -> dict[str, float]:
    here = os.path.dirname(os.path.abspath(__file__))
    code = JAX_SIDE.replace("{here!r}", repr(here)).replace("{repeats}", str(repeats))
    result = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    return {line.split()[0]: float(line.split()[1]) for line in result.stdout.splitlines()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--jax_python", default=None, help="a Python with jax (optional)")
    args = parser.parse_args()
    jax = jax_side(args.jax_python, args.repeats) if args.jax_python else {}
    jax_key = {"tanh": "tanh", "a multiply (the loop's floor)": "multiply"}
    print(header(f"{APPLICATIONS} applications to {list(SHAPE)}, us each, best of {args.repeats}"))
    print()
    print("| form | XLA (TensorFlow) | XLA (JAX) | TensorFlow kernels | error (ulps, XLA) |")
    print("|---|---:|---:|---:|---:|")
    for name, fn in forms().items():
        xla = microseconds(fn, jit_compile=True, repeats=args.repeats)
        kernels = microseconds(fn, jit_compile=False, repeats=args.repeats)
        in_jax = f"{jax[jax_key[name]]:.0f}" if name in jax_key and jax else ""
        error = "" if "multiply" in name else f"{error_ulps(fn):.3g}"
        print(f"| {name} | {xla:.0f} | {in_jax} | {kernels:.0f} | {error} |")


if __name__ == "__main__":
    main()
