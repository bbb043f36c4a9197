"""TF Serving's config files: ModelServerConfig, MonitoringConfig, BatchingParameters.

`tensorflow-serving-api` ships `model_server_config.proto` but not
`monitoring_config.proto` nor `BatchingParameters` (session_bundle_config.proto).
Those two messages are declared in serving/proto/tf_serving_configs.proto with TF
Serving's package, names and field numbers, so that the files written for
`tensorflow_model_server` parse unchanged, and compiled by protoc into
serving/tf_serving_configs_pb2.py (serving/proto/generate.sh).
"""

from __future__ import annotations

from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2

from serving import tf_serving_configs_pb2

MonitoringConfig = tf_serving_configs_pb2.MonitoringConfig
BatchingParameters = tf_serving_configs_pb2.BatchingParameters
ModelServerConfig = model_server_config_pb2.ModelServerConfig


def parse_text_file(path: str, message_class):
    """Parses a text-format proto file; raises ValueError naming the file and the problem."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as error:
        raise ValueError(f"cannot read {path}: {error.strerror}") from None
    try:
        return text_format.Parse(text, message_class())
    except text_format.ParseError as error:
        raise ValueError(
            f"{path} is not a valid {message_class.DESCRIPTOR.name} in text format: {error}"
        ) from None
