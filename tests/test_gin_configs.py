"""Every sine gin config parses, defines the resizing macros, and builds its trainer.

(The classification configs are tested in test_classification.py.)"""

import glob
import os

import gin
import pytest

from viable_tf.cli.common import parse_gin
from viable_tf.training import Trainer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = sorted(
    os.path.relpath(path, REPO) for path in glob.glob(os.path.join(REPO, "gin", "sine", "*.gin"))
)
METHOD_CONFIGS = [c for c in CONFIGS if os.path.basename(c) not in ("base.gin", "quick.gin")]
MACROS = ("NUM_STEPS", "CONTEXT_DIM", "NUM_SUPPORT", "SEED")


def test_the_expected_configs_exist():
    names = {os.path.basename(c) for c in METHOD_CONFIGS}
    for method in ("maml", "cavia", "simviable", "relviable"):
        assert {f"{method}.gin", f"{method}_vark.gin"} <= names


@pytest.mark.parametrize("config", METHOD_CONFIGS)
def test_config_parses_defines_macros_and_builds(config, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    parse_gin([config], [])
    for macro in MACROS:
        gin.query_parameter(f"%{macro}")  # raises if undefined
    trainer = Trainer(model_dir=str(tmp_path))
    name = os.path.basename(config).removesuffix(".gin")
    expected = name.removesuffix("_vark").removesuffix("_tanh")
    assert trainer.learner.method_name == expected
    assert trainer.num_steps == 50_000 and trainer.meta_batch_size == 25
    if config.endswith("_vark.gin"):
        assert (trainer.tasks.min_support, trainer.tasks.num_support) == (0, 20)
    else:
        assert trainer.tasks.min_support == trainer.tasks.num_support == 10


def test_macros_resize_a_run(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    parse_gin(
        ["gin/sine/relviable.gin"],
        ["NUM_STEPS=2000", "CONTEXT_DIM=2", "NUM_SUPPORT=4", "SEED=7"],
    )
    trainer = Trainer(model_dir=str(tmp_path))
    assert trainer.num_steps == 2000 and trainer.seed == 7
    assert trainer.learner.context_dim == 2
    assert trainer.tasks.num_support == 4


def test_quick_config_layers_on_a_method(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    parse_gin(["gin/sine/relviable.gin", "gin/sine/quick.gin"], [])
    trainer = Trainer(model_dir=str(tmp_path))
    assert trainer.num_steps == 25_000 and trainer.learner.method_name == "relviable"


def test_tanh_options_change_only_the_activation(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    for method in ("relviable", "simviable"):
        parse_gin([f"gin/sine/{method}_tanh.gin"], [])
        trainer = Trainer(model_dir=str(tmp_path / method))
        assert trainer.learner.method_name == method
        assert trainer.learner.loss_network.activation.__name__ == "tanh"
        assert trainer.learner.num_inner_steps == 1 and trainer.num_steps == 50_000
