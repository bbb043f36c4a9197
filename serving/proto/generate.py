"""Regenerates serving/tf_serving_configs_pb2.py from serving/proto/*.proto with
grpcio-tools' protoc (not a dependency of the package: `pip install grpcio-tools`, of
the version whose protoc matches the pinned protobuf runtime).

    python serving/proto/generate.py
"""

import os
import sys

from grpc_tools import protoc

HERE = os.path.dirname(os.path.abspath(__file__))
SERVING = os.path.dirname(HERE)
WELL_KNOWN = os.path.join(os.path.dirname(protoc.__file__), "_proto")  # wrappers.proto


def main() -> int:
    return protoc.main(
        [
            "protoc",
            f"--proto_path={HERE}",
            f"--proto_path={WELL_KNOWN}",
            f"--python_out={SERVING}",
            os.path.join(HERE, "tf_serving_configs.proto"),
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
