"""Every sine gin config parses, defines the resizing macros, and builds its trainer.

(The classification configs are tested in test_classification.py.)"""

import glob
import os

import gin
import keras
import numpy as np
import pytest

from viable_tf.cli.common import UsageError, parse_gin
from viable_tf.config import evaluate_reference
from viable_tf.training import ClipEachNorm, ClipElementwise, FallBackWhereNonfinite, Trainer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = sorted(
    os.path.relpath(path, REPO) for path in glob.glob(os.path.join(REPO, "gin", "sine", "*.gin"))
)
LAYERS = ("base.gin", "quick.gin", "outliers.gin")  # layered on a method, not one alone
METHOD_CONFIGS = [c for c in CONFIGS if os.path.basename(c) not in LAYERS]
MACROS = ("NUM_STEPS", "CONTEXT_DIM", "NUM_SUPPORT", "SEED")


def test_the_expected_configs_exist():
    names = {os.path.basename(c) for c in METHOD_CONFIGS}
    for method in ("maml", "cavia", "simviable", "relviable"):
        assert {f"{method}.gin", f"{method}_vark.gin"} <= names
    for method in ("attviable", "maml_simviable", "maml_relviable"):  # beyond the paper
        assert {f"{method}.gin", f"{method}_vark.gin"} <= names


#: The options results pages show as rows of their own, by config suffix: the HParams
#: column that says so, and its value.
VARIANTS = {
    "_huber": ("inner_task_loss", "huber"),
    "_absolute": ("inner_task_loss", "absolute_error"),
    "_agreement": ("gradient_agreement", True),
    "_loss_mean": ("task_loss_feature", "mean"),
    "_loss_both": ("task_loss_feature", "both"),
    "_set_readout": ("readout", "set"),
    "_5steps": ("inner_steps", 5),
}


@pytest.mark.parametrize("config", METHOD_CONFIGS)
def test_config_parses_defines_macros_and_builds(config, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    parse_gin([config], [])
    for macro in MACROS:
        gin.query_parameter(f"%{macro}")  # raises if undefined
    trainer = Trainer(model_dir=str(tmp_path))
    name = os.path.basename(config).removesuffix(".gin")
    # A variant's config sets one option of its method's: the hparams say which.
    for suffix, (hparam, value) in VARIANTS.items():
        if name.endswith(suffix):
            assert trainer.learner.hparams()[hparam] == value
            name = name.removesuffix(suffix)
    activation = name.rsplit("_", 1)[-1] if name.endswith(("_relu", "_tanh")) else None
    expected = name.removesuffix(f"_{activation}").removesuffix("_vark")
    assert trainer.learner.method_name == expected
    assert trainer.num_steps == 50_000 and trainer.meta_batch_size == 25
    assert trainer.learner.network.init == "torch"  # docs/method.md §3.1, every config
    if activation:
        assert trainer.learner.loss_network.activation.__name__ == activation
        assert trainer.learner.loss_network.init == "torch"
    if "_vark" in name:
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


def test_the_outliers_config_layers_on_a_method(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    parse_gin(["gin/sine/cavia.gin", "gin/sine/outliers.gin"], ["OUTLIERS=3"])
    trainer = Trainer(model_dir=str(tmp_path))
    assert trainer.tasks.hparams()["outliers"] == 3 and trainer.tasks.noise_std == 0.0


def test_activation_configs_change_only_the_activation(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    for method in ("relviable", "simviable"):
        for variant in ("", "_vark"):
            configs = {}
            for activation in ("relu", "tanh"):
                parse_gin([f"gin/sine/{method}{variant}_{activation}.gin"], [])
                configs[activation] = gin.config_str()
                trainer = Trainer(model_dir=str(tmp_path / f"{method}{variant}_{activation}"))
                assert trainer.learner.loss_network.activation.__name__ == activation
            relu, tanh = (set(c.splitlines()) for c in configs.values())
            assert {line for line in relu ^ tanh if not line.startswith("#")} == {
                f"{type(trainer.learner.loss_network).__name__}.activation = '{a}'"
                for a in ("relu", "tanh")
            }


def test_keras_init_is_one_macro_away(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    parse_gin(["gin/sine/relviable.gin"], ["INIT='keras'"])
    trainer = Trainer(model_dir=str(tmp_path))
    assert trainer.learner.network.init == trainer.learner.loss_network.init == "keras"
    assert not any(v.numpy().any() for v in trainer.learner.variables if "bias" in v.path)


def test_a_learner_whose_task_loss_does_not_fit_the_tasks_is_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    parse_gin(["gin/sine/cavia.gin"], ["CAVIA.task_loss='cross_entropy'"])
    with pytest.raises(ValueError, match=r"does not fit SineTasks.*CAVIA.task_loss = 'mse'"):
        Trainer(model_dir=str(tmp_path))


def test_the_sine_configs_chain_clipping_adam_and_its_staircase(tmp_path, monkeypatch):
    """The paper's meta-optimizer as one chain: the meta-gradient clipped elementwise at
    10, then Adam at 1e-3 x 0.9 every 5,000; Adam's own settings bind in gin."""
    monkeypatch.chdir(REPO)
    parse_gin(["gin/sine/cavia.gin"], ["keras.optimizers.Adam.epsilon = 1e-8"])
    trainer = Trainer(model_dir=str(tmp_path))
    assert trainer.chain.transforms == (ClipElementwise(10.0),)
    assert isinstance(trainer.optimizer, keras.optimizers.Adam)
    assert trainer.optimizer.epsilon == 1e-8
    rates = [float(trainer.lr_schedule(step)) for step in (0, 4999, 5000, 10000)]
    np.testing.assert_allclose(rates, [1e-3, 1e-3, 9e-4, 8.1e-4], rtol=1e-6)


def test_leo_chains_its_guard_after_both_clips(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    parse_gin(["gin/classification/leo.gin"], [])
    chain = gin.get_bindings("OptimizerChain")
    assert [evaluate_reference(r) for r in chain["transforms"]] == [
        ClipElementwise(0.1),
        ClipEachNorm(0.1),
        FallBackWhereNonfinite(penalty_weight=1e-4),
    ]


@pytest.mark.parametrize(
    "binding",
    [
        "Trainer.clip_value = 10.0",
        "Trainer.learning_rate = 0.01",
        "Trainer.eval_every = 100",
        "PredictionNetwork.skip_inputs = True",
    ],
)
def test_a_removed_binding_fails_with_one_line_naming_it(binding, tmp_path, monkeypatch):
    """Settings that parts or specs replaced are gone: a config binding one (in a file
    or as --gin_param) gets gin's refusal, one line naming the binding."""
    monkeypatch.chdir(REPO)
    name = binding.split(" ")[0].split(".")[1]
    old = tmp_path / "old.gin"
    old.write_text(f"include '{os.path.join(REPO, 'gin/sine/cavia.gin')}'\n{binding}\n")
    for files, params in (([str(old)], []), (["gin/sine/cavia.gin"], [binding])):
        with pytest.raises(UsageError) as info:
            parse_gin(files, params)
        message = str(info.value)
        assert "\n" not in message and name in message, message


@pytest.mark.parametrize("transform", [ClipElementwise, ClipEachNorm])
@pytest.mark.parametrize("limit", [0.0, -1.0])
def test_a_clip_limit_must_be_positive(transform, limit):
    with pytest.raises(ValueError, match=rf"{transform.__name__}.limit must be > 0, got {limit}"):
        transform(limit)
