"""The number format the prediction network computes in (`PerformanceSpec.precision`).

'float32' (the default) everywhere; 'bfloat16': the prediction network's convolutions
and matmuls in bfloat16 with float32 weights (Keras' `mixed_bfloat16` policy on the
network's model, the library's casts where it runs the layers itself), its output cast
back to float32. What the inner loop adapts (context, fast weights), the task losses,
the learned loss, the meta-gradient and the optimizer stay float32.

bfloat16 is a gain only where the CPU computes it natively (AVX512_BF16 on AMD Zen 4 and
Intel Cooper Lake and later, AMX on Sapphire Rapids and later) or on a GPU. Elsewhere a
run asking for it says so in one line at start and computes in float32, unless
`force_precision=True`, which is refused where TensorFlow's kernels cannot run it at
all (hardware.bfloat16_unsupported).

    with precision.building(precision.resolve("bfloat16", force=False)):
        learner = CAVIA(..., network=keras_network(build=conv4_film))
"""

from __future__ import annotations

import contextlib
import sys

from viable_tf import hardware

PRECISIONS = ("float32", "bfloat16")
#: CPU flags (as /proc/cpuinfo names them) of native bfloat16 arithmetic.
NATIVE_FLAGS = ("avx512_bf16", "amx_bf16")

#: The precision the networks built now compute in (set by `building`).
_building = ["float32"]


def check(precision: str) -> str:
    """`precision` if the library knows it; one line naming the choices if not."""
    if precision not in PRECISIONS:
        raise ValueError(
            f"unknown precision {precision!r}: expected one of {', '.join(map(repr, PRECISIONS))}"
        )
    return precision


def native_bfloat16(flags: frozenset[str] | None = None) -> bool:
    """Whether this CPU (or `flags`) computes bfloat16 natively through oneDNN, or a GPU
    is there. With oneDNN off, Eigen's bfloat16 kernels lose a second-order MAML
    meta-gradient's direction (cosine under 0.6 with float32's): not native."""
    import tensorflow as tf

    if tf.config.list_physical_devices("GPU"):
        return True
    if not hardware.onednn_enabled():
        return False
    flags = hardware.cpu_flags() if flags is None else flags
    return any(flag in flags for flag in NATIVE_FLAGS)


def resolve(
    precision: str, *, force: bool = False, flags: frozenset[str] | None = None, say=None
) -> str:
    """The precision a run computes in: `precision`, or float32 where bfloat16 is asked of
    a CPU without native bfloat16 (said in one line to `say`, default stderr) unless
    `force`; bfloat16 forced where the kernels cannot run it is refused (ValueError)."""
    check(precision)
    if precision == "float32":
        return precision
    if not native_bfloat16(flags):
        if not force:
            (say or _stderr)(
                "precision: this CPU has no native bfloat16 (no avx512_bf16 or amx_bf16 "
                "flag): computing in float32 (PerformanceSpec.force_precision=True to insist)"
            )
            return "float32"
        if reason := hardware.bfloat16_unsupported(flags):
            raise ValueError(f"precision 'bfloat16' forced, but it cannot run here: {reason}")
    return precision


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@contextlib.contextmanager
def building(precision: str):
    """The networks built inside compute in `precision` (see `model_policy`)."""
    previous = _building[0]
    _building[0] = check(precision)
    try:
        yield
    finally:
        _building[0] = previous


def current() -> str:
    """The precision of the networks being built now."""
    return _building[0]


@contextlib.contextmanager
def model_policy():
    """Keras layers made inside compute in the current precision: under 'bfloat16' Keras'
    `mixed_bfloat16` policy (float32 variables, bfloat16 compute); the global policy as
    it was afterwards."""
    if current() == "float32":
        yield
        return
    import keras

    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)
