"""TF Serving's config files: ModelServerConfig, MonitoringConfig, BatchingParameters.

`tensorflow-serving-api` ships `model_server_config.proto` but not
`monitoring_config.proto` nor `BatchingParameters` (session_bundle_config.proto).
Those two messages are declared here with TF Serving's package, names and field
numbers, so the files written for `tensorflow_model_server` parse unchanged.
"""

from __future__ import annotations

from google.protobuf import (
    descriptor_pb2,
    descriptor_pool,
    message_factory,
    text_format,
    wrappers_pb2,  # noqa: F401  (registers wrappers.proto in the pool)
)
from tensorflow_serving.config import model_server_config_pb2

_FILE = "viable_serving/tf_serving_configs.proto"


def _build_messages():
    pool = descriptor_pool.Default()
    try:
        pool.FindFileByName(_FILE)
    except KeyError:
        proto = descriptor_pb2.FileDescriptorProto(
            name=_FILE,
            package="tensorflow.serving",
            syntax="proto3",
            dependency=["google/protobuf/wrappers.proto"],
        )
        field_proto = descriptor_pb2.FieldDescriptorProto
        optional, repeated = field_proto.LABEL_OPTIONAL, field_proto.LABEL_REPEATED

        def add(message, name, number, kind, label=optional, type_name=None):
            field = message.field.add(name=name, number=number, type=kind, label=label)
            if type_name:
                field.type_name = type_name

        prometheus = proto.message_type.add(name="PrometheusConfig")
        add(prometheus, "enable", 1, field_proto.TYPE_BOOL)
        add(prometheus, "path", 2, field_proto.TYPE_STRING)
        monitoring = proto.message_type.add(name="MonitoringConfig")
        add(
            monitoring,
            "prometheus_config",
            1,
            field_proto.TYPE_MESSAGE,
            type_name=".tensorflow.serving.PrometheusConfig",
        )
        batching = proto.message_type.add(name="BatchingParameters")
        for number, name in enumerate(
            ("max_batch_size", "batch_timeout_micros", "max_enqueued_batches", "num_batch_threads"),
            1,
        ):
            add(
                batching,
                name,
                number,
                field_proto.TYPE_MESSAGE,
                type_name=".google.protobuf.Int64Value",
            )
        add(
            batching,
            "thread_pool_name",
            5,
            field_proto.TYPE_MESSAGE,
            type_name=".google.protobuf.StringValue",
        )
        add(batching, "allowed_batch_sizes", 6, field_proto.TYPE_INT64, label=repeated)
        add(batching, "pad_variable_length_inputs", 7, field_proto.TYPE_BOOL)
        pool.Add(proto)
    return tuple(
        message_factory.GetMessageClass(pool.FindMessageTypeByName(f"tensorflow.serving.{name}"))
        for name in ("MonitoringConfig", "BatchingParameters")
    )


MonitoringConfig, BatchingParameters = _build_messages()
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
