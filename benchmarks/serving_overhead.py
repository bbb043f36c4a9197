"""Where a served request's time goes: model call, checks, conversions, gRPC transport.

    .venv/bin/python benchmarks/serving_overhead.py

One relVIABLE sine task (K = 10, Q = 100) per request, one synchronous client, a
viable-serve Server in a background thread of the same process. Prints the median
of 500 calls of each stage, in milliseconds, as a Markdown table.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import threading

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import grpc
import numpy as np
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc
from tensorflow_serving.config import model_server_config_pb2
from timing import header, median_of

from serving import checks, tensors
from serving.client import Client
from serving.server import Server, ServerOptions
from viable_tf.export import export_saved_model
from viable_tf.learners import VIABLE
from viable_tf.tasks import SineTasks


class _Empty(prediction_service_pb2_grpc.PredictionServiceServicer):
    async def Predict(self, request, context):  # noqa: N802
        return predict_pb2.PredictResponse()


def median_ms(call, count: int = 500) -> float:
    return 1000 * median_of(call, count, warmup=50)


def main() -> None:
    base = os.path.join(tempfile.mkdtemp(), "sine")
    export_saved_model(VIABLE(input_dim=1, output_dim=1), base)
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    config = model_server_config_pb2.ModelConfig(name="sine", base_path=base)
    server = Server(ServerOptions(models=[config], port=0, rest_api_port=None))
    asyncio.run_coroutine_threadsafe(server.start(), loop).result()

    async def empty_server():
        empty = grpc.aio.server()
        prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(_Empty(), empty)
        port = empty.add_insecure_port("127.0.0.1:0")
        await empty.start()
        return empty, port

    _, empty_port = asyncio.run_coroutine_threadsafe(empty_server(), loop).result()

    inputs = SineTasks().request(
        np.random.default_rng(0), num_support=10, num_query=100, grid=True
    )[0]
    servable = server.manager.resolve("sine")
    signature = servable.signatures["serving_default"]
    function = servable.function("serving_default")
    constants = {k: tf.constant(v) for k, v in inputs.items()}
    client = Client(f"127.0.0.1:{server.grpc_port}")
    request = client.request(inputs, model_name="sine")
    empty_stub = prediction_service_pb2_grpc.PredictionServiceStub(
        grpc.insecure_channel(f"127.0.0.1:{empty_port}")
    )
    rows = [
        ("SavedModel signature, tf.constant inputs", lambda: function(**constants)),
        (
            "the same from NumPy inputs (Servable.run: the signature's public call)",
            lambda: servable.run("serving_default", inputs),
        ),
        (
            "request checks (check_inputs)",
            lambda: checks.check_inputs(signature, inputs, checks.Limits()),
        ),
        ("TensorProtos -> NumPy (from_protos)", lambda: tensors.from_protos(request.inputs)),
        ("gRPC round trip, empty handler (transport floor)", lambda: empty_stub.Predict(request)),
        (
            "gRPC round trip to viable-serve, full Predict",
            lambda: client.prediction.Predict(request),
        ),
    ]
    print(header("relVIABLE sine task, K = 10, Q = 100; median of 500 calls"))
    print("| stage | median (ms) |\n|---|---:|")
    for name, call in rows:
        print(f"| {name} | {median_ms(call):.2f} |", flush=True)


if __name__ == "__main__":
    main()
