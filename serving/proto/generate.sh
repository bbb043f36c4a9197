#!/bin/sh
# Regenerates serving/tf_serving_configs_pb2.py from serving/proto/*.proto with
# grpcio-tools' protoc. grpcio-tools is not a dependency of the package: install the
# version whose protoc matches the pinned protobuf runtime (grpcio-tools==1.85.1 for
# protobuf==7.36.2), then run from the repository root:
#
#     sh serving/proto/generate.sh
set -e
PYTHON=${PYTHON:-.venv/bin/python}
WELL_KNOWN=$("$PYTHON" -c "import grpc_tools, os; print(os.path.join(os.path.dirname(grpc_tools.__file__), '_proto'))")
"$PYTHON" -m grpc_tools.protoc --proto_path=serving/proto --proto_path="$WELL_KNOWN" \
    --python_out=serving serving/proto/tf_serving_configs.proto
