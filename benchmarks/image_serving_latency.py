"""Latency of an end-to-end Omniglot classifier served by viable-serve: PNG files over
REST ({"b64": ...}) and over gRPC, tensors over gRPC and REST, with and without
server-side batching, beside the same export called in this process.

    .venv/bin/python benchmarks/image_serving_latency.py \\
        --model=5=W/export/simviable_5way1shot --model=20=W/export/simviable_20way1shot \\
        [--data_dir=../shared/data/omniglot] [--requests=200]

One synchronous client; each request one task of test-alphabet drawings (N-way 1-shot,
one query per class; a served model per N), its body or proto built before the clock
starts.
The routes are timed in turns, request by request, so drift hits them alike. Prints p50
and p99 in milliseconds as a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import threading

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import requests
import tensorflow as tf
from tensorflow_serving.config import model_server_config_pb2
from timing import header, times

from serving.batching import BatchingOptions
from serving.client import Client
from serving.omniglot_client import episode_inputs, omniglot_episode
from serving.rest_client import json_value
from serving.server import Server, ServerOptions
from viable_tf.export import layout

#: A route slower than this per request (float JSON of images over REST) is timed on
#: SLOW_REQUESTS requests only.
SLOW_SECONDS = 0.1
SLOW_REQUESTS = 30


def start(base: str, batching: BatchingOptions | None) -> tuple[Server, asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    config = model_server_config_pb2.ModelConfig(name="omniglot", base_path=base)
    server = Server(ServerOptions(models=[config], port=0, rest_api_port=0, batching=batching))
    asyncio.run_coroutine_threadsafe(server.start(), loop).result()
    return server, loop


def routes(server: Server, inputs_by_form: dict) -> dict:
    """name -> a call that sends one prepared request and waits for its answer."""
    client = Client(f"127.0.0.1:{server.grpc_port}")
    url = f"http://127.0.0.1:{server.rest_port}/v1/models/omniglot:predict"
    session = requests.Session()
    calls = {}
    for form, (signature, inputs) in inputs_by_form.items():
        proto = client.request(inputs, model_name="omniglot", signature_name=signature)
        body = json.dumps(
            {
                "signature_name": signature,
                "inputs": {name: json_value(np.asarray(v)) for name, v in inputs.items()},
            }
        ).encode()

        def rest(body=body):
            response = session.post(
                url, data=body, headers={"Content-Type": "application/json"}, timeout=60
            )
            assert response.status_code == 200, response.text
            return response.content

        calls[f"{form} over gRPC"] = lambda proto=proto: client.call(proto)
        calls[f"{form} over REST"] = rest
    return calls


def local_calls(local, inputs_by_form: dict) -> dict:
    calls = {}
    for form, (signature, inputs) in inputs_by_form.items():
        function = local.signatures[signature]
        tensors = {
            k: tf.constant(v, tf.string if np.asarray(v).dtype == object else None)
            for k, v in inputs.items()
        }
        calls[f"{form} in process"] = lambda f=function, t=tensors: f(**t)
    return calls


def percentiles(seconds: list[float]) -> str:
    p50, p99 = np.percentile(np.asarray(seconds) * 1000, [50, 99])
    return f"{p50:.1f} | {p99:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--model", action="append", required=True, help="N=BASE: an N-way export's base path"
    )
    parser.add_argument("--data_dir", default="../shared/data/omniglot")
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    rows, names = [], []
    for spec in args.model:
        ways, base = spec.split("=", 1)
        ways, shots = int(ways), 1
        version = max(layout.version_folders(base))
        names.append(f"{os.path.basename(base)} v{version}")
        local = tf.saved_model.load(os.path.join(base, str(version)))
        servers = {"no batching": start(base, None), "batching": start(base, BatchingOptions())}
        support_x, support_y, query_x, _ = omniglot_episode(args.data_dir, ways, shots, 1, 0)
        inputs_by_form = {
            "PNG": episode_inputs("png", support_x, support_y, query_x),
            "tensors": episode_inputs("tensors", support_x, support_y, query_x),
        }
        calls = dict(local_calls(local, inputs_by_form))
        for name, (server, _) in servers.items():
            for route, call in routes(server, inputs_by_form).items():
                calls[f"{route}, {name}"] = call
        counts = {}
        for name, call in calls.items():  # warm-up: first traces, connections
            slow = statistics.mean(times(call, 3, warmup=3)) > SLOW_SECONDS
            counts[name] = min(args.requests, SLOW_REQUESTS) if slow else args.requests
        seconds = {name: [] for name in calls}
        for round_ in range(args.requests):  # the routes in turns
            for name, call in calls.items():
                if round_ < counts[name]:
                    seconds[name] += times(call, 1, warmup=0)
        size = len(json.dumps(json_value(inputs_by_form["PNG"][1]["support_png"])))
        for name, values in seconds.items():
            rows.append(
                f"| {ways}-way {shots}-shot | {name} | {percentiles(values)} | {len(values)} |"
            )
        rows.append(
            f"| {ways}-way {shots}-shot | (support PNGs as b64 JSON: {size / 1024:.1f} KiB; "
            f"as float JSON: {len(json.dumps(support_x.tolist())) / 1024:.0f} KiB) | | | |"
        )
    print(header(f"Omniglot end to end: {', '.join(names)}"))
    print("One synchronous client, milliseconds per request\n")
    print("| setting | route | p50 | p99 | requests |")
    print("|---|---|---:|---:|---:|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
