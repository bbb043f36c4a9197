"""Every sine gin config parses, defines the resizing macros, and builds its trainer.

(The classification configs are tested in test_classification.py.)"""

import glob
import os

import gin
import pytest

from viable_tf.cli.common import UsageError, parse_gin
from viable_tf.config import evaluate_reference
from viable_tf.networks import Normalize, SkipInputs
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


@pytest.mark.parametrize("config", METHOD_CONFIGS)
def test_config_parses_defines_macros_and_builds(config, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    parse_gin([config], [])
    for macro in MACROS:
        gin.query_parameter(f"%{macro}")  # raises if undefined
    trainer = Trainer(model_dir=str(tmp_path))
    name = os.path.basename(config).removesuffix(".gin")
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


def test_the_sine_configs_clip_the_meta_gradient_elementwise_at_10(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    parse_gin(["gin/sine/cavia.gin"], [])
    assert Trainer(model_dir=str(tmp_path)).gradient_transforms == (ClipElementwise(10.0),)


@pytest.mark.parametrize(
    ("retired", "expected"),
    [
        (["Trainer.clip_value = 10.0"], (ClipElementwise(10.0),)),
        (["Trainer.clip_value = None"], ()),
        (["Trainer.clip_norm = 0.5  # a comment"], (ClipElementwise(10.0), ClipEachNorm(0.5))),
        (
            [
                "Trainer.clip_value = 0.1",
                "Trainer.clip_norm = 0.1",
                "Trainer.fall_back_on_nonfinite = True",
            ],
            (ClipElementwise(0.1), ClipEachNorm(0.1), FallBackWhereNonfinite()),
        ),
        (["Trainer.fall_back_on_nonfinite = False"], (ClipElementwise(10.0),)),
    ],
)
def test_a_config_with_the_retired_clip_settings_reads_as_their_transforms(
    retired, expected, tmp_path, monkeypatch
):
    """An older run's operative config (or a user's config) binding Trainer.clip_value,
    clip_norm or fall_back_on_nonfinite is read as the gradient transforms they meant,
    in a file or as --gin_param, whatever the new config binds."""
    monkeypatch.chdir(REPO)
    old = tmp_path / "old.gin"
    cavia = os.path.join(REPO, "gin/sine/cavia.gin")
    old.write_text(f"include '{cavia}'\n" + "\n".join(retired) + "\n")
    parse_gin([str(old)], [])
    assert Trainer(model_dir=str(tmp_path / "a")).gradient_transforms == expected
    parse_gin(["gin/sine/cavia.gin"], retired)
    assert Trainer(model_dir=str(tmp_path / "b")).gradient_transforms == expected


def test_a_retired_clip_setting_bound_to_a_macro_is_one_line(monkeypatch):
    monkeypatch.chdir(REPO)
    with pytest.raises(
        UsageError, match=r"Trainer.clip_value = %SEED: a retired setting.*gradient_transforms"
    ):
        parse_gin(["gin/sine/cavia.gin"], ["Trainer.clip_value = %SEED"])


@pytest.mark.parametrize("transform", [ClipElementwise, ClipEachNorm])
@pytest.mark.parametrize("limit", [0.0, -1.0])
def test_a_clip_limit_must_be_positive(transform, limit):
    with pytest.raises(ValueError, match=rf"{transform.__name__}.limit must be > 0, got {limit}"):
        transform(limit)


@pytest.mark.parametrize(
    ("retired", "expected"),
    [
        (["skip_inputs = False", "normalize_features = False"], []),
        (["skip_inputs = True"], [SkipInputs()]),
        (["normalize_features = True", "skip_inputs = True"], [SkipInputs(), Normalize()]),
        (
            ["skip_inputs = True", "context_scales_inputs = True", "normalize_features = True"],
            [SkipInputs(context_scaled=True), Normalize()],
        ),
    ],
)
def test_a_config_with_the_retired_feature_flags_reads_as_their_parts(
    retired, expected, monkeypatch
):
    """PredictionNetwork's retired skip_inputs, normalize_features and
    context_scales_inputs (in an older run's operative config) read as the feature parts
    they meant, in their old order."""
    monkeypatch.chdir(REPO)
    parse_gin(
        ["gin/omniglot/cavia_proto_5way1shot.gin"],
        [f"PredictionNetwork.{line}" for line in retired],
    )
    bound = gin.query_parameter("PredictionNetwork.features")
    assert [evaluate_reference(reference) for reference in bound] == expected
