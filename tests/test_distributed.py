"""Distributed meta-training on a CPU-only machine: 2 logical devices, 2 local workers."""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
from conftest import checkpoint_values
from tolerances import assert_within_ulps

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONUNBUFFERED": "1"}


def _free_port() -> int:
    """A port free now; a worker binds it later, so another process may take it first:
    _start_workers notices and starts again on other ports."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


#: What a worker prints when its port was taken between _free_port and its own bind.
BIND_FAILED = "Could not start gRPC server"


def _train_command(model_dir, *params):
    return [
        sys.executable,
        "-m",
        "viable_tf.cli.train",
        "--gin_file=gin/sine/relviable_relu.gin",  # the mechanics, at the cheaper activation
        "--gin_param=Trainer.show_progress=False",
        "--gin_param=Trainer.figure_every=0",
        "--gin_param=test_evaluator.num_tasks=100",
        *(f"--gin_param={p}" for p in params),
        f"--model_dir={model_dir}",
    ]


@contextlib.contextmanager
def _workers(model_dir, *params, scratch=None):
    """Two local workers, killed on the way out whatever happened."""
    workers = _start_workers(model_dir, *params, scratch=scratch)
    try:
        yield workers
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
            worker.communicate()


def _start_workers(model_dir, *params, scratch=None, attempts=3):
    """Two local workers, each listening on its port; `scratch` is their TMPDIR (non-chief
    checkpoints go there). TensorFlow's gRPC server cannot share a port (no SO_REUSEPORT)
    nor take port 0 in a cluster spec, so the ports are picked free and, if another
    process took one before a worker bound it, both workers start again on new ones."""
    for _ in range(attempts):
        ports = [_free_port(), _free_port()]
        cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
        workers = []
        for index in range(2):
            config = {"cluster": cluster, "task": {"type": "worker", "index": index}}
            workers.append(
                subprocess.Popen(
                    _train_command(model_dir, "STRATEGY='multi_worker'", *params),
                    cwd=REPO,
                    env={
                        **ENV,
                        "TF_CONFIG": json.dumps(config),
                        **({"TMPDIR": str(scratch)} if scratch else {}),
                    },
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        deadline = time.monotonic() + 300
        while not all(_listening(port) for port in ports):
            codes = [worker.poll() for worker in workers]
            if all(code == 0 for code in codes):  # done already: both had listened
                return workers
            if any(code not in (None, 0) for code in codes) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        else:
            return workers
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
        errors = [worker.communicate()[1] for worker in workers]
        if not any(BIND_FAILED in err for err in errors):
            raise AssertionError(
                "a worker stopped before both listened: " + "\n".join(e[-2000:] for e in errors)
            )
    raise AssertionError(f"no two free ports held for {attempts} attempts")


@pytest.fixture(scope="module")
def mirrored_checks():
    """The mirrored-vs-single comparison at both clipping bounds, in one process."""
    return _distributed_check(*CLIPS)


def _distributed_check(*args):
    result = subprocess.run(
        [sys.executable, os.path.join(REPO, "tests", "distributed_check.py"), *args],
        cwd=REPO,
        env=ENV,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


CLIPS = ("10", "0.02")


#: Tolerances between one device (XLA) and 2 mirrored replicas (TensorFlow's kernels,
#: the gradient summed over the replicas), in float32 ulps (tests/tolerances.py): k
#: ulps of the loss, of each variable's largest gradient entry, and of each weight's
#: largest entry after the update. Measured at most 0.5, 8.1 and 0.4 on the three float
#: paths of an AMD EPYC (docs/TESTING.md); the summation order over replicas and XLA's
#: fusion are what differ.
LOSS_ULPS, GRADIENT_ULPS, WEIGHT_ULPS = 16, 64, 8


@pytest.mark.float_sensitive
@pytest.mark.parametrize("clip", CLIPS, ids=["clipping idle", "clipping active"])
def test_mirrored_meta_update_equals_single_device(clip, mirrored_checks):
    """Summed over replicas, then clipped: the update of one device to rounding
    (docs/DISTRIBUTED.md), also where clipping cuts most gradients."""
    check = mirrored_checks[clip]
    assert check["replicas"] == 2 and check["steps"] == [1, 1]
    assert check["initial_weight_diff"] == 0.0  # same seed, same initialisation: exact
    assert check["loss_ulps"] <= LOSS_ULPS, check
    assert check["grad_ulps"] <= GRADIENT_ULPS and check["grad_scale"] > 0.01, check
    assert check["weight_ulps"] <= WEIGHT_ULPS, check
    if clip == "0.02":
        assert abs(check["grad_scale"] - 0.02) < 1e-8 and check["clipped_elements"] > 100
    else:
        assert check["clipped_elements"] == 0


@pytest.mark.float_sensitive
def test_mirrored_meta_gradient_in_passes_equals_single_device(mirrored_checks):
    """Each replica's share in passes of `tasks_per_pass` tasks (5 + 5 + 2): the
    meta-gradient of one device in one pass; a share that is not static is refused."""
    check = mirrored_checks["passes"]
    assert check["loss_ulps"] <= LOSS_ULPS, check
    assert check["grad_ulps"] <= GRADIENT_ULPS and check["grad_scale"] > 0.01, check
    assert "multiple of the 2 replicas" in check["uneven_error"]


#: After 200 meta-updates the two runs' test MSEs agree within this relative tolerance.
#: Each update agrees to a few ulps (above), but 200 Adam updates amplify those last
#: bits: measured 1e-5 to 1.5e-4 relative on the three float paths of an AMD EPYC
#: (docs/TESTING.md). Same seed means the same tasks and initial weights exactly, and
#: the same run up to rounding, not bit for bit across float paths.
TRAJECTORY_RTOL = 2e-3


@pytest.mark.float_sensitive
def test_a_seed_trains_nearly_the_same_with_xla_on_one_device_and_mirrored(tmp_path):
    """One random stream per seed: 200 meta-updates of seed 3, XLA-compiled on one device
    and mirrored (never XLA) over 2 logical CPUs, end at the same test MSE to rounding
    amplified by training (TRAJECTORY_RTOL)."""
    params = ("NUM_STEPS=200", "Trainer.eval_every=100", "SEED=3")
    records = {}
    for name, extra in (("single", ()), ("mirrored", ("STRATEGY='mirrored'", "LOGICAL_CPUS=2"))):
        result = subprocess.run(
            _train_command(tmp_path / name, *params, *extra),
            cwd=REPO,
            env=ENV,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert result.returncode == 0, result.stderr[-2000:]
        records[name] = json.loads((tmp_path / name / "results.json").read_text())
    assert records["single"]["replicas"] == 1 and records["mirrored"]["replicas"] == 2
    assert records["mirrored"]["steps_trained"] == 200
    single, mirrored = records["single"]["mean"], records["mirrored"]["mean"]
    relative = abs(single - mirrored) / abs(single)
    assert relative <= TRAJECTORY_RTOL, (single, mirrored, relative)


@pytest.mark.float_sensitive
def test_two_workers_give_the_single_device_update(tmp_path):
    single = subprocess.run(
        _train_command(tmp_path / "single", "NUM_STEPS=1"),
        cwd=REPO,
        env=ENV,
        capture_output=True,
        text=True,
    )
    assert single.returncode == 0, single.stderr[-2000:]
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with _workers(tmp_path / "multi", "NUM_STEPS=1", scratch=scratch) as workers:
        for worker in workers:
            _, err = worker.communicate(timeout=300)
            assert worker.returncode == 0, err[-2000:]
    one = checkpoint_values(str(tmp_path / "single" / "checkpoints" / "ckpt-1"))
    two = checkpoint_values(str(tmp_path / "multi" / "checkpoints" / "ckpt-1"))
    assert one.keys() == two.keys()
    # Adam's slots after one update hold the meta-gradient g: m = 0.1 g, v = 0.001 g^2
    # (variables: the step count, then m and v per weight). Each is compared as the
    # gradient it implies, in ulps of its largest entry, at the mirrored check's GRADIENT_ULPS.
    slots = sorted(
        (k for k in one if k.startswith("optimizer/_variables/")),
        key=lambda k: int(k.split("/")[2]),
    )
    assert len(slots) > 10
    gradients = {}  # by weight index, from the first moments
    for name in slots:
        index = int(name.split("/")[2])
        if index == 0:  # iterations
            assert one[name] == two[name] == 1
            continue
        implied = (lambda m: m / 0.1) if index % 2 else (lambda v: np.sqrt(v / 0.001))
        assert_within_ulps(implied(two[name]), implied(one[name]), GRADIENT_ULPS, what=name)
        if index % 2:
            gradients[(index - 1) // 2] = implied(one[name])
    # Each weight is saved once, under the first path to it: the learner's, or the
    # optimizer's list of the variables it trains (by index in the trained order).
    order = [
        *(f"learner/network/{w}" for w in ("kernel_x", "kernel_context", "bias_0")),
        *(f"learner/network/{w}" for w in ("kernel_1", "bias_1", "kernel_2", "bias_2")),
        *(f"learner/loss_network/{w}" for w in ("kernel_first", "kernel_second", "bias")),
    ]
    weights = {}
    for name in one:
        if name.startswith("learner/"):
            weights[name] = order.index(name.split("/.ATTRIBUTES")[0])
        elif name.startswith("optimizer/_trainable_variables/"):
            weights[name] = int(name.split("/")[2])
    assert sorted(weights.values()) == list(range(15))  # relVIABLE: 7 + 8 weights
    for name, index in weights.items():
        # Adam's first step moves each weight by lr g / (|g| + 1e-7): about +-lr where the
        # gradient is clear of zero, anything where it is within rounding of zero, so
        # only the former are compared.
        g = gradients[index]
        assert g.shape == one[name].shape, name
        clear = np.abs(g) > 1e-3 * np.max(np.abs(g))
        scale = float(np.max(np.abs(one[name])))
        assert_within_ulps(two[name][clear], one[name][clear], WEIGHT_ULPS, scale=scale, what=name)
    assert json.loads((tmp_path / "multi" / "results.json").read_text())["replicas"] == 2
    # The non-chief worker's scratch checkpoints (tempfile.mkdtemp) are cleaned up.
    assert not list(scratch.iterdir()), list(scratch.iterdir())


def test_killed_worker_stops_the_job_and_restart_resumes_bit_exactly(tmp_path):
    params = ("NUM_STEPS=400", "Trainer.eval_every=100", "Trainer.steps_per_call=10")
    straight, model_dir = tmp_path / "straight", tmp_path / "run"
    with _workers(straight, *params) as workers:
        for worker in workers:
            _, err = worker.communicate(timeout=600)
            assert worker.returncode == 0, err[-2000:]

    with _workers(model_dir, *params) as workers:
        deadline = time.monotonic() + 600
        while not (model_dir / "checkpoints" / "ckpt-100.index").exists():
            assert workers[0].poll() is None, "the chief stopped before the kill"
            assert time.monotonic() < deadline, "no checkpoint within 600 s"
            time.sleep(0.05)
        workers[1].send_signal(signal.SIGKILL)
        _, err = workers[0].communicate(timeout=300)
    assert workers[0].returncode == 1
    last = err.strip().splitlines()[-1]
    assert "lost contact with another worker" in last and "Restart every worker" in last
    stopped_at = int(tf.train.latest_checkpoint(str(model_dir / "checkpoints")).rsplit("-", 1)[1])
    assert stopped_at < 400

    with _workers(model_dir, *params) as workers:  # the same command again
        outputs = [worker.communicate(timeout=600) for worker in workers]
    for worker, (_, err) in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, err[-2000:]
    assert f"resuming from {model_dir}/checkpoints at meta-update {stopped_at}" in outputs[0][1]
    record = json.loads((model_dir / "results.json").read_text())
    assert record["steps_trained"] == 400 and record["replicas"] == 2
    # Bit for bit the state of the uninterrupted run: weights, optimizer, early stopping.
    resumed = checkpoint_values(str(model_dir / "checkpoints" / "ckpt-400"))
    uninterrupted = checkpoint_values(str(straight / "checkpoints" / "ckpt-400"))
    assert resumed.keys() == uninterrupted.keys()
    for name, value in uninterrupted.items():
        np.testing.assert_array_equal(resumed[name], value, err_msg=name)
    expected = json.loads((straight / "results.json").read_text())
    assert (record["mean"], record["checkpoint_step"]) == (
        expected["mean"],
        expected["checkpoint_step"],
    )
