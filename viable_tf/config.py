"""gin configuration: the configs shipped with the package, found by name, parsed.

A config is named by a path (`my.gin`, `/abs/exp.gin`) or by its name among the
shipped ones (`sine/relviable.gin`; `gin/sine/relviable.gin` works too). The shipped
configs are the repository's `gin/` folder: a wheel installs it as `viable_tf/gin/`,
a source checkout reads it in place. So `viable-train --gin_file=sine/relviable.gin`
works from any directory after a plain `pip install`.

An `include 'x.gin'` is resolved against the including file's own folder (gin's
own search would try every folder ever added in the process, so a second config
parsed in one process could pick up the first one's `base.gin`). Files are read
here and handed to gin's public `parse_config` piece by piece around their includes.

This module registers every configurable (`import_configurables`) and restores trained
runs from their operative config (`load_run`), so it is the layer that may import every
other one (pyproject.toml's import contract): only the command-line tools and the
experiments are above it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import gin

from viable_tf.run_dir import RunDir

if TYPE_CHECKING:  # TensorFlow is imported only where a checkpoint is read (load_run)
    from viable_tf.learners.base import Learner
    from viable_tf.tasks.base import TaskFamily

_INCLUDE = re.compile(r"""^\s*include\s+(['"])(?P<name>.+?)\1\s*(#.*)?$""")
_MACRO_DEFINITION = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*=")
_MACRO_BINDING = re.compile(r"^\s*(?P<name>[A-Za-z_][A-Za-z0-9_.]*)\s*=")


class ConfigError(ValueError):
    """A config that cannot be found or parsed; its message is one line."""


def config_roots() -> list[Path]:
    """Where shipped configs live: inside the installed package, else the checkout. An
    installed package's parent is site-packages, whose `gin/` is gin-config itself."""
    package = Path(__file__).resolve().parent
    for root in (package / "gin", package.parent / "gin"):
        if root.is_dir():
            return [root]
    return []


def shipped_configs() -> list[str]:
    """Names of every shipped config, e.g. 'sine/relviable.gin'."""
    names = set()
    for root in config_roots():
        names |= {p.relative_to(root).as_posix() for p in root.rglob("*.gin")}
    return sorted(names)


def resolve(name: str) -> Path:
    """The file a config name refers to: a path if one exists, else a shipped config."""
    if os.path.isfile(name):
        return Path(name).resolve()
    relative = name.removeprefix("gin/").removeprefix("./gin/")
    for root in config_roots():
        candidate = root / relative
        if candidate.is_file():
            return candidate
    families = sorted({n.split("/")[0] + "/" for n in shipped_configs() if "/" in n})
    raise ConfigError(
        f"gin file not found: {name} (expected a path to a .gin file or a shipped config "
        f"such as sine/relviable.gin; shipped families: {', '.join(families) or 'none'})"
    )


def import_configurables() -> None:
    """Imports every module that registers gin configurables."""
    import viable_tf.evaluation.classification
    import viable_tf.evaluation.sine
    import viable_tf.learners
    import viable_tf.networks
    import viable_tf.tasks
    import viable_tf.tasks.classification
    import viable_tf.tasks.images
    import viable_tf.training.trainer  # noqa: F401


def parse(files: Sequence[str], params: Sequence[str] = ()) -> list[Path]:
    """Clears gin, parses config files in order, then bindings; returns the files read.

    Raises ConfigError with one line: a missing file, an unknown macro in `params`
    (naming the defined ones), or anything gin refuses.
    """
    import_configurables()
    gin.clear_config()
    paths = [resolve(name) for name in files]
    macros: set[str] = set()
    for path in paths:
        _parse_file(path, macros, stack=())
    for param in params:
        match = _MACRO_BINDING.match(param)
        if match and "." not in match.group("name") and match.group("name") not in macros:
            defined = ", ".join(sorted(macros)) or "none"
            raise ConfigError(
                f"unknown macro in --gin_param={param!r}: {match.group('name')} is not "
                f"defined by the config files; defined macros: {defined}"
            )
        _gin_parse(param, "--gin_param")
    return paths


def _parse_file(path: Path, macros: set[str], stack: tuple[Path, ...]) -> None:
    if path in stack:
        chain = " -> ".join(p.name for p in (*stack, path))
        raise ConfigError(f"gin include cycle: {chain}")
    pending: list[str] = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        include = _INCLUDE.match(line)
        if include is None:
            pending.append(line)
            macro = _MACRO_DEFINITION.match(line)
            if macro:
                macros.add(macro.group("name"))
            continue
        _gin_parse("\n".join(pending), str(path))
        pending = []
        target = path.parent / include.group("name")
        if not target.is_file():
            raise ConfigError(
                f"{path}:{number}: included file not found: {include.group('name')} "
                f"(resolved against the including file's folder, {path.parent})"
            )
        _parse_file(target.resolve(), macros, (*stack, path))
    _gin_parse("\n".join(pending), str(path))


def _gin_parse(text: str, where: str) -> None:
    try:
        gin.parse_config(text)
    except Exception as error:  # any failure to parse is a bad config (tokenize errors too)
        first = (str(error).strip() or type(error).__name__).splitlines()[0]
        raise ConfigError(f"bad gin configuration in {where}: {first}") from None


class LoadedRun(NamedTuple):
    """A trained run, restored: the learner with its best weights and its task family."""

    learner: Learner
    tasks: TaskFamily
    checkpoint_step: int
    run_dir: RunDir
    trainer_settings: dict  # Trainer's seed, num_steps, meta_batch_size as bound
    training_state: dict  # step and best validation result of the latest checkpoint


def load_run(
    model_dir: str,
    gin_params: tuple[str, ...] = (),
    *,
    restore: bool = True,
    learner_options: dict | None = None,
) -> LoadedRun:
    """Restores a trained run from its operative config and best checkpoint (no trainer,
    optimizer or strategy is built). `gin_params` override bindings (e.g. DATA_DIR).
    `restore=False`: the learner keeps the initial weights its configuration draws under
    the run's seed (keras.utils.set_random_seed, as the trainer seeds), checkpoint_step 0.
    `learner_options`: arguments the learner is built with over its bindings, for a learner
    with fewer parts than trained (e.g. {'query_term': False}); every object it holds
    must then be in the checkpoint, which may hold more (ValueError, one line, if not).

    Raises FileNotFoundError (one line, naming what is missing) if `model_dir` is not a
    run written by viable-train or holds no checkpoint.
    """
    import keras
    import tensorflow as tf

    run = RunDir(model_dir)
    if not os.path.isfile(run.operative_config):
        raise FileNotFoundError(
            f"{model_dir} is not a trained run: expected {run.operative_config}, "
            "written by viable-train"
        )
    path = run.best_checkpoint()
    if path is None:
        raise FileNotFoundError(
            f"no checkpoint in {model_dir}: expected {run.best}/ or {run.checkpoints}/, "
            "written by viable-train"
        )
    parse([run.operative_config], gin_params)
    bindings = gin.get_bindings("Trainer", resolve_references=False)
    tasks = evaluate_reference(bindings["tasks"])
    settings = {
        name: evaluate_reference(bindings[name])
        for name in ("seed", "num_steps", "meta_batch_size")
        if name in bindings
    }
    from viable_tf import precision

    # The precision the run trained in, where this machine can compute it (precision.py).
    asked = _bound("PerformanceSpec.precision", "float32")
    computes = precision.resolve(asked, force=_bound("PerformanceSpec.force_precision", False))
    if computes != "float32":
        settings["precision"] = computes
    if not restore:
        keras.utils.set_random_seed(settings.get("seed", 0))
    with precision.building(computes):
        learner = evaluate_reference(bindings["learner"])(
            input_dim=tasks.input_dim, output_dim=tasks.output_dim, **(learner_options or {})
        )
    if restore:
        status = tf.train.Checkpoint(learner=learner).read(path).expect_partial()
        if learner_options:
            try:
                status.assert_existing_objects_matched()
            except AssertionError:
                raise ValueError(
                    f"{path} does not hold every weight of the learner built with "
                    f"{learner_options}: it was trained with other parts"
                ) from None
    step = int(path.rsplit("-", 1)[-1]) if restore else 0
    return LoadedRun(learner, tasks, step, run, settings, run.training_state())


def _bound(parameter: str, default):
    """The value gin binds to `parameter`, or `default` where nothing binds it."""
    try:
        return gin.query_parameter(parameter)
    except ValueError:
        return default


def evaluate_reference(reference):
    """A gin reference as bound: `@F()` called, `@F` the callable itself."""
    if isinstance(reference, gin.config.ConfigurableReference):
        function = reference.scoped_configurable_fn
        return function() if reference.evaluate else function
    return reference
