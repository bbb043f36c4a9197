"""Distributed meta-training on a CPU-only machine: 2 logical devices, 2 local workers."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import checkpoint_values
from tolerances import assert_within_ulps
from worker_harness import ENV, REPO, _train_command, _workers

from viable_tf.cli import train as train_cli


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


@pytest.mark.slow
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


# Not marked float_sensitive, though it compares at the mirrored check's tolerances: its
# arithmetic is that check's (one device with XLA against two replicas' kernels, the
# gradient summed over two, a + b in either order), which the other float paths rerun;
# what only this test adds, two processes that agree over gRPC, is not a float path's.
@pytest.mark.slow
def test_two_workers_give_the_single_device_update(tmp_path, run_cli, monkeypatch):
    # The one-device reference trains in this process (one TensorFlow start fewer, on
    # every float path the suite runs): the same command, read from its checkpoint.
    monkeypatch.chdir(REPO)
    status, out = run_cli(train_cli, _train_command(tmp_path / "single", "NUM_STEPS=1")[3:])
    assert status == 0, out.err[-2000:]
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
