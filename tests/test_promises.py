"""Promises made in the docs and --help that had no test: verbosity, the serving limits as
flags, requests finishing on the version they started on, failed versions not retried."""

import os
import shutil
import subprocess
import sys

import grpc
import numpy as np
import pytest
from serving_harness import RunningServer, model_config

from serving.batching import BatchingOptions
from serving.client import Client
from serving.manager import State
from serving.server import ServerOptions, options_from_flags
from viable_tf.export import export_saved_model
from viable_tf.learners import CAVIA
from viable_tf.logs import ENV_VAR, requested_verbosity


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """Two versions of a sine model that answer differently (other initial weights)."""
    path = str(tmp_path_factory.mktemp("models") / "sine")
    for version, seed in ((1, 1), (2, 2)):
        import keras

        keras.utils.set_random_seed(seed)
        export_saved_model(CAVIA(input_dim=1, output_dim=1), path, version=version)
    return path


def _task(k=5, q=4, seed=0, b=1):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-5, 5, (b, k, 1)).astype(np.float32)
    return x, np.sin(x), rng.uniform(-5, 5, (b, q, 1)).astype(np.float32)


# -- verbosity -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        ([], None, 0),
        ([], "2", 2),
        (["--verbosity=1"], "2", 1),  # the flag wins over the environment
        (["--verbosity", "2"], None, 2),
        ([], "7", 2),  # clamped
        ([], "loud", 0),
    ],
)
def test_verbosity_from_flag_or_environment(monkeypatch, argv, env, expected):
    if env is None:
        monkeypatch.delenv(ENV_VAR, raising=False)
    else:
        monkeypatch.setenv(ENV_VAR, env)
    assert requested_verbosity(argv) == expected


def _tool_stderr(*args, env_verbosity=None):
    """A command-line tool that fails at once (no such run): what it prints to stderr."""
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", ENV_VAR)}
    if env_verbosity is not None:
        env[ENV_VAR] = env_verbosity
    result = subprocess.run(
        [
            *(sys.executable, "-m", "viable_tf.cli.export", "--model_dir=/no/such/run"),
            *("--export_base=/no/such/export", *args),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode != 0
    return [line for line in result.stderr.splitlines() if line.strip()]


@pytest.mark.slow
def test_verbosity_zero_prints_only_the_tools_own_line_and_two_lets_tensorflow_speak():
    quiet = _tool_stderr()
    assert len(quiet) == 1 and "/no/such/run" in quiet[0], quiet
    # (--verbosity=2 and the environment variable are read alike: the test above.)
    loud = _tool_stderr(env_verbosity="2")
    assert loud[-1] == quiet[0]  # the tool's line is the same, last; TensorFlow's own
    # start-up lines before it depend on the machine: TF_CPP_MIN_LOG_LEVEL is left alone.
    probe = (
        "from viable_tf.logs import quiet_tensorflow; quiet_tensorflow(); import os; "
        "print(os.environ.get('TF_CPP_MIN_LOG_LEVEL'))"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", ENV_VAR)}
    levels = {}
    for verbosity in ("0", "1", "2"):
        result = subprocess.run(
            [sys.executable, "-c", probe],
            capture_output=True,
            text=True,
            env={**env, ENV_VAR: verbosity},
            timeout=300,
        )
        levels[verbosity] = result.stdout.strip()
    assert levels == {"0": "3", "1": "1", "2": "None"}


# -- serving limits given as flags -------------------------------------------------------


def test_serving_limits_from_the_command_line_are_enforced(base):
    options = options_from_flags(
        [
            f"--model_base_path={base}",
            "--model_name=sine",
            "--port=0",
            "--rest_api_port=-1",
            "--max_request_bytes=2000",
            "--max_support=6",
            "--max_query=8",
            "--inline_below_ms=0",
        ]
    )
    assert (options.limits.max_support, options.limits.max_query) == (6, 8)
    assert options.max_request_bytes == 2000 and options.inline_below_ms == 0
    running = RunningServer(options)
    client = Client(running.grpc_target)
    try:
        assert client.predict(*_task(k=6, q=8), model_name="sine")["predictions"].shape == (1, 8, 1)
        assert running.server.service.inline_calls == 0  # --inline_below_ms=0: all on the pool
        for task, code, message in (
            (_task(k=7), grpc.StatusCode.INVALID_ARGUMENT, "exceeds the server's bound of 6"),
            (_task(q=9), grpc.StatusCode.INVALID_ARGUMENT, "exceeds the server's bound of 8"),
            (_task(k=6, q=8, b=100), grpc.StatusCode.RESOURCE_EXHAUSTED, "larger than max"),
        ):
            with pytest.raises(grpc.RpcError) as info:
                client.predict(*task, model_name="sine")
            assert info.value.code() == code and message in info.value.details()
    finally:
        client.close()
        running.stop()
    for flag in ("--max_support=0", "--max_query=-1", "--max_request_bytes=0"):
        with pytest.raises(ValueError, match=f"{flag.split('=')[0]} must be >= 1"):
            options_from_flags([f"--model_base_path={base}", flag])


# -- versions ------------------------------------------------------------------------------


def _server_of_version_1(base, tmp_path, **options):
    """A server of a model folder holding version 1 of `base`, polled by hand."""
    models = tmp_path / "sine"
    os.mkdir(models)
    shutil.copytree(os.path.join(base, "1"), models / "1")
    running = RunningServer(
        ServerOptions(
            models=[model_config("sine", str(models))],
            port=0,
            rest_api_port=None,
            poll_seconds=3600,
            **options,
        )
    )
    return models, running


def test_a_request_in_flight_finishes_on_the_version_it_started_on(base, tmp_path):
    """Version 1 is queued for a batch when version 2 arrives and 1 is unloaded: the
    request still gets version 1's answer, and the next one version 2's."""
    batching = BatchingOptions(max_batch_size=8, batch_timeout_micros=1_000)
    models, running = _server_of_version_1(base, tmp_path, batching=batching)
    client = Client(running.grpc_target)
    try:
        task = _task()
        first = client.predict(*task, model_name="sine")["predictions"]
        batcher = running.server.service.batcher
        hold = batcher.hold()
        running.call(hold.__aenter__())
        import concurrent.futures

        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            in_flight = pool.submit(client.predict, *task, model_name="sine")
            while batcher.pending < 1:
                assert not in_flight.done(), in_flight.result()
            shutil.copytree(os.path.join(base, "2"), models / "2")
            running.poll()  # version 2 loads, version 1 is unloaded
            status = {int(s["version"]): s["state"] for s in client.status("sine")}
            assert status == {2: "AVAILABLE", 1: "END"}, status
            running.call(hold.__aexit__(None, None, None))
            answer = in_flight.result(60)["predictions"]
        np.testing.assert_array_equal(answer, first)  # version 1's answer, same path
        second = client.predict(*task, model_name="sine")["predictions"]
        assert not np.allclose(second, first)  # version 2 answers differently
    finally:
        client.close()
        running.stop()


def test_a_failed_version_is_retried_only_when_its_folder_changes(base, tmp_path):
    models, running = _server_of_version_1(base, tmp_path)
    broken = models / "2"
    os.mkdir(broken)
    (broken / "saved_model.pb").write_bytes(b"not a SavedModel")
    running.poll()
    manager = running.server.manager
    loads = []
    load = manager._load

    def counting(name, version, path):
        loads.append(version)
        return load(name, version, path)

    manager._load = counting
    try:
        entry = manager.models["sine"]
        assert entry.statuses[2].state == State.END and "failed to load version 2" in (
            entry.statuses[2].error_message
        )
        assert 1 in entry.servables  # version 1 keeps serving until 2 is available
        running.poll()
        running.poll()
        assert loads == []  # failed before, unchanged since: not tried again
        shutil.rmtree(broken)
        shutil.copytree(os.path.join(base, "2"), broken)  # the folder changes
        running.poll()
        assert loads == [2] and 2 in entry.servables
    finally:
        running.stop()
