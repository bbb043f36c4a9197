"""What this machine's CPU and TensorFlow's kernels can run, checked before building.

A compute option that the kernels cannot run must be refused with a message, not
crashed into: TensorFlow sends bfloat16 matmuls to oneDNN when the CPU has AVX-512
(or AVX-NE-CONVERT), and oneDNN then needs its ISA at AVX512_CORE or above. Where
`ONEDNN_MAX_CPU_ISA` caps oneDNN below that (AVX2, as on a CPU without AVX-512), the
primitive cannot be created and the process aborts in C++ (`dnnl::error`), taking
the whole run with it. On a CPU with neither feature there are no native
bfloat16 kernels at all: bfloat16 would be emulated, slower than float32.

With oneDNN off (`TF_ENABLE_ONEDNN_OPTS=0`) TensorFlow's Eigen kernels run bfloat16 on
any CPU; on a GPU the check does not apply.
"""

from __future__ import annotations

import functools
import os

#: oneDNN's ISA levels (ONEDNN_MAX_CPU_ISA values) below AVX512_CORE: no bfloat16 matmul.
_ISAS_WITHOUT_BF16 = ("SSE41", "AVX", "AVX2", "AVX2_VNNI")
#: CPU flags (as /proc/cpuinfo names them) that make TensorFlow use oneDNN for bfloat16.
_AVX512_CORE = ("avx512f", "avx512bw", "avx512vl", "avx512dq")


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as Linux reports them (empty where unknown)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def onednn_enabled() -> bool:
    """TensorFlow's oneDNN kernels are on unless TF_ENABLE_ONEDNN_OPTS turns them off."""
    value = os.environ.get("TF_ENABLE_ONEDNN_OPTS", "1").strip().lower()
    return value not in ("0", "false", "no", "off")


def bfloat16_unsupported(flags: frozenset[str] | None = None) -> str | None:
    """Why bfloat16 compute cannot run on this CPU's kernels, or None if it can.

    `flags` (default: this CPU's) lets tests state a CPU; the environment variables are
    read as they are now.
    """
    if not onednn_enabled():
        return None  # Eigen's kernels: bfloat16 everywhere
    import tensorflow as tf  # here: cpu_flags serves tests/run_suite.py without TensorFlow

    if tf.config.list_physical_devices("GPU"):
        return None
    flags = cpu_flags() if flags is None else flags
    if not flags:
        return None  # not Linux, or no flags reported: nothing to go by
    avx512 = all(flag in flags for flag in _AVX512_CORE)
    if not avx512 and "avx_ne_convert" not in flags:
        missing = ", ".join(f for f in (*_AVX512_CORE, "avx_ne_convert") if f not in flags)
        return (
            f"this CPU has no bfloat16 kernels in oneDNN (missing: {missing}); bfloat16 "
            "would be emulated and slower than float32: use compute_dtype='float32'"
        )
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "").strip().upper()
    if cap in _ISAS_WITHOUT_BF16 or (cap == "AVX2_VNNI_2" and "avx_ne_convert" not in flags):
        return (
            f"ONEDNN_MAX_CPU_ISA={cap} keeps oneDNN below AVX512_CORE, the least ISA with "
            "bfloat16 matmuls, while TensorFlow sends them to oneDNN on this CPU (it would "
            "abort the process); unset ONEDNN_MAX_CPU_ISA, set TF_ENABLE_ONEDNN_OPTS=0, or "
            "use compute_dtype='float32'"
        )
    return None
