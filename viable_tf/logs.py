"""What the command-line tools print before their own output: nothing of TensorFlow's.

TensorFlow's C++ runtime logs from the moment it is imported (CPU instruction sets,
CUDA drivers not found, `failed call to cuInit`), some of it before its own log-level
setting is read; to a newcomer those lines read as failures. At verbosity 0 (the
default) the tools import TensorFlow with the process's stderr briefly pointed at
/dev/null and keep only its errors afterwards; 1 shows TensorFlow's warnings and
errors; 2 everything. Set by `--verbosity=N` on any tool or `VIABLE_TF_VERBOSITY=N`.
An explicit `TF_CPP_MIN_LOG_LEVEL` in the environment is respected.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Sequence

ENV_VAR = "VIABLE_TF_VERBOSITY"
LEVELS = (0, 1, 2)


def add_verbosity_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--verbosity",
        type=int,
        choices=LEVELS,
        default=0,
        help=f"TensorFlow's own log lines: 0 none (default), 1 warnings, 2 all (or ${ENV_VAR})",
    )


def requested_verbosity(argv: Sequence[str] | None = None) -> int:
    """The verbosity asked for by `--verbosity` in argv, else by the environment, else 0."""
    argv = sys.argv[1:] if argv is None else argv
    for i, arg in enumerate(argv):
        value = None
        if arg.startswith("--verbosity="):
            value = arg.split("=", 1)[1]
        elif arg == "--verbosity" and i + 1 < len(argv):
            value = argv[i + 1]
        if value is not None:
            return _level(value)
    return _level(os.environ.get(ENV_VAR, "0"))


def _level(value: str) -> int:
    try:
        level = int(value)
    except ValueError:
        return 0  # argparse reports a bad --verbosity itself
    return min(max(level, 0), 2)


def quiet_tensorflow(verbosity: int | None = None) -> None:
    """Imports TensorFlow as quietly as `verbosity` asks (see the module docstring)."""
    verbosity = requested_verbosity() if verbosity is None else verbosity
    if verbosity >= 2 or "tensorflow" in sys.modules:
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1" if verbosity == 1 else "3")
    if verbosity == 1:
        return
    for module in ("keras", "tensorflow", "absl"):
        warnings.filterwarnings("ignore", module=module)
    sys.stderr.flush()
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        import tensorflow as tf

        tf.config.list_physical_devices()  # the device probes log here (cuInit, ...)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def graph_error_reason(text: str) -> str:
    """An op's own error text from TensorFlow's error for a traced function, which
    wraps it: "Graph execution error:", the node it was detected at (and, where kept,
    its stack), then the op's text ("Invalid PNG data, size 100"), then the node again.
    Other texts are returned as they are."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "Graph execution error:":
        return text
    for i, line in enumerate(lines[1:], start=1):
        wrapper = line.startswith(("Detected at node", "<stack traces"))  # [[node]] indented
        if line.strip() and not wrapper and not line[0].isspace():
            return "\n".join(lines[i:])
    return text


def one_line(
    error: BaseException | str,
    *,
    whole: bool = False,
    fallback: str | None = None,
    limit: int | None = None,
) -> str:
    """An error as one line, for the tools' `error:` lines and the server's status texts:
    its first line (`whole=True`: every line, joined), its `message` where it has one
    (TensorFlow's errors), `fallback` (else its type's name) where it says nothing, cut
    to `limit` characters."""
    text = error if isinstance(error, str) else getattr(error, "message", None) or str(error)
    text = graph_error_reason(text.strip())
    if text:
        text = " ".join(text.split()) if whole else text.splitlines()[0]
    else:
        text = fallback or (type(error).__name__ if not isinstance(error, str) else "")
    return text if limit is None else text[:limit]
