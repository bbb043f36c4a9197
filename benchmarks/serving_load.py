"""Load on viable-serve over gRPC and REST, beside the in-process call of the same SavedModel.

    .venv/bin/python benchmarks/serving_load.py [--requests 10000] [--concurrency 16]

A relVIABLE sine model (K = 10 support points, Q = 100 query points, one task per
request) is exported to a temporary folder and served by a `viable-serve`
process on 127.0.0.1; this process is the load generator: a fixed number of
concurrent clients (asyncio, official stubs / aiohttp) share a bounded count of
requests. Scenarios: gRPC and REST without batching, gRPC with batching, and
gRPC with batching while a new version is dropped in mid-run. Prints a Markdown
table: throughput, p50 and p99 latency, errors. Weights are untrained: speed does
not depend on them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import aiohttp
import grpc
import numpy as np
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc
from timing import header

from viable_tf.export import export_saved_model
from viable_tf.learners import VIABLE
from viable_tf.tasks import SineTasks

K, Q = 10, 100


def _inputs(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return SineTasks().request(rng, num_support=K, num_query=Q, grid=True)[0]


def _summary(name: str, latencies: list[float], errors: int, seconds: float) -> dict:
    ms = np.asarray(latencies) * 1000
    return {
        "scenario": name,
        "requests": len(latencies) + errors,
        "errors": errors,
        "throughput": (len(latencies) + errors) / seconds,
        "p50_ms": float(np.percentile(ms, 50)) if len(ms) else float("nan"),
        "p99_ms": float(np.percentile(ms, 99)) if len(ms) else float("nan"),
    }


def in_process(path: str, count: int) -> dict:
    serve = tf.saved_model.load(path).signatures["serving_default"]
    inputs = {k: tf.constant(v) for k, v in _inputs().items()}
    for _ in range(50):
        serve(**inputs)
    latencies = []
    start = time.perf_counter()
    for _ in range(count):
        t = time.perf_counter()
        serve(**inputs)["predictions"].numpy()
        latencies.append(time.perf_counter() - t)
    return _summary(
        "in-process SavedModel call (1 caller)", latencies, 0, time.perf_counter() - start
    )


async def grpc_load(target: str, count: int, concurrency: int, name: str, during=None) -> dict:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "sine"
    for key, value in _inputs().items():
        request.inputs[key].CopyFrom(tf.make_tensor_proto(value))
    latencies, errors, versions = [], [], {}
    remaining = [count]
    async with grpc.aio.insecure_channel(target) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        for _ in range(20):
            await stub.Predict(request)

        async def worker():
            while remaining[0] > 0:
                remaining[0] -= 1
                t = time.perf_counter()
                try:
                    reply = await stub.Predict(request, timeout=30)
                    latencies.append(time.perf_counter() - t)
                    version = reply.model_spec.version.value
                    versions[version] = versions.get(version, 0) + 1
                except grpc.aio.AioRpcError as error:
                    errors.append(error.details())

        start = time.perf_counter()
        tasks = [asyncio.create_task(worker()) for _ in range(concurrency)]
        if during is not None:
            await during(lambda: count - remaining[0])
        await asyncio.gather(*tasks)
        seconds = time.perf_counter() - start
    result = _summary(name, latencies, len(errors), seconds)
    result["versions"] = versions
    result["first_errors"] = errors[:3]
    return result


async def rest_load(url: str, count: int, concurrency: int) -> dict:
    inputs = _inputs()
    body = json.dumps({"instances": [{k: v[0].tolist() for k, v in inputs.items()}]})
    latencies, errors = [], []
    remaining = [count]
    connector = aiohttp.TCPConnector(limit=concurrency)
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker():
            while remaining[0] > 0:
                remaining[0] -= 1
                t = time.perf_counter()
                async with session.post(url, data=body, headers=headers) as response:
                    await response.read()
                    if response.status == 200:
                        latencies.append(time.perf_counter() - t)
                    else:
                        errors.append(response.status)

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        seconds = time.perf_counter() - start
    return _summary(f"REST, {concurrency} clients, no batching", latencies, len(errors), seconds)


class ServerProcess:
    def __init__(self, base: str, *extra: str) -> None:
        command = [
            os.path.join(os.path.dirname(sys.executable), "viable-serve"),
            "--model_name=sine",
            f"--model_base_path={base}",
            "--port=0",
            "--rest_api_port=0",
            "--file_system_poll_wait_seconds=0.5",
            *extra,
        ]
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        line = self.process.stdout.readline()
        if "gRPC on" not in line:
            raise RuntimeError(f"viable-serve did not start: {line!r}")
        self.grpc_target = line.split("gRPC on ")[1].split(",")[0].strip()
        self.rest_port = int(line.rsplit(":", 1)[1])

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(30)


def _drop_in_new_version(base: str, after: int):
    """A coroutine: once `after` requests are sent, copy version 1 to version 2 atomically."""

    async def during(sent):
        deadline = time.perf_counter() + 120
        while sent() < after and time.perf_counter() < deadline:
            await asyncio.sleep(0.01)
        staging = os.path.join(base, ".staging-2")
        await asyncio.to_thread(shutil.copytree, os.path.join(base, "1"), staging)
        os.rename(staging, os.path.join(base, "2"))  # appears atomically

    return during


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--max_batch_size", type=int, default=32)
    parser.add_argument("--batch_timeout_micros", type=int, default=2000)
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="viable-serving-load-")
    base = os.path.join(work, "sine")
    path = export_saved_model(VIABLE(input_dim=1, output_dim=1), base, model_name="sine")
    batching = os.path.join(work, "batching.config")
    with open(batching, "w") as f:
        f.write(
            f"max_batch_size {{ value: {args.max_batch_size} }}\n"
            f"batch_timeout_micros {{ value: {args.batch_timeout_micros} }}\n"
            "num_batch_threads { value: 2 }\nmax_enqueued_batches { value: 1000 }\n"
        )
    results = [in_process(path, 2000)]

    server = ServerProcess(base)
    try:
        results.append(
            asyncio.run(grpc_load(server.grpc_target, 2000, 1, "gRPC, 1 client, no batching"))
        )
        results.append(
            asyncio.run(
                grpc_load(
                    server.grpc_target,
                    args.requests,
                    args.concurrency,
                    f"gRPC, {args.concurrency} clients, no batching",
                )
            )
        )
        results.append(
            asyncio.run(
                rest_load(
                    f"http://127.0.0.1:{server.rest_port}/v1/models/sine:predict",
                    args.requests,
                    args.concurrency,
                )
            )
        )
    finally:
        server.stop()

    server = ServerProcess(base, "--enable_batching", f"--batching_parameters_file={batching}")
    try:
        results.append(
            asyncio.run(
                grpc_load(
                    server.grpc_target,
                    args.requests,
                    args.concurrency,
                    f"gRPC, {args.concurrency} clients, batching",
                )
            )
        )
        results.append(
            asyncio.run(
                grpc_load(
                    server.grpc_target,
                    args.requests,
                    args.concurrency,
                    f"gRPC, {args.concurrency} clients, batching, new version mid-run",
                    during=_drop_in_new_version(base, args.requests // 3),
                )
            )
        )
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)

    print(
        header(
            f"relVIABLE sine, one task per request, K = {K}, Q = {Q}; "
            "server and load generator on the same machine"
        )
    )
    print("| scenario | requests | errors | throughput (req/s) | p50 (ms) | p99 (ms) |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in results:
        print(
            f"| {r['scenario']} | {r['requests']:,} | {r['errors']} | {r['throughput']:,.0f} "
            f"| {r['p50_ms']:.2f} | {r['p99_ms']:.2f} |"
        )
    reload = results[-1]
    print(f"\nversions that answered during the reload run: {reload['versions']}")
    for r in results:
        if r.get("first_errors"):
            print(f"{r['scenario']}: first errors: {r['first_errors']}")


if __name__ == "__main__":
    main()
