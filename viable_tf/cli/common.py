"""What the command-line tools share: gin flags, and one-line errors at the boundary."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from viable_tf.logs import add_verbosity_flag, one_line


class UsageError(Exception):
    """Bad input from the user; printed as one line, exit status 2."""


def add_gin_flags(parser: argparse.ArgumentParser) -> None:
    add_verbosity_flag(parser)
    parser.add_argument(
        "--gin_file",
        action="append",
        default=[],
        help="gin config: a path, or a shipped config such as sine/relviable.gin (repeatable)",
    )
    parser.add_argument(
        "--gin_param",
        action="append",
        default=[],
        help="gin binding, e.g. NUM_STEPS=2000 or Trainer.seed=1 (repeatable)",
    )


def parse_gin(files: Sequence[str], params: Sequence[str]) -> None:
    """Parses config files (paths or shipped names), then bindings; raises UsageError
    with one clear line."""
    from viable_tf import config

    try:
        config.parse(files, params)
    except config.ConfigError as error:
        raise UsageError(str(error)) from None


def module_command(module: str) -> list[str]:
    """This interpreter running a module of the package: works wherever the package is
    installed (no console script looked up beside the interpreter)."""
    return [sys.executable, "-m", module]


def tool_command(name: str) -> str:
    """How to run this installation's console script `name` (viable-serve, tensorboard):
    the script beside the interpreter running now (relative to the working directory when
    it is under it, e.g. `.venv/bin/viable-serve`), or the bare name when there is none."""
    path = os.path.join(os.path.dirname(sys.executable), name)
    if not os.path.isfile(path):
        return name
    relative = os.path.relpath(path)
    return path if relative.startswith(os.pardir) else relative


def run_main(main: Callable[[], int | None], prog: str) -> None:
    """Runs `main`, turning expected failures into one line on stderr and an exit status."""
    from viable_tf.logs import quiet_tensorflow

    quiet_tensorflow()
    from viable_tf.training.errors import NonFiniteLossError, WorkerLostError

    try:
        status = main()
    except UsageError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        sys.exit(2)
    except (NonFiniteLossError, WorkerLostError) as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        sys.exit(1)
    except (FileNotFoundError, ValueError) as error:
        print(
            f"{prog}: error: {one_line(str(error), fallback=type(error).__name__)}", file=sys.stderr
        )
        sys.exit(2)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; rerun the same command to resume", file=sys.stderr)
        sys.exit(130)
    sys.exit(status or 0)
