"""A MultiWorker job whose worker is killed stops with one clear line, and the same command
resumes it bit for bit (docs/DISTRIBUTED.md). Its own file, so that the suite's workers run
it beside the other distributed checks."""

import json
import signal
import time

import numpy as np
import pytest
import tensorflow as tf
from conftest import checkpoint_values
from worker_harness import _workers


@pytest.mark.slow
def test_killed_worker_stops_the_job_and_restart_resumes_bit_exactly(tmp_path):
    params = ("NUM_STEPS=200", "EvaluationSpec.eval_every=50", "PerformanceSpec.steps_per_call=10")
    straight, model_dir = tmp_path / "straight", tmp_path / "run"
    with _workers(straight, *params) as workers:
        for worker in workers:
            _, err = worker.communicate(timeout=600)
            assert worker.returncode == 0, err[-2000:]

    with _workers(model_dir, *params) as workers:
        deadline = time.monotonic() + 600
        while not (model_dir / "checkpoints" / "ckpt-50.index").exists():
            assert workers[0].poll() is None, "the chief stopped before the kill"
            assert time.monotonic() < deadline, "no checkpoint within 600 s"
            time.sleep(0.05)
        workers[1].send_signal(signal.SIGKILL)
        _, err = workers[0].communicate(timeout=300)
    assert workers[0].returncode == 1
    last = err.strip().splitlines()[-1]
    assert "lost contact with another worker" in last and "Restart every worker" in last
    stopped_at = int(tf.train.latest_checkpoint(str(model_dir / "checkpoints")).rsplit("-", 1)[1])
    assert stopped_at < 200

    with _workers(model_dir, *params) as workers:  # the same command again
        outputs = [worker.communicate(timeout=600) for worker in workers]
    for worker, (_, err) in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, err[-2000:]
    assert f"resuming from {model_dir}/checkpoints at meta-update {stopped_at}" in outputs[0][1]
    record = json.loads((model_dir / "results.json").read_text())
    assert record["steps_trained"] == 200 and record["replicas"] == 2
    # Bit for bit the state of the uninterrupted run: weights, optimizer, early stopping.
    resumed = checkpoint_values(str(model_dir / "checkpoints" / "ckpt-200"))
    uninterrupted = checkpoint_values(str(straight / "checkpoints" / "ckpt-200"))
    assert resumed.keys() == uninterrupted.keys()
    for name, value in uninterrupted.items():
        np.testing.assert_array_equal(resumed[name], value, err_msg=name)
    expected = json.loads((straight / "results.json").read_text())
    assert (record["mean"], record["checkpoint_step"]) == (
        expected["mean"],
        expected["checkpoint_step"],
    )
