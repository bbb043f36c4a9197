"""viable-serve's flags and TF Serving's config files; the real command end to end."""

import os
import select
import signal
import subprocess
import sys

import numpy as np
import pytest

from serving.client import Client
from serving.server import options_from_flags
from viable_tf.export import export_saved_model
from viable_tf.learners import CAVIA


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("models") / "cavia")
    export_saved_model(CAVIA(input_dim=1, output_dim=1), path)
    return path


def test_single_model_flags(base):
    options = options_from_flags([f"--model_base_path={base}", "--model_name=sine"])
    (model,) = options.models
    assert (model.name, model.base_path) == ("sine", base)
    assert (options.host, options.port, options.rest_api_port) == ("127.0.0.1", 8500, 8501)
    assert options.batching is None and options.metrics_path is None


def test_config_files_in_tf_serving_text_format(base, tmp_path):
    models = tmp_path / "models.config"
    models.write_text(
        "model_config_list {\n"
        f'  config {{ name: "a" base_path: "{base}" model_platform: "tensorflow" }}\n'
        f'  config {{ name: "b" base_path: "{base}" model_platform: "tensorflow"\n'
        "    model_version_policy { specific { versions: 1 } }\n"
        '    version_labels { key: "stable" value: 1 } }\n'
        "}\n"
    )
    monitoring = tmp_path / "monitoring.config"
    monitoring.write_text('prometheus_config { enable: true path: "/metrics/prom" }\n')
    batching = tmp_path / "batching.config"
    batching.write_text(
        "max_batch_size { value: 64 }\nbatch_timeout_micros { value: 500 }\n"
        "num_batch_threads { value: 2 }\nmax_enqueued_batches { value: 10 }\n"
    )
    options = options_from_flags(
        [
            f"--model_config_file={models}",
            f"--monitoring_config_file={monitoring}",
            "--enable_batching",
            f"--batching_parameters_file={batching}",
        ]
    )
    assert [m.name for m in options.models] == ["a", "b"]
    assert dict(options.models[1].version_labels) == {"stable": 1}
    assert options.metrics_path == "/metrics/prom"
    assert (options.batching.max_batch_size, options.batching.batch_timeout_micros) == (64, 500)
    assert (options.batching.num_batch_threads, options.batching.max_enqueued_batches) == (2, 10)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "nothing to serve"),
        (["--model_base_path=relative/path"], "base_path must be absolute"),
        (["--model_base_path=/no/such/dir"], "is not a directory"),
        (["--model_config_file=/no/such.config"], "cannot read /no/such.config"),
    ],
)
def test_bad_flags_are_one_clear_line(argv, message):
    with pytest.raises(ValueError, match=message):
        options_from_flags(argv)


def test_malformed_config_file_names_the_file_and_the_problem(tmp_path, base):
    bad = tmp_path / "batching.config"
    bad.write_text("max_batch_size { value: 64 }\nmax_batch_sise { value: 1 }\n")
    with pytest.raises(
        ValueError, match=r"batching.config is not a valid BatchingParameters.*sise"
    ):
        options_from_flags(
            [f"--model_base_path={base}", "--enable_batching", f"--batching_parameters_file={bad}"]
        )


@pytest.mark.slow
def test_viable_serve_command_serves_and_stops_on_sigterm(base, tmp_path):
    command = [
        os.path.join(os.path.dirname(sys.executable), "viable-serve"),
        "--model_name=sine",
        f"--model_base_path={base}",
        "--port=0",
        "--rest_api_port=0",
    ]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    with open(tmp_path / "stderr.txt", "w+") as stderr:  # drained to a file, not a pipe
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=stderr, env=env, text=True
        )
        try:
            ready, _, _ = select.select([process.stdout], [], [], 120)  # no blocking readline
            assert ready, "viable-serve printed nothing within 120 s"
            line = process.stdout.readline()
            stderr.seek(0)
            assert "viable-serve: serving sine: gRPC on 127.0.0.1:" in line, stderr.read()
            port = line.split("gRPC on 127.0.0.1:")[1].split(",")[0]
            client = Client(f"127.0.0.1:{port}")
            support_x = np.random.default_rng(0).uniform(-5, 5, (1, 5, 1))
            outputs = client.predict(
                support_x, np.sin(support_x), np.zeros((1, 3, 1)), model_name="sine"
            )
            assert outputs["predictions"].shape == (1, 3, 1)
            client.close()
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                code = process.wait(timeout=30)
            finally:
                process.kill()
                process.stdout.close()
    assert code == 0
    bad = subprocess.run(
        [*command[:1], "--model_base_path=nope"], capture_output=True, text=True, env=env
    )
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines()[-1].startswith("viable-serve: error: model default")


def test_the_compiled_config_messages_have_tf_servings_names_and_field_numbers():
    """serving/tf_serving_configs_pb2.py (protoc's output for serving/proto/) declares
    TF Serving's messages as tensorflow_model_server reads them: a file written for one
    parses in the other only if the full names and field numbers agree."""
    from serving import protos

    expected = {
        "tensorflow.serving.MonitoringConfig": {"prometheus_config": 1},
        "tensorflow.serving.PrometheusConfig": {"enable": 1, "path": 2},
        "tensorflow.serving.BatchingParameters": {
            "max_batch_size": 1,
            "batch_timeout_micros": 2,
            "max_enqueued_batches": 3,
            "num_batch_threads": 4,
            "thread_pool_name": 5,
            "allowed_batch_sizes": 6,
            "pad_variable_length_inputs": 7,
        },
    }
    descriptors = [
        protos.MonitoringConfig.DESCRIPTOR,
        protos.MonitoringConfig.DESCRIPTOR.fields_by_name["prometheus_config"].message_type,
        protos.BatchingParameters.DESCRIPTOR,
    ]
    assert {d.full_name: {f.name: f.number for f in d.fields} for d in descriptors} == expected
