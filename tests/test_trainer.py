"""Meta-training: exact resume after a kill, non-finite losses, early stopping."""

import dataclasses
import json
import os
import pickle
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
from conftest import checkpoint_values
from tolerances import assert_within_ulps

from viable_tf.cli import train as train_cli
from viable_tf.learners import CAVIA, VIABLE
from viable_tf.networks import RelationLossNetwork
from viable_tf.tasks import SineTasks
from viable_tf.training import (
    ClipElementwise,
    EvaluationSpec,
    NonFiniteLossError,
    OptimizerChain,
    PerformanceSpec,
    StaircaseDecay,
    Trainer,
)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


EVALUATION = EvaluationSpec(eval_every=100, figure_every=0)
#: The trainer's mechanics on TensorFlow's kernels: compiling each test's meta-update with
#: XLA took about 5 s more a test and tests nothing here. XLA's path is the shipped sine
#: configs' (the killed-run resume below, tests/test_cli.py) and jit_compile='auto''s.
PERFORMANCE = PerformanceSpec(steps_per_call=50, jit_compile=False)


def _trainer(model_dir, **kwargs):
    defaults = {
        "tasks": SineTasks(),
        "learner": CAVIA,
        "num_steps": 200,
        "evaluation": EVALUATION,
        "performance": PERFORMANCE,
        "show_progress": False,
    }
    return Trainer(model_dir=str(model_dir), **{**defaults, **kwargs})


@pytest.mark.slow
def test_checkpoint_holds_every_weight_and_optimizer_slot(tmp_path):
    trainer = _trainer(tmp_path, learner=lambda **kw: VIABLE(**kw))
    trainer.train()
    values = checkpoint_values(trainer.checkpoints.latest.latest_checkpoint)
    # theta, psi, two Adam moments each, iterations, learning rate; step + 4 early-stopping.
    assert len(values) == 3 * len(trainer.variables) + 2 + 5
    fresh = _trainer(tmp_path, learner=lambda **kw: VIABLE(**kw), seed=123)
    assert fresh.restore() == 200
    for a, b in zip(fresh.learner.trainable_variables, trainer.variables, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert int(fresh.optimizer.iterations.numpy()) == 200


def _train_argv(model_dir):
    return [
        "--gin_file=sine/relviable_relu.gin",  # the mechanics, at the cheaper activation
        "--gin_param=NUM_STEPS=300",
        "--gin_param=EvaluationSpec.eval_every=50",
        "--gin_param=PerformanceSpec.steps_per_call=5",
        "--gin_param=EvaluationSpec.figure_every=150",
        "--gin_param=Trainer.show_progress=False",
        "--gin_param=test_evaluator.num_tasks=100",
        f"--model_dir={model_dir}",
    ]


def _train_command(model_dir):
    return [sys.executable, "-m", "viable_tf.cli.train", *_train_argv(model_dir)]


@pytest.mark.slow
def test_killed_run_resumes_to_the_same_state_as_an_uninterrupted_one(tmp_path, run_cli):
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    # The uninterrupted run in this process (the same command's main): what a run of
    # that command gives does not depend on the process it runs in.
    code, out = run_cli(train_cli, _train_argv(straight))
    assert code == 0, out.err[-2000:]

    process = subprocess.Popen(
        _train_command(killed),
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:  # generous: import, XLA compilation and 100 relVIABLE steps on a busy machine
        deadline = time.monotonic() + 600
        while not (killed / "checkpoints" / "ckpt-100.index").exists():
            assert process.poll() is None, "the run ended before the kill"
            assert time.monotonic() < deadline, "no checkpoint within 600 s"
            time.sleep(0.02)
        process.send_signal(signal.SIGKILL)  # mid-run: between checkpoints
    finally:
        process.kill()
        process.wait()
    latest = tf.train.latest_checkpoint(str(killed / "checkpoints"))
    assert latest is not None and int(latest.rsplit("-", 1)[1]) < 300
    assert not (killed / "results.json").exists()

    # The same command again resumes it; in this process too (its main, as above).
    code, out = run_cli(train_cli, _train_argv(killed))
    assert code == 0, out.err[-2000:]
    assert "resuming from" in out.out + out.err

    final_straight = checkpoint_values(str(straight / "checkpoints" / "ckpt-300"))
    final_killed = checkpoint_values(str(killed / "checkpoints" / "ckpt-300"))
    assert final_straight.keys() == final_killed.keys()
    for name, value in final_straight.items():
        np.testing.assert_array_equal(final_killed[name], value, err_msg=name)
    a = json.loads((straight / "results.json").read_text())
    b = json.loads((killed / "results.json").read_text())
    for key in ("mean", "ci95", "checkpoint_step", "best_validation_mse", "steps_trained"):
        assert a[key] == b[key], key


def test_non_finite_meta_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path):
    good = _trainer(tmp_path, num_steps=100)
    good.train()
    saved = checkpoint_values(good.checkpoints.latest.latest_checkpoint)

    exploding = _trainer(
        tmp_path,
        num_steps=300,
        optimizer=OptimizerChain(transforms=(), schedule=StaircaseDecay(learning_rate=1e30)),
    )
    with pytest.raises(NonFiniteLossError, match=r"at meta-update 10[1-9].*ckpt-100 is kept"):
        exploding.train()
    assert exploding.checkpoints.latest.latest_checkpoint.endswith("ckpt-100")
    after = checkpoint_values(exploding.checkpoints.latest.latest_checkpoint)
    for name, value in saved.items():
        np.testing.assert_array_equal(after[name], value)


def test_a_record_naming_a_missing_checkpoint_stops_instead_of_starting_over(tmp_path):
    _trainer(tmp_path, num_steps=100).train()
    checkpoints = tmp_path / "checkpoints"
    for path in checkpoints.glob("ckpt-100.*"):
        path.unlink()  # the record still names ckpt-100
    with pytest.raises(FileNotFoundError, match=r"names 'ckpt-100', whose files are missing"):
        _trainer(tmp_path, num_steps=200).train()
    assert not list(checkpoints.glob("ckpt-200.*"))  # nothing trained over the old run


def test_early_stopping_keeps_the_best_checkpoint_and_stays_stopped(tmp_path):
    # A learning rate this small changes nothing: no validation after the first improves.
    slow = {
        "optimizer": OptimizerChain(schedule=StaircaseDecay(learning_rate=1e-30)),
        "evaluation": dataclasses.replace(EVALUATION, patience=2),
    }
    trainer = _trainer(tmp_path, num_steps=1000, **slow)
    trainer.train()
    assert int(trainer.step.numpy()) == 300  # best at 100, no gain at 200 and 300
    assert int(trainer.early_stopping.best_step.numpy()) == 100
    assert trainer.restore_best() == 100
    again = _trainer(tmp_path, num_steps=1000, **slow)
    again.train()
    assert int(again.step.numpy()) == 300


@pytest.mark.slow
def test_summaries_and_operative_config_are_written(tmp_path):
    trainer = _trainer(
        tmp_path, learner=lambda **kw: VIABLE(loss_network=RelationLossNetwork, **kw)
    )
    trainer.figure_every = 100
    trainer.train()
    tags = set()
    for name in os.listdir(tmp_path):
        if name.startswith("events"):
            for event in tf.compat.v1.train.summary_iterator(str(tmp_path / name)):
                tags.update(v.tag for v in event.summary.value)
    assert {
        "train/meta_loss",
        "train/inner_loss_pre",
        "train/learning_rate",
        "validation/mse",
        "validation/inner_loss_pre",
        "validation/inner_loss_post",
        "adapted_fits",
        "operative_config",
    } <= tags
    assert (tmp_path / "operative_config.gin").exists()


def test_learning_rate_schedule_is_staircase_decay():
    trainer = _trainer("/tmp/unused-viable-schedule")
    rates = [float(trainer.lr_schedule(step)) for step in (0, 4999, 5000, 10000)]
    np.testing.assert_allclose(rates, [1e-3, 1e-3, 9e-4, 8.1e-4], rtol=1e-6)


@pytest.mark.slow
def test_load_run_restores_learner_and_tasks_without_a_trainer(tmp_path, monkeypatch):
    from viable_tf.config import load_run, parse
    from viable_tf.training import experiment

    parse(
        ["sine/simviable.gin"],
        [
            "NUM_STEPS=100",
            "EvaluationSpec.eval_every=50",
            "Trainer.show_progress=False",
            "test_evaluator.num_tasks=20",
            "CONTEXT_DIM=3",
            "SEED=4",
        ],
    )
    record = experiment.train_and_evaluate(str(tmp_path))
    best = checkpoint_values(tf.train.latest_checkpoint(str(tmp_path / "best")))
    # restore=False: the weights the trainer started from (same seed, same draw).
    started = [v.numpy() for v in Trainer(model_dir=str(tmp_path / "fresh")).learner.weights]
    initial = load_run(str(tmp_path), restore=False)
    assert initial.checkpoint_step == 0
    assert started and len(initial.learner.weights) == len(started)
    for value, expected in zip(initial.learner.weights, started, strict=True):
        np.testing.assert_array_equal(value.numpy(), expected)

    def no_trainer(*args, **kwargs):
        raise AssertionError("load_run must not build a Trainer")

    monkeypatch.setattr(Trainer, "__init__", no_trainer)
    run = load_run(str(tmp_path))
    assert run.learner.method_name == "simviable" and run.learner.context_dim == 3
    assert isinstance(run.tasks, SineTasks) and run.checkpoint_step == record["checkpoint_step"]
    assert run.trainer_settings == {"seed": 4, "num_steps": 100, "meta_batch_size": 25}
    restored = {name: value for name, value in best.items() if name.startswith("learner/")}
    assert restored
    weights = {v.numpy().tobytes() for v in run.learner.weights}
    assert all(value.tobytes() in weights for value in restored.values())
    again, _ = experiment.evaluate_loaded(run)
    assert {k: again[k] for k in ("mean", "ci95", "checkpoint_step", "steps_trained", "seed")} == {
        k: record[k] for k in ("mean", "ci95", "checkpoint_step", "steps_trained", "seed")
    }
    with pytest.raises(FileNotFoundError, match="is not a trained run"):
        load_run(str(tmp_path / "nothing"))


def test_meta_gradients_are_clipped_elementwise_as_numpy_clips_the_tape(tmp_path):
    from viable_tf.ops import seed_for

    bound = 0.01
    trainer = _trainer(
        tmp_path,
        learner=lambda **kw: VIABLE(loss_network=RelationLossNetwork, **kw),
        optimizer=OptimizerChain(transforms=(ClipElementwise(bound),)),
    )
    batch = trainer.tasks.sample(seed_for(trainer.seed, trainer.step), trainer.meta_batch_size)
    with tf.GradientTape() as tape:
        loss, _ = trainer.learner.meta_loss(batch)
    grads = tape.gradient(loss, trainer.variables)  # None: a ReLU loss network's biases
    raw = [
        np.zeros(v.shape) if g is None else g.numpy()
        for g, v in zip(grads, trainer.variables, strict=True)
    ]
    _, _, clipped = trainer.meta_gradients()
    assert sum(int(np.sum(np.abs(g) > bound)) for g in raw) > 100  # clipping is active
    for expected, got in zip(raw, clipped, strict=True):
        np.testing.assert_allclose(got.numpy(), np.clip(expected, -bound, bound), atol=1e-7)


@pytest.mark.slow
def test_tasks_drawn_ahead_are_each_updates_own_tasks(tmp_path):
    """Drawing the tasks of many updates in one go changes nothing but the speed: without
    XLA (whose fusion may round differently) the weights are bit for bit the same."""
    finals = []
    for ahead in (1, 3, None):
        performance = dataclasses.replace(PERFORMANCE, draw_ahead=ahead, jit_compile=False)
        trainer = _trainer(tmp_path / str(ahead), performance=performance)
        ran = trainer.train_chunk(tf.constant(7))[0]
        ran += trainer.train_chunk(tf.constant(5))[0]
        assert int(ran) == 12 and int(trainer.step.numpy()) == 12
        finals.append([v.numpy() for v in trainer.variables])
    for other in finals[1:]:
        for a, b in zip(finals[0], other, strict=True):
            np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match=r"PerformanceSpec\.draw_ahead must be >= 1"):
        PerformanceSpec(draw_ahead=0)


@pytest.mark.slow
@pytest.mark.float_sensitive
def test_meta_gradient_in_passes_is_the_whole_batch_one(tmp_path):
    """`tasks_per_pass` changes the memory, not the update: relVIABLE's meta-gradient over
    6 tasks in passes of 4 + 2 equals the one-pass one (to rounding), with and without
    XLA (the mirrored check runs them inside the training loop)."""
    relviable = lambda **kw: VIABLE(loss_network=RelationLossNetwork, **kw)  # noqa: E731
    common = {
        "learner": relviable,
        "meta_batch_size": 6,
        "optimizer": OptimizerChain(transforms=()),
    }
    whole = _trainer(tmp_path / "whole", **common)
    loss, inner, grads = whole.meta_gradients()
    passes = dataclasses.replace(PERFORMANCE, tasks_per_pass=4)
    trainer = _trainer(tmp_path / "passes", performance=passes, **common)
    # k = 16 ulps of the losses, 128 of each variable's largest gradient entry: two
    # passes sum the tasks in another order, and XLA fuses otherwise than the eager
    # one-pass reference (measured at most 1.5 and 14.6 on three float paths of an AMD
    # EPYC, docs/TESTING.md).
    for xla in (False, True):
        got = tf.function(trainer.meta_gradients, jit_compile=xla, autograph=False)()
        assert_within_ulps(float(got[0]), float(loss), 16, what=f"loss, xla={xla}")
        assert_within_ulps(float(got[1]), float(inner), 16, what=f"inner loss, xla={xla}")
        for i, (expected, actual) in enumerate(zip(grads, got[2], strict=True)):
            assert_within_ulps(actual, expected, 128, what=f"gradient {i}, xla={xla}")
    with pytest.raises(ValueError, match=r"PerformanceSpec\.tasks_per_pass must be >= 1"):
        PerformanceSpec(tasks_per_pass=0)


def test_a_checkpoint_series_is_the_managers_with_the_wall_clock_beside_it(tmp_path):
    """viable-train's checkpoints are tf.train.CheckpointManager's (the newest kept, the
    record `latest_checkpoint` reads, relative names so a moved run still resumes), with
    the run's wall-clock at each save recorded beside them."""
    import shutil

    from viable_tf.training.checkpoints import CheckpointSeries, WallClock

    def fresh(value):
        return tf.train.Checkpoint(
            w=tf.Variable(tf.fill([3, 2], value)), step=tf.Variable(7, dtype=tf.int64)
        )

    clock = WallClock()
    clock.before = 100.0
    series = CheckpointSeries(fresh(1.5), str(tmp_path / "run"), max_to_keep=2, clock=clock)
    for number in (100, 200, 300):
        series.save(checkpoint_number=number)
    assert series.latest_checkpoint == str(tmp_path / "run" / "ckpt-300")
    assert tf.train.latest_checkpoint(str(tmp_path / "run")) == series.latest_checkpoint
    kept = sorted(n for n in os.listdir(tmp_path / "run") if n.endswith(".index"))
    assert kept == ["ckpt-200.index", "ckpt-300.index"]
    recorded = WallClock.read(str(tmp_path / "run"))
    assert set(recorded) == {"100", "200", "300"} and recorded["300"] >= 100.0
    back = fresh(0.0)
    back.restore(series.latest_checkpoint).assert_consumed()
    np.testing.assert_array_equal(back.w.numpy(), np.full([3, 2], 1.5, np.float32))
    shutil.move(str(tmp_path / "run"), str(tmp_path / "moved"))
    moved = str(tmp_path / "moved")
    assert tf.train.latest_checkpoint(moved) == os.path.join(moved, "ckpt-300")
    again = CheckpointSeries(fresh(2.0), moved, max_to_keep=2)
    again.save(checkpoint_number=400)
    assert again.latest_checkpoint == os.path.join(moved, "ckpt-400")
    assert not any(name.startswith("ckpt-200") for name in os.listdir(moved))
    with pytest.raises(ValueError, match="max_to_keep must be >= 1"):
        CheckpointSeries(fresh(0.0), moved, max_to_keep=0)


@pytest.mark.slow
def test_jit_compile_auto_measures_both_paths_at_the_first_chunk_and_says_which(tmp_path, capsys):
    """'auto' costs nothing at construction; the first chunk measures a meta-gradient with
    XLA and on TensorFlow's kernels, logs both times and the choice, and trains on it."""
    trainer = _trainer(tmp_path, performance=dataclasses.replace(PERFORMANCE, jit_compile="auto"))
    assert trainer.jit_compile == "auto" and "jit_compile" not in capsys.readouterr().err
    ran = int(trainer.train_chunk(tf.constant(2))[0])
    err = capsys.readouterr().err.splitlines()
    (line,) = [text for text in err if "jit_compile='auto'" in text]
    assert ran == 2 and trainer.jit_compile in (True, False)
    assert re.search(r"took [\d.]+ s compiled by XLA and [\d.]+ s on TensorFlow's kernels", line)
    assert line.endswith("with XLA" if trainer.jit_compile else "on TensorFlow's kernels")
    assert trainer.train_chunk is trainer.train_chunk  # built once
    with pytest.raises(ValueError, match=r"jit_compile must be True, False or 'auto', got 'yes'"):
        PerformanceSpec(jit_compile="yes")


@pytest.mark.slow
def test_summary_points_every_summary_every_updates_within_a_long_call(tmp_path):
    """One compiled call runs up to the validation, yet the training curves keep a point
    every `summary_every` updates (and one at the end), each the mean of its updates."""
    trainer = _trainer(
        tmp_path,
        num_steps=250,
        evaluation=dataclasses.replace(EVALUATION, eval_every=250),
        performance=PerformanceSpec(steps_per_call=500),
    )
    trainer.train()
    # train() again on the same trainer: its summary graph calls were traced with its
    # writer, which it keeps, so the second run's points land in the same file.
    trainer.num_steps = 400
    trainer.train()
    points = {}
    for name in os.listdir(tmp_path):
        if name.startswith("events"):
            for event in tf.compat.v1.train.summary_iterator(str(tmp_path / name)):
                for value in event.summary.value:
                    points.setdefault(value.tag, []).append(event.step)
    assert points["train/meta_loss"] == [100, 200, 250, 300, 400]
    assert points["train/learning_rate"] == [100, 200, 250, 300, 400]
    assert points["validation/mse"] == [250, 400]


def test_a_figure_drawn_again_with_new_data_has_the_pixels_of_a_fresh_one():
    """adapted_fits keeps one figure per panel count and replaces its data: what it draws
    after other data (other scales, limits, title) equals a figure built anew."""
    import io

    from matplotlib import image

    from viable_tf import plots

    rng = np.random.default_rng(0)
    x = np.linspace(-5, 5, 100)

    def data(scale, title):
        curves = [scale * rng.normal(size=(3, 100, 1)) for _ in range(3)]
        support = [rng.uniform(-5, 5, (3, 10, 1)), scale * rng.normal(size=(3, 10, 1))]
        return dict(zip(("truth", "unadapted", "adapted"), curves, strict=True)) | {
            "x": x,
            "support_x": support[0],
            "support_y": support[1],
            "title": title,
        }

    def pixels(png):
        return image.imread(io.BytesIO(png), format="png")

    first, second = data(4.0, "step 5000"), data(0.3, "step 10000")
    plots.adapted_fits(**first)
    again = pixels(plots.adapted_fits(**second))
    fresh = pixels(plots._FitsFigure(3).draw(**second))
    assert again.shape == fresh.shape and np.array_equal(again, fresh)
    assert not np.array_equal(again, pixels(plots._FitsFigure(3).draw(**first)))


def test_figure_worker_draws_in_a_child_process_and_reports_its_errors():
    import functools

    from viable_tf import plots
    from viable_tf.figure_worker import FigureWorker

    curve = np.zeros([1, 5, 1], np.float32)
    draw = functools.partial(
        plots.adapted_fits,
        x=np.linspace(-5, 5, 5),
        truth=curve,
        unadapted=curve,
        adapted=curve,
        support_x=curve[:, :2],
        support_y=curve[:, :2],
        title="t",
    )
    with FigureWorker() as worker:
        worker.submit(("fits", 5), draw)
        worker.submit(("fits", 10), draw)
        drawn = worker.wait()
        assert [key for key, _ in drawn] == [("fits", 5), ("fits", 10)]
        assert all(png.startswith(b"\x89PNG") for _, png in drawn)
        assert worker.done() == []
        # it draws at the lowest priority, in the training's idle moments
        assert os.getpriority(os.PRIO_PROCESS, worker._process.pid) == 19
        worker.submit(("broken", 15), functools.partial(plots.adapted_fits, x=None))
        with pytest.raises(RuntimeError, match=r"'broken', 15.*TypeError"):
            worker.wait()
        with pytest.raises((AttributeError, pickle.PicklingError)):  # a lambda: not even pickled
            worker.submit(("lambda", 20), lambda: b"")
    # and a function the child cannot import is reported, not a crash
    with FigureWorker() as worker:
        worker.submit(("local", 25), _Local())
        with pytest.raises(RuntimeError, match=r"'local', 25.*ModuleNotFoundError"):
            worker.wait()


class _Local:  # defined in a test module, which the child cannot import
    def __call__(self):
        return b""


def test_a_runs_own_trigger_runs_at_its_interval_after_the_periodic_jobs(tmp_path):
    from viable_tf.training.triggers import FunctionTrigger, chunk_end

    trainer = _trainer(tmp_path, num_steps=200)
    seen = []

    def record(step):
        seen.append(
            (step, int(trainer.step.numpy()), int(trainer.early_stopping.best_step.numpy()))
        )

    trainer.train(triggers=[FunctionTrigger(40, record)])
    # Chunks end at every multiple of 40 as well as of 100, and at the last step; the
    # first validation (at 100, the best so far) comes before the trigger at 120.
    assert [(s, at) for s, at, _ in seen] == [
        (40, 40),
        (80, 80),
        (120, 120),
        (160, 160),
        (200, 200),
    ]
    assert [best for *_, best in seen[:3]] == [-1, -1, 100]
    assert chunk_end(0, 200, 50, [FunctionTrigger(100, print), FunctionTrigger(30, print)]) == 30
    assert chunk_end(190, 200, 50, [FunctionTrigger(100, print)]) == 200
    assert chunk_end(120, 1000, 50, [FunctionTrigger(500, print)]) == 170
