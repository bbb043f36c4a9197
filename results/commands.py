"""A record's `command`, read as a shell reads it, and what it would build.

Every measured record carries a command that reruns its cell on today's code: one or more
steps joined by `&&`, each a program of the project with its flags. `builds(command)` gives
the trainings the command runs, each as the `viable-train` configuration it parses
(config files and bindings), without running anything: the dry-run test
(tests/test_record_commands.py) parses and builds each of them, and `results.rerun` runs
them.

    python -m results.commands 'viable-train --gin_file=sine/cavia.gin --model_dir=M'
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shlex
import sys
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


class CommandError(ValueError):
    """A command that does not parse as a shell would, or names no program of ours."""


@dataclass(frozen=True)
class Build:
    """One training a command runs: viable-train's config files and bindings, where its
    run directory is, and the results file that holds its cell."""

    files: tuple[str, ...]
    params: tuple[str, ...]
    model_dir: str
    evaluations: tuple[int, ...] = ()  # K of the viable-eval steps on this run


def quote(word: str) -> str:
    """One word as a person would type it for a shell: bare where it can be, in double
    quotes where it holds single quotes (a gin string: "IMAGE_DIR='x'"), else shlex's."""
    flag, equals, value = word.partition("=")
    if flag.startswith("--") and equals and shlex.quote(flag) == flag:
        return f"{flag}={quote(value)}"  # --gin_param="X='y'"
    bare = shlex.quote(word)
    if bare == word or any(c in word for c in '"$`\\!'):
        return bare
    return f'"{word}"'


def join(words: list[str]) -> str:
    """`words` as one shell command (shlex.join with `quote`'s quoting)."""
    return " ".join(quote(w) for w in words)


def steps(command: str) -> list[list[str]]:
    """The command's steps as a shell splits them: words, one list per `&&`-joined step.
    Refuses what is not a plain chain of programs (`;`, pipes, redirections, subshells)."""
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError as error:
        raise CommandError(f"does not parse as a shell command: {error}") from None
    chain: list[list[str]] = [[]]
    for word in words:
        if word == "&&":
            chain.append([])
        elif word and set(word) <= set("();|&<>"):
            raise CommandError(f"{word!r}: a command is programs joined by '&&', nothing else")
        else:
            chain[-1].append(word)
    if not all(chain):
        raise CommandError("an empty step")
    return chain


def _parse(parser: argparse.ArgumentParser, argv: list[str], program: str) -> argparse.Namespace:
    """argparse's reading of `argv`, its error as a CommandError instead of an exit."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            return parser.parse_args(argv)
    except SystemExit:
        last = (stderr.getvalue().strip().splitlines() or ["bad arguments"])[-1]
        raise CommandError(f"{program}: {last}") from None


def _viable_train(argv: list[str]) -> list[Build]:
    from viable_tf.cli import train

    args = _parse(train._parser(), argv, "viable-train")
    if not args.gin_file:
        raise CommandError("viable-train: no --gin_file")
    return [Build(tuple(args.gin_file), tuple(args.gin_param), args.model_dir)]


def _omniglot_conv(argv: list[str]) -> list[Build]:
    from viable_tf.experiments import omniglot_conv

    args = _parse(omniglot_conv._parser(), argv, "omniglot_conv")
    methods = _names("--methods", args.methods, omniglot_conv.METHODS + omniglot_conv.MORE_METHODS)
    settings = _names("--settings", args.settings, omniglot_conv.SETTINGS)
    data = omniglot_conv.data(args.data_dir)
    if args.reference_only:  # the episodes of the runs' base config, nothing trained
        return [
            Build(
                (f"{omniglot_conv.CONFIGS}/protonet_{s}.gin",),
                (*data, *omniglot_conv.run_params(args)),
                os.path.join(args.work_dir, "reference"),
            )
            for s in settings
        ]
    return [
        Build(
            (f"{omniglot_conv.CONFIGS}/{m}_{s}.gin",),
            (*data, *omniglot_conv.run_params(args)),
            os.path.join(args.work_dir, "runs", f"{m}_{s}"),
        )
        for s in settings
        for m in methods
    ]


def _viable_omniglot(argv: list[str]) -> list[Build]:
    from viable_tf.experiments import omniglot
    from viable_tf.experiments.labels import LABELS

    args = _parse(omniglot._parser(), argv, "viable-omniglot")
    methods = _names("--methods", args.methods, tuple(LABELS))
    settings = _names("--settings", args.settings, omniglot.SETTINGS)
    data = omniglot.features(args.work_dir)
    if args.reference_only:
        methods = ("cavia",)  # the runs' episodes (gin/omniglot/base.gin), nothing trained
    return [
        Build(
            (f"{omniglot.CONFIGS}/{m}_{s}.gin",),
            (*data, *omniglot.run_params(args)),
            os.path.join(args.work_dir, "reference" if args.reference_only else "runs", f"{m}_{s}"),
        )
        for s in settings
        for m in methods
    ]


def _corruption_table(argv: list[str]) -> list[Build]:
    sys.path.insert(0, REPO)  # lab/ is the checkout's, not installed
    try:
        from lab import corruption_table as table
    finally:
        sys.path.remove(REPO)
    args = _parse(table.parser(), argv, "lab/corruption_table.py")
    methods = _names("--methods", args.methods, tuple(table.METHODS))
    if args.noise_std is not None:
        raise CommandError("lab/corruption_table.py: --noise_std tables have no records")
    return [
        Build(
            (config, *table.COMMON_CONFIGS),
            (f"NUM_STEPS={args.num_steps}", *bindings),
            os.path.join(args.work_dir, "runs", run),
        )
        for run, (config, bindings) in table.outlier_runs(args, list(methods)).items()
    ]


def _names(flag: str, text: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    """The drivers' own reading of a list of names (omniglot.parse_names), its refusal as a
    CommandError."""
    from viable_tf.cli.common import UsageError
    from viable_tf.experiments.omniglot import parse_names

    try:
        return parse_names(flag, text, allowed)
    except UsageError as error:
        raise CommandError(str(error)) from None


#: The programs a record's step may run, by their words: what each builds.
PROGRAMS = {
    ("viable-train",): _viable_train,
    ("python", "-m", "viable_tf.experiments.omniglot_conv"): _omniglot_conv,
    ("viable-omniglot",): _viable_omniglot,
    ("python", "lab/corruption_table.py"): _corruption_table,
}
#: Steps that build nothing: a test of the run an earlier step trained, the suite itself.
CHECKS = (("viable-eval",), ("bash", ".ci/run"), (".venv/bin/pytest",), ("git", "clone"), ("cd",))


def builds(command: str) -> list[Build]:
    """Every training `command` runs, as viable-train would parse it. Raises CommandError
    (one line) for a command that does not parse, a program that is not ours, flags its
    program refuses, or a viable-eval of a run no earlier step trains."""
    found: list[Build] = []
    for words in steps(command):
        program = next((p for p in PROGRAMS if tuple(words[: len(p)]) == p), None)
        if program is not None:
            found += PROGRAMS[program](words[len(program) :])
            continue
        if tuple(words[:1]) == ("viable-eval",):
            found = _evaluation(found, words[1:])
        elif not any(tuple(words[: len(c)]) == c for c in CHECKS):
            raise CommandError(f"{shlex.join(words[:3])}: not a program of the project")
    return found


def _evaluation(found: list[Build], argv: list[str]) -> list[Build]:
    from viable_tf.cli import evaluate

    args = _parse(evaluate._parser(), argv, "viable-eval")
    shots = tuple(int(k) for k in str(args.num_support or "").split(",") if k)
    for i, build in enumerate(found):
        if build.model_dir == args.model_dir:
            found[i] = Build(build.files, build.params, build.model_dir, build.evaluations + shots)
            return found
    raise CommandError(f"viable-eval --model_dir={args.model_dir}: no earlier step trains it")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", help="a record's command, quoted")
    args = parser.parse_args(argv)
    for build in builds(args.command):
        files = [f"--gin_file={f}" for f in build.files]
        params = [f"--gin_param={p}" for p in build.params]
        print(join(["viable-train", *files, *params, f"--model_dir={build.model_dir}"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
