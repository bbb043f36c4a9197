"""What every benchmark shares (a module, not a script): the header that names the
machine and the commit a table was measured on, and the timing loops, best-of and median,
each after a warm-up call (tracing, compiling).

    from timing import best_of, chunk_rate, header, median_of
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable

HERE = os.path.dirname(os.path.abspath(__file__))


def cpu_model() -> str:
    """The processor's model name (/proc/cpuinfo), or the platform's word for it."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def commit() -> str:
    """The checkout's commit (short), marked '+changes' when the tree differs from it."""

    def git(*args: str) -> str:
        result = subprocess.run(["git", *args], cwd=HERE, capture_output=True, text=True)
        return result.stdout.strip() if result.returncode == 0 else ""

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def header(setting: str = "") -> str:
    """One line naming the machine, the float path, TensorFlow and the commit (and the
    benchmark's `setting`), printed above every table."""
    import tensorflow as tf

    flags = [
        f"{k}={os.environ[k]}"
        for k in ("TF_ENABLE_ONEDNN_OPTS", "ONEDNN_MAX_CPU_ISA")
        if k in os.environ
    ]
    parts = [
        f"machine: {cpu_model()}, {os.cpu_count()} cores",
        f"TensorFlow {tf.__version__}",
        f"commit {commit()}",
        *flags,
        *([setting] if setting else []),
    ]
    return "; ".join(parts) + "\n"


def times(call: Callable[[], object], repeats: int, *, warmup: int = 1) -> list[float]:
    """Seconds of each of `repeats` calls of `call`, after `warmup` untimed ones. `call`
    must wait for its result (e.g. convert a tensor to a Python number)."""
    for _ in range(warmup):
        call()
    measured = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        measured.append(time.perf_counter() - start)
    return measured


def best_of(call: Callable[[], object], repeats: int, *, warmup: int = 1) -> float:
    """The fastest call's seconds: the least disturbed by other work on the machine."""
    return min(times(call, repeats, warmup=warmup))


def median_of(call: Callable[[], object], repeats: int, *, warmup: int = 1) -> float:
    """The median call's seconds."""
    return statistics.median(times(call, repeats, warmup=warmup))


def chunk_rates(trainer, *, steps: int, repeats: int, warmup_steps: int = 100) -> list[float]:
    """Meta-updates per second of each of `repeats` calls of a Trainer's compiled chunk
    (`train_chunk`) of `steps` meta-updates, after a warm-up chunk; the trainer must be
    built with `steps_per_call >= steps`. Their spread shows how noisy the sitting was."""
    import tensorflow as tf

    trainer.train_chunk(tf.constant(warmup_steps))  # trace, compile, warm up

    def chunk() -> None:
        ran = int(trainer.train_chunk(tf.constant(steps))[0])  # waits for the result
        if ran != steps:
            raise ValueError(f"the chunk ran {ran} of {steps} meta-updates: raise steps_per_call")

    return [steps / seconds for seconds in times(chunk, repeats, warmup=0)]


def chunk_rate(trainer, *, steps: int, repeats: int, warmup_steps: int = 100) -> float:
    """The best of `chunk_rates`: the least disturbed by other work on the machine."""
    return max(chunk_rates(trainer, steps=steps, repeats=repeats, warmup_steps=warmup_steps))


def image_trainer(method: str, setting: str, data_dir: str, model_dir: str, **spec):
    """A Trainer built from the shipped end-to-end config `omniglot_conv/METHOD_SETTING.gin`
    as viable-train builds it, on Omniglot's zips in `data_dir`, with `spec`'s
    PerformanceSpec bindings (`steps_per_call=6`, `precision="bfloat16"`) over the config's;
    the progress bar off (bfloat16.py, lab/bfloat16_profile.py)."""
    import gin

    from viable_tf import config
    from viable_tf.training import Trainer

    gin.clear_config()
    bindings = [f"PerformanceSpec.{name}={value!r}" for name, value in spec.items()]
    config.parse(
        [f"omniglot_conv/{method}_{setting}.gin"],
        [f"IMAGE_DIR={data_dir!r}", "Trainer.show_progress=False", *bindings],
    )
    return Trainer(model_dir=model_dir)


def relviable_sine_rate(
    strategy, batch_size: int, *, jit_compile: bool, steps: int | None = None
) -> float:
    """Meta-updates per second of a relVIABLE sine trainer's compiled chunk of `steps`
    updates (default: about 15,000 tasks' worth) under `strategy`, best of 3 after a
    warm-up (replica_scaling.py, worker_scaling.py)."""
    import tempfile

    from viable_tf.learners import VIABLE
    from viable_tf.tasks import SineTasks
    from viable_tf.training import PerformanceSpec, Trainer

    steps = steps or max(30, 15_000 // batch_size)
    with tempfile.TemporaryDirectory() as model_dir:
        trainer = Trainer(
            model_dir=model_dir,
            tasks=SineTasks(),
            learner=VIABLE,
            meta_batch_size=batch_size,
            performance=PerformanceSpec(steps_per_call=steps, jit_compile=jit_compile),
            show_progress=False,
            strategy=strategy,
        )
        return chunk_rate(trainer, steps=steps, repeats=3, warmup_steps=5)
