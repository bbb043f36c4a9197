"""Every measured record's `command` reruns its cell on today's code (results/commands.py):
each parses as a shell would, names programs and flags that exist, and every training it runs
parses its gin and builds its learner, task source and trainer, on tiny stand-ins for the
data that is not in the repository. Nothing is trained. Records that differ only by
numbers (seed, K, C, the setting's ways and shots, a numeric binding given or left at its
default) share one build."""

import json
import os
import re
from collections import defaultdict

import gin
import pytest
from fake_leo import write_fake_leo
from fake_omniglot import write_fake_omniglot

from results import commands
from results import records as store
from viable_tf import config
from viable_tf.datasets import image_folder

RECORDS = store.RECORDS

#: A binding whose value is a number (`SEED=2`, `CONTEXT_DIM=100`, `OUTLIERS=0.2`).
NUMERIC_BINDING = re.compile(r"^[^=]+=[-+]?[0-9.]+(e[-+]?[0-9]+)?$")


def measured():
    """(path, record) of every record that is a run of ours (a paper's figure is quoted)."""
    found = []
    for root, _, names in os.walk(RECORDS):
        for name in sorted(names):
            if name.endswith(".json"):
                path = os.path.join(root, name)
                with open(path) as f:
                    record = json.load(f)
                if record.get("source") != "paper":
                    found.append((os.path.relpath(path, store.REPO), record))
    return sorted(found, key=lambda item: item[0])


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory):
    """The data bindings a command names, pointed at small stand-ins: an Omniglot-shaped
    image folder with just enough for the largest setting (20 characters in each held-out
    split for 20 ways, 15 drawings for 5 shots and 10 queries), and LEO-format features.
    Each build decodes the folder, so its size is most of a build's time."""
    root = tmp_path_factory.mktemp("stand_ins")
    images = write_fake_omniglot(root / "omniglot", drawings=15, characters=4)
    features = write_fake_leo(
        str(root / "features"),
        dataset="omniglot",
        dim=64,
        per_class=30,
        split_classes={"train": 24, "val": 24, "test": 24},
    )
    return {"IMAGE_DIR": repr(str(images)), "DATA_DIR": repr(features)}


@pytest.fixture
def decoded_once(monkeypatch):
    """Builds that read the same stand-in class at the same size and channels share its
    decoding (each gets a copy of its own: a build may invert its images in place); the
    image builds decoded the same 900 files 33 times, a quarter of the test's CPU."""
    load, memo = image_folder.load, {}

    def shared(image_class, **how):
        if image_class.images is not None:
            return load(image_class, **how)
        key = (image_class.files, repr(sorted(how.items())))
        if key not in memo:
            memo[key] = load(image_class, **how)
        images, skipped = memo[key]
        return images.copy(), list(skipped)

    monkeypatch.setattr(image_folder, "load", shared)


def with_stand_ins(params, stand_ins):
    """`params` with each data binding (IMAGE_DIR=..., DATA_DIR=...) on its stand-in."""
    out = []
    for param in params:
        name = param.split("=", 1)[0]
        out.append(f"{name}={stand_ins[name]}" if name in stand_ins else param)
    return tuple(out)


def test_every_measured_record_has_a_command_that_a_shell_and_its_program_accept():
    problems = []
    for path, record in measured():
        try:
            builds = commands.builds(record.get("command") or "")
            if not builds and record["benchmark"] != "test_suite":
                raise commands.CommandError("runs no training")
        except commands.CommandError as error:
            problems.append(f"{path}: {error}")
            continue
        trains = builds and record["method"] != "nearest_class_mean"  # a reference trains none
        if trains and "config" not in record:
            problems.append(f"{path}: names no shipped config (`config`) for its row")
        elif "config" in record and not any(record["config"] in b.files for b in builds):
            problems.append(f"{path}: its config {record['config']} is not what it runs")
    assert not problems, "\n".join(problems)
    assert len(measured()) > 300


@pytest.mark.slow
def test_every_record_command_builds_on_todays_code(stand_ins, decoded_once, tmp_path):
    """Parses each training's gin, and builds one of each group (records that differ only
    by numbers) as viable-train would: the learner, the tasks, the trainer."""
    from viable_tf.training.trainer import Trainer

    groups = defaultdict(list)
    for path, record in measured():
        for build in commands.builds(record["command"]):
            named = sorted(p for p in build.params if not NUMERIC_BINDING.match(p))
            key = re.sub(r"\d+", "N", repr((build.files, named)))
            groups[key].append((path, build))
    problems = []
    for members in groups.values():
        for index, (path, build) in enumerate(members):
            try:
                config.parse(build.files, with_stand_ins(build.params, stand_ins))
                if index == 0:
                    trainer = Trainer(model_dir=str(tmp_path / "run"))
                    assert trainer.learner.trainable_variables
            except Exception as error:
                problems.append(f"{path}: {type(error).__name__}: {str(error).splitlines()[0]}")
            finally:
                gin.clear_config()
    assert not problems, "\n".join(problems)
    assert len(groups) < 100  # one build per group keeps the test near a minute


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("", "an empty step"),
        ("viable-train --gin_file=sine/cavia.gin --model_dir=M; rm -rf M", "joined by '&&'"),
        ("viable-train --gin_file='sine/cavia.gin --model_dir=M", "does not parse"),
        ("lab/corruption_table.py --outliers 2", "not a program of the project"),
        ("viable-train --gin_file=sine/cavia.gin", "required: --model_dir"),
        ("viable-eval --model_dir=M --num_support=4", "no earlier step trains it"),
        (
            "python -m viable_tf.experiments.omniglot_conv --work_dir=W --methods=nope",
            "--methods must list some of",
        ),
    ],
)
def test_a_command_that_cannot_rerun_is_refused_in_one_line(command, message):
    with pytest.raises(commands.CommandError, match=re.escape(message)):
        commands.builds(command)


def test_a_removed_binding_or_a_quote_a_shell_strips_fails_the_build(stand_ins):
    """What broke recorded commands before: a binding that is gone, and a gin string whose
    quotes a shell removes (`X='mean'` reaches gin as `X=mean`)."""
    for command in (
        "viable-train --gin_file=sine/relviable.gin "
        "--gin_param=VIABLE.task_loss_feature='mean' --model_dir=M",
        "viable-train --gin_file=sine/relviable.gin "
        "--gin_param=RelationLossNetwork.readout='set' --model_dir=M",
    ):
        (build,) = commands.builds(command)
        with pytest.raises(config.ConfigError):
            try:
                config.parse(build.files, build.params)
            finally:
                gin.clear_config()


def test_commands_are_written_as_a_person_types_them():
    assert commands.quote("--gin_param=IMAGE_DIR='x y'") == "--gin_param=\"IMAGE_DIR='x y'\""
    assert commands.quote("--methods=cavia") == "--methods=cavia"
    words = ["viable-train", "--gin_param=X='a'", "--model_dir=M"]
    assert commands.steps(commands.join(words)) == [words]


def test_rerun_names_each_tables_commands_once_and_finds_each_cells_result(capsys):
    from results import rerun

    assert rerun.main(["sine_step", "--dry_run"]) == 0
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("$ ")]
    assert len(printed) == len(set(printed)) == 18  # 6 methods x 3 seeds, each run once
    assert all(commands.builds(line[2:]) for line in printed)
    record = {
        "setting": "vark_K4_seed0",
        "config": "sine/cavia_vark.gin",
        "command": "viable-train --gin_file=sine/cavia_vark.gin --model_dir=M "
        "&& viable-eval --model_dir=M --num_support=4",
    }
    run_dir, k = rerun._cell_run(record, commands.builds(record["command"]))
    assert run_dir.endswith("/M") and k == 4
    with pytest.raises(SystemExit, match="no table named 'nope'"):
        rerun.main(["nope"])
