"""What the command-line tools share: gin flags, and one-line errors at the boundary."""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from collections.abc import Callable, Sequence

import gin

_MACRO_BINDING = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=")


class UsageError(Exception):
    """Bad input from the user; printed as one line, exit status 2."""


def add_gin_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--gin_file", action="append", default=[], help="gin config file (repeatable)"
    )
    parser.add_argument(
        "--gin_param",
        action="append",
        default=[],
        help="gin binding, e.g. NUM_STEPS=2000 or Trainer.seed=1 (repeatable)",
    )


def import_configurables() -> None:
    """Imports every module that registers gin configurables."""
    import viable_tf.evaluation.classification
    import viable_tf.evaluation.sine
    import viable_tf.learners
    import viable_tf.networks
    import viable_tf.tasks
    import viable_tf.tasks.classification
    import viable_tf.training.trainer  # noqa: F401


def _defined_macros() -> set[str]:
    # gin keeps a macro M as the binding of configurable `gin.macro` in scope M.
    return {scope for scope, selector in gin.config._CONFIG if selector == "gin.macro"}


def parse_gin(files: Sequence[str], params: Sequence[str]) -> None:
    """Parses config files, then bindings; raises UsageError with one clear line."""
    import_configurables()
    gin.clear_config()
    for path in files:
        if not os.path.isfile(path):
            raise UsageError(f"gin file not found: {path} (expected a path to a .gin file)")
    # gin's package-resource reader logs an error for every search path that does
    # not hold an included file before it finds the one that does; missing files
    # still raise, and are reported below.
    logging.disable(logging.ERROR)
    try:
        for path in files:
            _parse_file(path)
        macros = _defined_macros()
        for param in params:
            match = _MACRO_BINDING.match(param)
            if match and "." not in match.group(1) and match.group(1) not in macros:
                raise UsageError(
                    f"unknown macro in --gin_param={param!r}: {match.group(1)} is not defined "
                    f"by the config files; defined macros: {', '.join(sorted(macros)) or 'none'}"
                )
            gin.parse_config(param)
    except UsageError:
        raise
    except Exception as error:  # any failure to parse is a bad config (tokenize errors too)
        raise UsageError(f"bad gin configuration: {_first_line(error)}") from None
    finally:
        logging.disable(logging.NOTSET)


def _parse_file(path: str) -> None:
    """Parses one config file; its includes are found relative to its own folder.

    gin searches every folder ever added, in order, so `include 'base.gin'` could
    otherwise pick up the base.gin of a config parsed earlier in the process.
    """
    prefixes = gin.config._LOCATION_PREFIXES  # gin has no public way to reset it
    saved = list(prefixes)
    prefixes[:] = [os.path.dirname(os.path.abspath(path)), ""]
    try:
        gin.parse_config_file(path)
    finally:
        prefixes[:] = saved


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return " ".join(text.split("\n")[:1])


def run_main(main: Callable[[], int | None], prog: str) -> None:
    """Runs `main`, turning expected failures into one line on stderr and an exit status."""
    from viable_tf.training.trainer import NonFiniteLossError, WorkerLostError

    try:
        status = main()
    except UsageError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        sys.exit(2)
    except (NonFiniteLossError, WorkerLostError) as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        sys.exit(1)
    except (FileNotFoundError, ValueError) as error:
        print(f"{prog}: error: {_first_line(error)}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; rerun the same command to resume", file=sys.stderr)
        sys.exit(130)
    sys.exit(status or 0)
