"""The command-line tools: a real smoke run, and one clear line for each bad input."""

import importlib.metadata
import json
import os
import subprocess
import sys
import tomllib

import numpy as np
import pytest
import tensorflow as tf

from lab.meta_gradient_noise import noise
from lab.outlier_influence import influences
from viable_tf.cli import evaluate as eval_cli
from viable_tf.cli import export as export_cli
from viable_tf.cli import train as train_cli

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMOKE = [
    "--gin_file=gin/sine/simviable.gin",
    "--gin_file=gin/sine/quick.gin",
    "--gin_param=NUM_STEPS=300",
    "--gin_param=EvaluationSpec.eval_every=100",
    "--gin_param=EvaluationSpec.figure_every=100",
    "--gin_param=test_evaluator.num_tasks=200",
]


METAL_SMOKE = [
    "--gin_file=gin/sine/metal_cavia.gin",
    "--gin_file=gin/sine/quick.gin",
    "--gin_param=NUM_STEPS=4",
    "--gin_param=EvaluationSpec.eval_every=4",
    "--gin_param=EvaluationSpec.figure_every=0",
    "--gin_param=test_evaluator.num_tasks=10",
    "--gin_param=PerformanceSpec.jit_compile=False",
]


def _console_script(name):
    return os.path.join(os.path.dirname(sys.executable), name)


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """One real `viable-train` run through its console script."""
    model_dir = tmp_path_factory.mktemp("run")
    result = subprocess.run(
        [_console_script("viable-train"), *SMOKE, f"--model_dir={model_dir}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return model_dir, result


@pytest.mark.slow
def test_train_writes_results_config_events_and_checkpoints(trained_run):
    model_dir, result = trained_run
    record = json.loads((model_dir / "results.json").read_text())
    assert record["method"] == "simviable"
    assert record["metric"] == "mse"
    assert record["num_tasks"] == 200 and record["num_support"] == 10
    assert record["mean"] > 0 and record["ci95"] > 0
    assert record["steps_trained"] == 300
    config = (model_dir / "operative_config.gin").read_text()
    assert "Trainer.num_steps = %NUM_STEPS" in config and "NUM_STEPS = 300" in config
    assert "test_evaluator.num_tasks = 200" in config
    assert any(name.startswith("events.out.tfevents") for name in os.listdir(model_dir))
    assert (model_dir / "best").is_dir() and (model_dir / "checkpoints").is_dir()
    assert "tensorboard --logdir" in result.stdout
    assert "test MSE" in result.stdout
    best = record["checkpoint_step"]
    assert f"the checkpoint of meta-update {best:,} of 300 trained)" in result.stdout


@pytest.mark.slow
def test_eval_reproduces_the_training_number_and_takes_any_k(trained_run, run_cli):
    model_dir, _ = trained_run
    record = json.loads((model_dir / "results.json").read_text())
    result = subprocess.run(
        [_console_script("viable-eval"), f"--model_dir={model_dir}"],
        capture_output=True,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    again = json.loads(result.stdout)
    assert again["mean"] == record["mean"] and again["ci95"] == record["ci95"]
    assert json.loads((model_dir / "eval_k10.json").read_text()) == again
    code, out = run_cli(eval_cli, [f"--model_dir={model_dir}", "--num_support=0"])
    assert code == 0, out.err[-2000:]
    zero_shot = json.loads(out.out)
    assert zero_shot["num_support"] == 0
    assert zero_shot["mean"] > record["mean"]  # adapting on 10 points helps


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--gin_file=gin/sine/nope.gin"], "gin file not found: gin/sine/nope.gin"),
        ([], "no --gin_file given"),
        (["--gin_file=gin/sine/cavia.gin", "--gin_param=NUM_STPES=3"], "unknown macro"),
        (
            ["--gin_file=gin/sine/cavia.gin", "--gin_param=Trainer.num_stepz=3"],
            "doesn't have a parameter named 'num_stepz'",
        ),
        (["--gin_file=gin/sine/cavia.gin", "--gin_param=Trainr.seed=3"], "No configurable"),
        (["--gin_file=gin/sine/cavia.gin", "--gin_param=Trainer.seed=("], "bad gin"),
        (["--gin_file=gin/sine/cavia.gin", "--gin_param=MIN_SUPPORT=30"], "min_support=30"),
        (["--gin_file=gin/sine/cavia.gin", "--gin_param=CAVIA.inner_lr=-1"], "inner_lr"),
    ],
)
def test_train_bad_input_gets_one_clear_line(argv, message, tmp_path, monkeypatch, run_cli):
    monkeypatch.chdir(REPO)
    code, out = run_cli(train_cli, [*argv, f"--model_dir={tmp_path}/run"])
    assert code == 2
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("viable-train: error: "), out.err
    assert message in lines[0]
    assert not os.path.exists(tmp_path / "run" / "checkpoints")


def test_eval_bad_input_gets_one_clear_line(trained_run, tmp_path, run_cli):
    model_dir, _ = trained_run
    cases = [
        ([f"--model_dir={tmp_path}"], "is not a trained run"),
        ([f"--model_dir={model_dir}", "--num_support=11"], "larger than the padded support"),
        ([f"--model_dir={model_dir}", "--num_support=-1"], "--num_support must be >= 0"),
    ]
    (tmp_path / "operative_config.gin").write_text("")  # a config but no checkpoint
    cases.append(([f"--model_dir={tmp_path}"], "no checkpoint in"))
    os.remove(tmp_path / "operative_config.gin")
    for argv, message in cases:
        if message == "no checkpoint in":
            config = (model_dir / "operative_config.gin").read_text()
            (tmp_path / "operative_config.gin").write_text(config)
        code, out = run_cli(eval_cli, argv)
        assert code == 2, argv
        lines = out.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("viable-eval: error: "), out.err
        assert message in lines[0]


def test_non_finite_loss_is_one_line_naming_the_step(tmp_path, monkeypatch, run_cli):
    monkeypatch.chdir(REPO)
    argv = [
        "--gin_file=gin/sine/cavia.gin",
        "--gin_param=NUM_STEPS=50",
        "--gin_param=StaircaseDecay.learning_rate=1e30",
        "--gin_param=OptimizerChain.transforms=[]",
        "--gin_param=Trainer.show_progress=False",
        f"--model_dir={tmp_path}",
    ]
    code, out = run_cli(train_cli, argv)
    assert code == 1
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and "not finite" in lines[0] and "at meta-update" in lines[0]


@pytest.mark.slow
def test_export_writes_numbered_versions_of_the_best_checkpoint(trained_run, tmp_path, run_cli):
    model_dir, _ = trained_run
    argv = [f"--model_dir={model_dir}", f"--export_base={tmp_path}"]
    code, out = run_cli(export_cli, argv)
    assert code == 0 and f"{tmp_path}/1" in out.out, out.err[-2000:]
    # The next command names the viable-serve beside the interpreter that ran the export.
    (serve_line,) = [line for line in out.out.splitlines() if line.startswith("serve it:")]
    serve = serve_line.split()[2]
    assert os.path.samefile(serve, _console_script("viable-serve"))
    code, out = run_cli(export_cli, argv)
    assert code == 0 and f"{tmp_path}/2" in out.out, out.err[-2000:]
    with open(tmp_path / "1" / "assets.extra" / "viable_model.json") as f:
        description = json.load(f)
    assert description["method"] == "simviable"
    assert (
        description["evaluation"]["mean"]
        == json.loads((model_dir / "results.json").read_text())["mean"]
    )
    code, out = run_cli(export_cli, [*argv, "--version=1"])
    assert code == 2 and "exists" in out.err.strip().splitlines()[-1]


def test_only_a_learner_with_a_query_term_exports_without_one(trained_run, tmp_path, run_cli):
    model_dir, _ = trained_run
    argv = [f"--model_dir={model_dir}", f"--export_base={tmp_path}", "--without_query_term"]
    code, out = run_cli(export_cli, argv)
    assert code == 2 and out.err.strip().splitlines()[-1].endswith(
        "--without_query_term: simviable has no query term to leave out (its adaptation "
        "reads the support set alone)"
    )
    assert not os.listdir(tmp_path)


@pytest.mark.slow
def test_an_export_without_the_query_term_keeps_the_trained_weights_and_answers_each_query_alone(
    tmp_path, run_cli
):
    """MeTAL's query term adapts on the request's queries: exported without it, the
    learner keeps every trained weight but the query term's, and a query's answer is the
    same sent alone as among others (as it is not with the term: docs/metal.md)."""
    from viable_tf.config import load_run

    model_dir = tmp_path / "run"
    code, out = run_cli(train_cli, [*METAL_SMOKE, f"--model_dir={model_dir}"])
    assert code == 0, out.err[-2000:]
    base = tmp_path / "export"
    argv = [f"--model_dir={model_dir}", f"--export_base={base}", "--without_query_term"]
    code, out = run_cli(export_cli, argv)
    assert code == 0, out.err[-2000:]
    with open(base / "1" / "assets.extra" / "viable_model.json") as f:
        description = json.load(f)
    assert description["method"] == "metal_support_cavia"
    assert description["trained_as"]["method"] == "metal_cavia"
    assert description["checkpoint_step"] == 4
    # Without queries to read, CAVIA's context is the support set's alone: it is served.
    assert {"adapt", "predict"} <= set(description["signatures"])

    full = load_run(str(model_dir)).learner
    kept = load_run(str(model_dir), learner_options={"query_term": False}).learner
    left_out = {id(v) for v in full.query_network.variables}
    expected = [v for v in full.variables if id(v) not in left_out]
    assert left_out and len(expected) == len(kept.variables)
    for trained, exported in zip(expected, kept.variables, strict=True):
        np.testing.assert_array_equal(trained, exported)
    # A part the run did not train is refused, not left at its initial weights.
    with pytest.raises(ValueError, match=r"does not hold every weight of the learner built"):
        load_run(str(model_dir), learner_options={"learned_inner_lr": True})  # Meta-SGD's

    serve = tf.saved_model.load(str(base / "1")).signatures["serving_default"]
    rng = np.random.default_rng(3)
    x = rng.uniform(-5, 5, size=(2, 10, 1)).astype(np.float32)
    y = np.sin(x).astype(np.float32)
    query = rng.uniform(-5, 5, size=(2, 6, 1)).astype(np.float32)
    together = serve(support_x=x, support_y=y, query_x=query)["predictions"].numpy()
    alone = [
        serve(support_x=x, support_y=y, query_x=query[:, i : i + 1])["predictions"].numpy()
        for i in range(query.shape[1])
    ]
    np.testing.assert_allclose(np.concatenate(alone, axis=1), together, rtol=1e-5, atol=1e-6)
    # The learner as trained answers otherwise: its query term moves the context.
    mask = np.ones(x.shape[:2], bool)
    with_term = full.predict(full.adapt(x, y, mask, query_x=query), query).numpy()
    assert not np.allclose(with_term, together, rtol=1e-3, atol=1e-4)


def test_every_console_script_is_installed_and_names_a_main():
    """pyproject's [project.scripts], each an executable beside the interpreter whose
    entry point loads (the trained_run fixture runs one, viable-train, end to end)."""
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        scripts = tomllib.load(f)["project"]["scripts"]
    installed = {ep.name: ep for ep in importlib.metadata.entry_points(group="console_scripts")}
    assert "viable-export" in scripts and "viable-serve" in scripts
    for name, target in scripts.items():
        assert os.access(_console_script(name), os.X_OK), name
        assert installed[name].value == target, name
        assert callable(installed[name].load()), name


def test_next_commands_name_the_installation_that_ran_them(tmp_path, monkeypatch):
    """tool_command: the console script beside the running interpreter (relative when under
    the working directory), else the bare name for PATH."""
    from viable_tf.cli.common import tool_command

    elsewhere = tmp_path / "elsewhere" / "bin"
    elsewhere.mkdir(parents=True)
    (elsewhere / "viable-serve").write_text("#!/bin/sh\n")
    monkeypatch.setattr(sys, "executable", str(elsewhere / "python"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert tool_command("viable-serve") == str(elsewhere / "viable-serve")
    assert tool_command("tensorboard") == "tensorboard"  # none there: from PATH
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert tool_command("viable-serve") == os.path.join("bin", "viable-serve")


def test_the_outlier_influence_probe_reads_a_trained_run(trained_run):
    """lab/outlier_influence.py on a real run: every real point's leave-one-out
    influence, m outliers per task exactly, shares and MSEs in range."""
    model_dir, _ = trained_run
    found = influences(str(model_dir), outliers=2, num_tasks=20)
    assert found["outlier"].shape == (40,) and found["clean"].shape == (160,)
    assert found["expected_share"] == pytest.approx(0.2)
    assert np.all(found["outlier"] >= 0) and np.all(found["clean"] >= 0)
    assert found["clean"].max() > 0  # leaving a point out moves the adapted context
    assert np.all((found["share"] >= 0) & (found["share"] <= 1)) and found["share"].shape == (20,)
    assert found["mse"].shape == (20,) and np.all(found["mse"] > 0)


def test_the_meta_gradient_noise_probe_reads_a_trained_run(trained_run):
    """lab/meta_gradient_noise.py on a real simVIABLE run: both parts for every
    checkpoint, the mean of the batches' gradients as a direct computation gives it."""

    from viable_tf.config import load_run
    from viable_tf.ops import seed_for
    from viable_tf.training.meta_gradient import weighted_gradients

    model_dir, _ = trained_run
    entries = noise(str(model_dir), "best", batches=3, seed=5, gin_params=())
    assert len(entries) == 1 and entries[0]["step"] > 0
    stats = entries[0]["parts"]
    assert list(stats) == ["prediction", "loss network"]
    run = load_run(str(model_dir))
    learner = run.learner
    variables = list(learner.trainable_variables)
    size = run.trainer_settings["meta_batch_size"]
    grads, losses = [], []
    for i in range(3):
        loss, _, g = weighted_gradients(
            learner, variables, run.tasks.sample(seed_for(5, i), size), 1.0
        )
        grads.append(np.concatenate([t.numpy().ravel() for t in g]))
        losses.append(float(loss))
    mean = np.mean(grads, 0)
    own = {id(v) for v in learner.loss_network.trainable_variables}
    in_loss = np.concatenate([np.full(v.shape.num_elements(), id(v) in own) for v in variables])
    assert stats["loss network"]["mean_norm"] == pytest.approx(
        np.linalg.norm(mean[in_loss]), rel=1e-4
    )
    assert stats["prediction"]["mean_norm"] == pytest.approx(
        np.linalg.norm(mean[~in_loss]), rel=1e-4
    )
    assert entries[0]["query_loss"] == pytest.approx(np.mean(losses), rel=1e-4)
    for part in stats.values():
        assert part["norm"] > 0 and part["snr"] >= 0 and -1 <= part["cos"] <= 1
    # A checkpoint chosen by its meta-update; one the run does not keep is refused.
    step = entries[0]["step"]
    chosen = noise(str(model_dir), str(step), batches=3, seed=5, gin_params=())
    assert [entry["step"] for entry in chosen] == [step]
    assert chosen[0]["parts"] == entries[0]["parts"]
    with pytest.raises(FileNotFoundError, match="no checkpoint at meta-update 7"):
        noise(str(model_dir), "7", batches=3, seed=5, gin_params=())
