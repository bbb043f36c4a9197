"""A viable-serve's answers (this checkout's code) to fixed requests on one export, to show
that a refactor changed nothing a client sees:

    python lab/served_answers.py EXPORT_BASE > answers.json

gRPC Predict (float32 bits), REST predict in row and columnar form, status, metadata and
three refusals, each REST body parsed and printed with sorted keys (the order of a JSON
object's keys follows Python's per-process hash seed, here as in TF Serving's maps)."""

import argparse
import json
import os
import sys

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests")
)
import numpy as np
import requests
from serving_harness import RunningServer, model_config

from serving.client import Client
from serving.server import ServerOptions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("export_base", help="an export's base folder (version 1 is served)")
    base = parser.parse_args().export_base
    running = RunningServer(
        ServerOptions(models=[model_config("sine", base, stable=1)], port=0, rest_api_port=0)
    )
    out = {}
    try:
        rng = np.random.default_rng(3)
        x = rng.uniform(-5, 5, (2, 7, 1)).astype(np.float32)
        q = rng.uniform(-5, 5, (2, 9, 1)).astype(np.float32)
        client = Client(running.grpc_target)
        res = client.predict(x, np.sin(x), q, model_name="sine", label="stable")
        out["grpc"] = {
            k: v.astype(np.float32).view(np.uint32).tolist() for k, v in sorted(res.items())
        }
        u = running.rest_url
        body = {
            "inputs": {
                "support_x": x.tolist(),
                "support_y": np.sin(x).tolist(),
                "query_x": q.tolist(),
            }
        }
        out["rest_columnar"] = requests.post(u + "/v1/models/sine:predict", json=body).text
        rows = {
            "instances": [
                {
                    "support_x": x[i].tolist(),
                    "support_y": np.sin(x[i]).tolist(),
                    "query_x": q[i].tolist(),
                }
                for i in range(2)
            ]
        }
        out["rest_row"] = requests.post(u + "/v1/models/sine/versions/1:predict", json=rows).text
        out["status"] = requests.get(u + "/v1/models/sine").text
        out["metadata"] = requests.get(u + "/v1/models/sine/metadata").text
        out["bad_nan"] = requests.post(
            u + "/v1/models/sine:predict",
            data='{"inputs": {"support_x": [[[1e39]]], "support_y": [[[0.0]]], '
            '"query_x": [[[0.0]]]}}',
        ).text
        out["bad_label"] = requests.get(u + "/v1/models/sine/labels/nope").text
        out["bad_name"] = requests.post(u + "/v1/models/nothing:predict", json=body).text
        client.close()
    finally:
        running.stop()
    for key, value in out.items():
        if isinstance(value, str):
            out[key] = json.loads(value)
    print(json.dumps(out, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
