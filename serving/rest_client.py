"""TF Serving's REST API from the client side: inputs as its JSON (binary strings as
{"b64": ...}) and one `:predict` call. Used by `viable-client` and its Omniglot command.
"""

from __future__ import annotations

import base64

import numpy as np


def json_value(value: np.ndarray):
    """An input as TF Serving's REST API takes it: nested lists, bytes as {"b64": ...}."""
    if value.dtype == object:
        encode = np.vectorize(
            lambda b: {"b64": base64.b64encode(b).decode("ascii")}, otypes=[object]
        )
        return encode(value).tolist()
    return value.tolist()


def rest_predict(
    url: str, model_name: str, inputs: dict[str, np.ndarray], signature_name: str = "", **spec
) -> dict:
    """One :predict over TF Serving's REST API (columnar "inputs"); the outputs as arrays."""
    import requests

    path = f"{url.rstrip('/')}/v1/models/{model_name}"
    if spec.get("version") is not None:
        path += f"/versions/{spec['version']}"
    elif spec.get("label"):
        path += f"/labels/{spec['label']}"
    body = {"inputs": {name: json_value(value) for name, value in inputs.items()}}
    if signature_name:
        body["signature_name"] = signature_name
    response = requests.post(f"{path}:predict", json=body, timeout=300)
    if response.status_code != 200:
        raise RuntimeError(f"REST {response.status_code}: {response.json().get('error')}")
    return {name: np.asarray(value) for name, value in response.json()["outputs"].items()}
