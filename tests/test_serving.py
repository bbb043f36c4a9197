"""viable-serve over TF Serving's gRPC and REST protocols: answers, errors, versions, batching."""

import concurrent.futures
import json
import os
import shutil
import threading
import time

import grpc
import keras
import numpy as np
import pytest
import requests
import tensorflow as tf
from grpc_health.v1 import health_pb2, health_pb2_grpc
from serving_harness import RunningServer, model_config
from tensorflow_serving.apis import classification_pb2, predict_pb2

from serving.batching import BatchingOptions
from serving.checks import Limits
from serving.client import Client
from serving.server import ServerOptions
from viable_tf.export import export_saved_model
from viable_tf.learners import VIABLE
from viable_tf.networks import SimpleLossNetwork

MAX_BYTES = 300_000


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """An exported relVIABLE (version 1) and the learner it came from."""
    learner = VIABLE(input_dim=1, output_dim=1)
    base = str(tmp_path_factory.mktemp("models") / "viable")
    export_saved_model(learner, base)
    return learner, base


@pytest.fixture(scope="module")
def classifier_base(tmp_path_factory):
    """A small exported 5-way classifier on 8-d inputs (no downloaded data)."""
    keras.utils.set_random_seed(1)
    learner = VIABLE(
        input_dim=8,
        output_dim=5,
        context_dim=4,
        num_inner_steps=2,
        task_loss="cross_entropy",
        loss_network=lambda: SimpleLossNetwork(hidden_units=(16,)),
    )
    base = str(tmp_path_factory.mktemp("models") / "classifier")
    export_saved_model(learner, base)
    return base


@pytest.fixture(scope="module")
def server(model, classifier_base):
    _, base = model
    running = RunningServer(
        ServerOptions(
            models=[
                model_config("viable", base, stable=1),
                model_config("classifier", classifier_base),
            ],
            port=0,
            rest_api_port=0,
            metrics_path="/monitoring/prometheus/metrics",
            limits=Limits(max_support=50, max_query=500, max_tasks=64),
            max_request_bytes=MAX_BYTES,
        )
    )
    yield running
    running.stop()


def _tasks(b=2, k=10, q=7, seed=0):
    rng = np.random.default_rng(seed)
    support_x = rng.uniform(-5, 5, (b, k, 1)).astype(np.float32)
    return support_x, np.sin(support_x), rng.uniform(-5, 5, (b, q, 1)).astype(np.float32)


def _good_request_succeeds(client):
    support_x, support_y, query_x = _tasks()
    assert client.predict(support_x, support_y, query_x)["predictions"].shape == (2, 7, 1)


# -- answers ----------------------------------------------------------------------------


@pytest.mark.slow
def test_grpc_predict_matches_the_model(client, model):
    learner, _ = model
    support_x, support_y, query_x = _tasks(b=3)
    mask = np.ones((3, 10), bool)
    mask[1, 6:] = False
    outputs = client.predict(support_x, support_y, query_x, support_mask=mask)
    state = learner.adapt(support_x, support_y, mask)
    np.testing.assert_allclose(outputs["predictions"], learner.predict(state, query_x), atol=1e-5)
    np.testing.assert_allclose(outputs["context"], state.context, atol=1e-5)
    # adapt once, query many times
    context = client.adapt(support_x, support_y, support_mask=mask)
    again = client.predict_with_context(context, query_x)
    np.testing.assert_allclose(again["predictions"], outputs["predictions"], atol=1e-6)
    # the version label resolves to the same servable
    labelled = client.predict(support_x, support_y, query_x, support_mask=mask, label="stable")
    np.testing.assert_allclose(labelled["predictions"], outputs["predictions"], atol=0)


def test_rest_row_and_columnar_match_grpc(server, client):
    support_x, support_y, query_x = _tasks(b=2, k=4, q=3)
    expected = client.predict(support_x, support_y, query_x)
    url = f"{server.rest_url}/v1/models/viable:predict"
    instances = [
        {"support_x": sx.tolist(), "support_y": sy.tolist(), "query_x": qx.tolist()}
        for sx, sy, qx in zip(support_x, support_y, query_x, strict=True)
    ]
    row = requests.post(url, json={"instances": instances}, timeout=30)
    assert row.status_code == 200, row.text
    predictions = row.json()["predictions"]
    assert len(predictions) == 2 and set(predictions[0]) == {"predictions", "context"}
    np.testing.assert_allclose(
        [p["predictions"] for p in predictions], expected["predictions"], atol=1e-6
    )
    columnar = requests.post(
        f"{server.rest_url}/v1/models/viable/versions/1:predict",
        json={
            "signature_name": "serving_masked",
            "inputs": {
                "support_x": support_x.tolist(),
                "support_y": support_y.tolist(),
                "support_mask": [[True] * 4] * 2,
                "query_x": query_x.tolist(),
            },
        },
        timeout=30,
    )
    assert columnar.status_code == 200, columnar.text
    np.testing.assert_allclose(
        columnar.json()["outputs"]["context"], expected["context"], atol=1e-6
    )
    adapt = requests.post(
        url,
        json={
            "signature_name": "adapt",
            "inputs": {"support_x": support_x.tolist(), "support_y": support_y.tolist()},
        },
        timeout=30,
    )
    np.testing.assert_allclose(adapt.json()["outputs"], expected["context"], atol=1e-6)


CORS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Methods": "POST, GET",
    "Access-Control-Allow-Headers": "Content-Type",
}


def test_every_rest_answer_carries_tf_servings_cors_headers(server):
    """As TF Serving's REST server: on answers, on errors (ours and aiohttp's own), and
    on the preflight OPTIONS a browser sends before a cross-origin POST of JSON."""
    origin = {"Origin": "http://elsewhere.example"}
    answers = {
        "status": requests.get(f"{server.rest_url}/v1/models/viable", headers=origin, timeout=30),
        "predict": _rest(server, _row()),
        "bad request": _rest(server, None, raw=b"{not json"),
        "unknown model": requests.get(f"{server.rest_url}/v1/models/nope", timeout=30),
        "not the API": requests.get(f"{server.rest_url}/elsewhere", timeout=30),
        "preflight": requests.options(
            f"{server.rest_url}/v1/models/viable:predict",
            headers={
                **origin,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "Content-Type",
            },
            timeout=30,
        ),
    }
    codes = {name: response.status_code for name, response in answers.items()}
    assert codes == {
        "status": 200,
        "predict": 200,
        "bad request": 400,
        "unknown model": 404,
        "not the API": 404,
        "preflight": 200,
    }
    for name, response in answers.items():
        assert {k: response.headers.get(k) for k in CORS} == CORS, name
    assert answers["preflight"].content == b""


def test_rest_empty_support_is_k_zero(server, model):
    """JSON carries an empty support set only as [B, 0]; that is K = 0, as over gRPC."""
    learner, _ = model
    _, _, query_x = _tasks(b=2)
    unadapted = learner.predict(learner.initial_state(2), query_x)
    url = f"{server.rest_url}/v1/models/viable:predict"
    bodies = [
        {"inputs": {"support_x": [[], []], "support_y": [[], []], "query_x": query_x.tolist()}},
        {"instances": [{"support_x": [], "support_y": [], "query_x": q.tolist()} for q in query_x]},
    ]
    for body in bodies:
        reply = requests.post(url, json=body, timeout=30)
        assert reply.status_code == 200, reply.text
        result = reply.json()
        got = (
            result["outputs"]["predictions"]
            if "outputs" in result
            else [p["predictions"] for p in result["predictions"]]
        )
        np.testing.assert_allclose(got, unadapted, atol=1e-6)


def test_k_zero_is_the_unadapted_prediction(client, model):
    learner, _ = model
    _, _, query_x = _tasks(b=2)
    outputs = client.predict(np.zeros((2, 0, 1)), np.zeros((2, 0, 1)), query_x)
    unadapted = learner.predict(learner.initial_state(2), query_x)
    np.testing.assert_allclose(outputs["predictions"], unadapted, atol=1e-6)


def test_status_metadata_and_health(server, client):
    assert client.status("viable") == [{"version": "1", "state": "AVAILABLE", "status": {}}]
    signatures = client.metadata("viable")["signature_def"]
    assert set(signatures) == {
        "serving_default",
        "serving_masked",
        "adapt",
        "adapt_masked",
        "predict",
    }
    assert set(signatures["serving_default"]["inputs"]) == {"support_x", "support_y", "query_x"}
    assert set(signatures["serving_masked"]["inputs"]) == {
        "support_x",
        "support_y",
        "support_mask",
        "query_x",
    }
    rest = requests.get(f"{server.rest_url}/v1/models/viable", timeout=10).json()
    assert rest["model_version_status"][0]["state"] == "AVAILABLE"
    assert rest["model_version_status"][0]["status"]["error_code"] == "OK"
    label = requests.get(f"{server.rest_url}/v1/models/viable/labels/stable", timeout=10).json()
    assert label["model_version_status"][0]["version"] == "1"
    metadata = requests.get(f"{server.rest_url}/v1/models/viable/metadata", timeout=10).json()
    assert metadata["model_spec"] == {"name": "viable", "version": "1"}
    assert set(metadata["metadata"]["signature_def"]["signature_def"]) == set(signatures)
    health = health_pb2_grpc.HealthStub(client.channel)
    reply = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_prometheus_metrics(server, client):
    _good_request_succeeds(client)
    with pytest.raises(grpc.RpcError):
        client.predict(*_tasks(), model_name="nope")
    page = requests.get(f"{server.rest_url}/monitoring/prometheus/metrics", timeout=10).text
    assert ':tensorflow:serving:request_count_total{model_name="viable",status="OK"}' in page
    assert 'model_name="nope",status="NOT_FOUND"' in page
    assert ":tensorflow:serving:request_latency_bucket{" in page


# -- bad input, each answered precisely; the server stays up ----------------------------


def _grpc_error(client, inputs, **spec):
    request = client.request(inputs, model_name=spec.pop("model_name", "viable"), **spec)
    with pytest.raises(grpc.RpcError) as info:
        client.call(request)
    return info.value.code(), info.value.details()


def _good_inputs(**changes):
    support_x, support_y, query_x = _tasks()
    inputs = {"support_x": support_x, "support_y": support_y, "query_x": query_x}
    inputs.update(changes)
    return {k: v for k, v in inputs.items() if v is not None}


def _labels(**changes):
    """A request to the classifier (5-way, D = 8): labels 0..4, K = 10."""
    rng = np.random.default_rng(0)
    inputs = {
        "support_x": rng.normal(size=(2, 10, 8)).astype(np.float32),
        "support_y": np.tile(np.arange(5, dtype=np.int32), (2, 2)),
        "query_x": rng.normal(size=(2, 3, 8)).astype(np.float32),
    }
    inputs.update(changes)
    return {k: v for k, v in inputs.items() if v is not None}


def _bad_label(value, mask=None):
    labels = np.tile(np.arange(5, dtype=np.int32), (2, 2))
    labels[1, 3] = value
    return _labels(support_y=labels, **({} if mask is None else {"support_mask": mask}))


def _masked_out_last_point():
    mask = np.ones((2, 10), bool)
    mask[1, 3] = False
    return mask


INVALID, NOT_FOUND = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND

#: One table of bad requests, sent over gRPC (TensorProtos) and REST (columnar JSON):
#: (inputs, request spec, gRPC code, HTTP status, what the message must say).
BAD_REQUESTS = {
    "unknown model": (_good_inputs(), {"model_name": "nope"}, NOT_FOUND, 404, "Latest(nope)"),
    "unknown version": (_good_inputs(), {"version": 7}, NOT_FOUND, 404, "Specific(viable, 7)"),
    "unknown label": (_good_inputs(), {"label": "canary"}, INVALID, 400, "label: canary"),
    "unknown signature": (
        _good_inputs(),
        {"signature_name": "classify"},
        grpc.StatusCode.FAILED_PRECONDITION,
        400,
        '"classify" not found',
    ),
    "missing input": (_good_inputs(query_x=None), {}, INVALID, 400, "missing query_x"),
    "extra input": (
        _good_inputs(temperature=np.ones(2, np.float32)),
        {},
        INVALID,
        400,
        "unexpected temperature",
    ),
    "misnamed input": (
        _good_inputs(query_x=None, queries=_tasks()[2]),
        {},
        INVALID,
        400,
        "missing query_x; unexpected queries",
    ),
    "B disagrees": (_good_inputs(support_y=_tasks(b=3)[1]), {}, INVALID, 400, "number of tasks B"),
    "K disagrees": (_good_inputs(support_y=_tasks(k=9)[1]), {}, INVALID, 400, "support points K"),
    "D differs": (
        _good_inputs(support_x=np.zeros((2, 10, 3), np.float32)),
        {},
        INVALID,
        400,
        "support_x: expected shape float32 [?, ?, 1], got [2, 10, 3]",
    ),
    "NaN": (
        _good_inputs(query_x=np.full((2, 7, 1), np.nan, np.float32)),
        {},
        INVALID,
        400,
        "query_x contains NaN or Inf",
    ),
    "Inf": (
        _good_inputs(support_y=np.full((2, 10, 1), np.inf, np.float32)),
        {},
        INVALID,
        400,
        "support_y contains NaN or Inf",
    ),
    "empty batch": (
        _good_inputs(
            support_x=np.zeros((0, 10, 1), np.float32),
            support_y=np.zeros((0, 10, 1), np.float32),
            query_x=np.zeros((0, 7, 1), np.float32),
        ),
        {},
        INVALID,
        400,
        "empty request",
    ),
    "K above bound": (
        _good_inputs(support_x=_tasks(k=51)[0], support_y=_tasks(k=51)[1]),
        {},
        INVALID,
        400,
        "K = 51 support points exceeds",
    ),
    "Q above bound": (_good_inputs(query_x=_tasks(q=501)[2]), {}, INVALID, 400, "Q = 501"),
    "mask sent to serving_default": (
        _good_inputs(support_mask=np.ones((2, 10), bool)),
        {},
        INVALID,
        400,
        "unexpected support_mask. Expected inputs: query_x",
    ),
    "mask omitted on serving_masked": (
        _good_inputs(),
        {"signature_name": "serving_masked"},
        INVALID,
        400,
        "missing support_mask",
    ),
    "label above N": (_bad_label(5), {"model_name": "classifier"}, INVALID, 400, "0..4"),
    "negative label": (_bad_label(-1), {"model_name": "classifier"}, INVALID, 400, "0..4"),
    "bad label on a real point": (
        _bad_label(9, np.ones((2, 10), bool)),
        {"model_name": "classifier", "signature_name": "serving_masked"},
        INVALID,
        400,
        "support_y must hold class labels 0..4",
    ),
}


def _rest_path(spec: dict) -> str:
    path = f"/v1/models/{spec.get('model_name', 'viable')}"
    if "version" in spec:
        path += f"/versions/{spec['version']}"
    elif "label" in spec:
        path += f"/labels/{spec['label']}"
    return path + ":predict"


def _rest_columnar(inputs: dict, spec: dict) -> dict:
    body = {"inputs": {name: value.tolist() for name, value in inputs.items()}}
    if "signature_name" in spec:
        body["signature_name"] = spec["signature_name"]
    return body


@pytest.mark.parametrize("protocol", ["grpc", "rest"])
@pytest.mark.parametrize("case", sorted(BAD_REQUESTS))
def test_bad_request_is_refused_alike_over_grpc_and_rest(server, client, case, protocol):
    inputs, spec, code, status, message = BAD_REQUESTS[case]
    if protocol == "grpc":
        got_code, details = _grpc_error(client, inputs, **dict(spec))
        assert got_code == code, details
    else:
        response = _rest(server, _rest_columnar(inputs, spec), _rest_path(spec))
        assert response.status_code == status, response.text
        details = response.json()["error"]
    assert message in details
    _good_request_succeeds(client)


def test_a_label_on_a_masked_out_point_is_not_checked(server, client):
    """Padding may hold anything: only real points' labels must be 0..N-1."""
    inputs = _bad_label(9, _masked_out_last_point())
    grpc_answer = client.call(
        client.request(inputs, model_name="classifier", signature_name="serving_masked")
    )
    body = _rest_columnar(inputs, {"signature_name": "serving_masked"})
    rest_answer = _rest(server, body, "/v1/models/classifier:predict")
    assert rest_answer.status_code == 200, rest_answer.text
    np.testing.assert_allclose(
        rest_answer.json()["outputs"]["logits"], grpc_answer["logits"], atol=1e-5
    )


#: Bad requests that only one protocol can carry.
GRPC_ONLY = {
    "wrong dtype": (
        {"support_x": _tasks()[0].astype(np.float64)},
        grpc.StatusCode.INVALID_ARGUMENT,
        "support_x: expected dtype float32, got float64",
    ),
    "over size limit": (
        {"query_x": np.zeros((2, 40_000, 1), np.float32)},
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "larger than max",
    ),
}


@pytest.mark.parametrize("case", sorted(GRPC_ONLY))
def test_grpc_only_bad_input(client, case):
    changes, code, message = GRPC_ONLY[case]
    got_code, details = _grpc_error(client, _good_inputs(**changes))
    assert got_code == code, details
    assert message in details
    _good_request_succeeds(client)


def _rest(server, body, path="/v1/models/viable:predict", raw=None):
    url = server.rest_url + path
    if raw is not None:
        return requests.post(url, data=raw, timeout=30)
    return requests.post(url, data=json.dumps(body), timeout=30)


def _row(**changes):
    support_x, support_y, query_x = _tasks(b=1)
    instance = {
        "support_x": support_x[0].tolist(),
        "support_y": support_y[0].tolist(),
        "query_x": query_x[0].tolist(),
    }
    instance.update(changes)
    return {"instances": [{k: v for k, v in instance.items() if v is not None}]}


#: Bad requests that only JSON can carry (the row format, JSON's own types).
REST_ONLY = {
    "wrong dtype": (_row(query_x=[["a"]] * 7), None, 400, "expected float32 values, got strings"),
    "bool for float": (_row(query_x=[[True]] * 7), None, 400, "got booleans"),
    "ragged": (_row(query_x=[[1.0], [2.0, 3.0]]), None, 400, "ragged"),
    "row K disagrees": (_row(support_y=[[0.0]] * 9), None, 400, "support points K"),
    "empty instances": ({"instances": []}, None, 400, '"instances" is empty'),
    "empty columnar inputs": ({"inputs": {}}, None, 400, "missing"),
    "neither instances nor inputs": ({"rows": []}, None, 400, 'exactly one of "instances"'),
    "instances disagree": (
        {"instances": [_row()["instances"][0], {"support_x": [[1.0]]}]},
        None,
        400,
        "every instance must name the same inputs",
    ),
    "columnar B disagrees": (
        {
            "inputs": {
                "support_x": [[[1.0]]] * 2,
                "support_y": [[[1.0]]] * 3,
                "query_x": [[[0.0]]] * 2,
            }
        },
        None,
        400,
        "number of tasks B",
    ),
    "classify verb": (_row(), "/v1/models/viable:classify", 501, ":classify is not implemented"),
    "malformed path": (_row(), "/v1/models/viable/versions/x:predict", 400, "version must be"),
}


@pytest.mark.parametrize("case", sorted(REST_ONLY))
def test_rest_only_bad_input(server, client, case):
    body, path, status, message = REST_ONLY[case]
    response = _rest(server, body, path or "/v1/models/viable:predict")
    assert response.status_code == status, response.text
    assert message in response.json()["error"]
    _good_request_succeeds(client)


def test_rest_malformed_json_and_size_limit(server, client):
    response = _rest(server, None, raw=b'{"instances": [')
    assert response.status_code == 400 and "JSON Parse error" in response.json()["error"]
    response = _rest(server, None, raw=b"x" * (MAX_BYTES + 1))
    assert response.status_code == 429 and "over the server's limit" in response.json()["error"]
    chunked = requests.post(  # no Content-Length: stopped while reading
        f"{server.rest_url}/v1/models/viable:predict",
        data=iter([b"[" * 100_000] * 4),
        timeout=30,
    )
    assert chunked.status_code == 429
    _good_request_succeeds(client)


def test_unimplemented_rpcs(client):
    with pytest.raises(grpc.RpcError) as info:
        client.prediction.Classify(classification_pb2.ClassificationRequest(), timeout=10)
    assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
    _good_request_succeeds(client)


# -- versions ---------------------------------------------------------------------------


@pytest.mark.slow
def test_new_version_swaps_in_without_dropping_requests_and_broken_one_is_reported(tmp_path):
    base = tmp_path / "viable"
    learner = VIABLE(input_dim=1, output_dim=1)
    export_saved_model(learner, str(base), version=1)
    running = RunningServer(
        ServerOptions(
            models=[model_config("viable", str(base))], port=0, rest_api_port=None, poll_seconds=0.2
        )
    )
    client = Client(running.grpc_target)
    errors, versions, per_thread, stop = [], [], [], threading.Event()

    def hammer():
        mine = []
        per_thread.append(mine)
        support_x, support_y, query_x = _tasks()
        request = client.request(
            {"support_x": support_x, "support_y": support_y, "query_x": query_x},
            model_name="viable",
        )
        while not stop.is_set():
            try:
                version = client.prediction.Predict(request, timeout=30).model_spec.version.value
                versions.append(version)
                mine.append(version)
            except grpc.RpcError as error:  # any failure during the swap is a dropped request
                errors.append(error.details())

    try:
        threads = [threading.Thread(target=hammer) for _ in range(4)]
        for thread in threads:
            thread.start()
        _wait_for(lambda: len(versions) > 10, "answers from version 1")
        learner.network.kernel_1.assign(learner.network.kernel_1 * 1.5)  # a different model
        export_saved_model(learner, str(base), version=2)  # appears atomically
        _wait_for(lambda: versions and versions[-1] == 2, "answers from version 2")
        count = len(versions)
        _wait_for(lambda: len(versions) > count + 10, "more answers from version 2")
        # A broken version 3: its saved_model.pb is garbage.
        shutil.copytree(base / "2", tmp_path / "staging3")
        (tmp_path / "staging3" / "saved_model.pb").write_bytes(b"not a SavedModel")
        os.rename(tmp_path / "staging3", base / "3")
        _wait_for(
            lambda: (
                {s["version"]: s for s in client.status("viable")}.get("3", {}).get("state")
                == "END"
            ),
            "version 3 reported as failed",
        )
        count = len(versions)
        _wait_for(lambda: len(versions) > count + 10, "answers after the failed load")
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert not errors, errors[:3]
    assert versions[0] == 1 and versions[-1] == 2 and len(versions) > 20
    assert all(seen == sorted(seen) for seen in per_thread)  # once swapped, never back
    statuses = {s["version"]: s for s in client.status("viable")}
    assert statuses["2"]["state"] == "AVAILABLE"
    assert statuses["1"]["state"] == "END"
    assert statuses["3"]["state"] == "END"
    assert "failed to load version 3" in statuses["3"]["status"]["error_message"]
    assert statuses["3"]["status"]["error_code"] == "UNKNOWN"
    client.close()
    running.stop()


def _wait_for(condition, what: str, timeout: float = 60.0) -> None:
    """Waits until `condition()` holds (polled), failing with `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _reload(client, base: str, versions, **labels) -> None:
    from tensorflow_serving.apis import model_management_pb2
    from tensorflow_serving.config import model_server_config_pb2

    config = model_config("viable", base, **labels)
    config.model_version_policy.specific.versions.extend(versions)
    request = model_management_pb2.ReloadConfigRequest(
        config=model_server_config_pb2.ModelServerConfig(
            model_config_list=model_server_config_pb2.ModelConfigList(config=[config])
        )
    )
    client.models.HandleReloadConfigRequest(request, timeout=120)


@pytest.mark.slow
def test_canary_then_stable_over_grpc_and_rest_with_batching_drops_nothing(tmp_path):
    """The TF Serving way to roll out a version: load it beside the old one (canary),
    then move the `stable` label to it by a config reload. Traffic by label over both
    protocols, batched, never fails; each version is warmed up before its first request."""
    base = tmp_path / "viable"
    learner = VIABLE(input_dim=1, output_dim=1)
    export_saved_model(learner, str(base), version=1)
    config = model_config("viable", str(base), stable=1)
    config.model_version_policy.specific.versions.append(1)
    running = RunningServer(
        ServerOptions(
            models=[config],
            port=0,
            rest_api_port=0,
            poll_seconds=0.2,
            batching=BatchingOptions(max_batch_size=8, batch_timeout_micros=2_000),
        )
    )
    client = Client(running.grpc_target)
    errors, seen, stop = [], {"grpc": [], "rest": []}, threading.Event()
    support_x, support_y, query_x = _tasks()
    body = {
        "inputs": {
            "support_x": support_x.tolist(),
            "support_y": support_y.tolist(),
            "query_x": query_x.tolist(),
        }
    }
    answers = {}

    def by_label(protocol, worker):
        while not stop.is_set():
            try:
                if protocol == "grpc":
                    request = client.request(
                        {"support_x": support_x, "support_y": support_y, "query_x": query_x},
                        model_name="viable",
                        label="stable",
                    )
                    response = client.prediction.Predict(request, timeout=30)
                    version = response.model_spec.version.value
                    answer = tf.make_ndarray(response.outputs["predictions"])
                else:
                    reply = requests.post(
                        f"{running.rest_url}/v1/models/viable/labels/stable:predict",
                        json=body,
                        timeout=30,
                    )
                    if reply.status_code != 200:
                        errors.append(reply.text)
                        continue
                    answer = np.asarray(reply.json()["outputs"]["predictions"])
                    version = None  # REST answers carry no version: told by the numbers
                seen[protocol].append((version, answer, worker))
            except grpc.RpcError as error:  # any failure during a swap is a dropped request
                errors.append(error.details())

    threads = [
        threading.Thread(target=by_label, args=(p, worker))
        for worker, p in enumerate(("grpc", "rest") * 2)
    ]
    try:
        for thread in threads:
            thread.start()
        _wait_for(lambda: len(seen["grpc"]) > 5 and len(seen["rest"]) > 5, "first answers")
        learner.network.kernel_1.assign(learner.network.kernel_1 * 1.5)  # another model
        export_saved_model(learner, str(base), version=2)
        _reload(client, str(base), [1, 2], stable=1, canary=2)  # load 2 beside 1
        servables = running.server.manager.models["viable"].servables
        assert sorted(servables) == [1, 2]
        assert servables[1].warmed_up == servables[2].warmed_up == 3  # replayed, counted
        canary = client.predict(support_x, support_y, query_x, label="canary")["predictions"]
        answers[1] = seen["grpc"][-1][1]
        answers[2] = canary
        assert not np.allclose(answers[1], answers[2])
        _reload(client, str(base), [1, 2], stable=2, canary=2)  # stable follows
        count = len(seen["grpc"])
        _wait_for(lambda: len(seen["grpc"]) > count + 10, "answers by the new label")
        with pytest.raises(grpc.RpcError) as info:  # a label must name an available version
            _reload(client, str(base), [2], stable=1)
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "version 1, which is not available" in info.value.details()
        count = len(seen["rest"])
        _wait_for(lambda: len(seen["rest"]) > count + 10, "answers after the refused reload")
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        client.close()
        running.stop()
    assert not errors, errors[:3]
    grpc_versions = [version for version, _, _ in seen["grpc"]]
    assert grpc_versions[0] == 1 and grpc_versions[-1] == 2
    # Once moved, never back: each client thread's requests, sent one after the other,
    # see versions in order. (Across threads the list is in order of completion: a
    # request resolved to 1 just before the move may finish after another's on 2.)
    for worker in {w for _, _, w in seen["grpc"]}:
        versions = [version for version, _, w in seen["grpc"] if w == worker]
        assert versions == sorted(versions), (worker, versions)
    for protocol in ("grpc", "rest"):
        first, last = seen[protocol][0][1], seen[protocol][-1][1]
        np.testing.assert_allclose(first, answers[1], atol=1e-5)
        np.testing.assert_allclose(last, answers[2], atol=1e-5)
    assert running.server.service.batcher.batches_run > 0


# -- batching ---------------------------------------------------------------------------


def test_batching_merges_requests_and_answers_each_exactly(model, client):
    _, base = model
    running = RunningServer(
        ServerOptions(
            models=[model_config("viable", base)],
            port=0,
            rest_api_port=None,
            batching=BatchingOptions(
                max_batch_size=8, batch_timeout_micros=20_000, num_batch_threads=1
            ),
        )
    )
    batched = Client(running.grpc_target)
    requests_ = []
    for i in range(24):  # different K and Q per request: padded on merge
        support_x, support_y, query_x = _tasks(b=1 + i % 2, k=3 + i % 5, q=4 + i % 3, seed=i)
        mask = np.ones(support_x.shape[:2], bool)
        mask[0, -1] = i % 3 != 0
        # serving_default (no mask) and serving_masked requests merge into one call
        requests_.append((support_x, support_y, query_x, mask if i % 2 else None))
    queued, answers = running.merged(
        lambda r: batched.predict(r[0], r[1], r[2], support_mask=r[3]), requests_
    )
    assert queued == 24
    # 36 tasks in batches of at most 8: 5 calls if packed perfectly; a request that does
    # not fit closes the batch, so up to 24 / 2 in the worst arrival order.
    calls = running.server.service.batcher.batches_run
    assert 5 <= calls <= 12, calls
    for (support_x, support_y, query_x, mask), answer in zip(requests_, answers, strict=True):
        alone = client.predict(support_x, support_y, query_x, support_mask=mask)
        assert answer["predictions"].shape == alone["predictions"].shape
        np.testing.assert_allclose(answer["predictions"], alone["predictions"], atol=1e-5)
        np.testing.assert_allclose(answer["context"], alone["context"], atol=1e-5)
    batched.close()
    running.stop()


def test_predict_request_proto_round_trip_of_outputs(client):
    """output_filter is honoured, and an unknown output is named."""
    request = client.request(_good_inputs(), model_name="viable")
    request.output_filter.append("context")
    response = client.prediction.Predict(request, timeout=30)
    assert set(response.outputs) == {"context"}
    assert tf.make_ndarray(response.outputs["context"]).shape == (2, 5)
    bad = predict_pb2.PredictRequest()
    bad.CopyFrom(request)
    bad.output_filter.append("logits")
    with pytest.raises(grpc.RpcError) as info:
        client.prediction.Predict(bad, timeout=30)
    assert "unknown outputs logits" in info.value.details()


def test_client_command_line(server, monkeypatch, capsys):
    from serving import client as client_cli

    def run(*argv):
        monkeypatch.setattr("sys.argv", ["viable-client", f"--target={server.grpc_target}", *argv])
        try:
            client_cli.main()
        except SystemExit as exit_info:
            return exit_info.code, capsys.readouterr()
        return 0, capsys.readouterr()

    code, out = run("--model_name=viable", "sine", "--num_support=5")
    assert code == 0 and "MSE over 100 points" in out.out
    code, out = run("--model_name=viable", "sine", "--num_support=5", "--outliers=2")
    assert code == 0 and "K=5 (2 outliers): MSE over 100 points of the clean curve" in out.out
    code, _ = run("--model_name=viable", "sine", "--num_support=5", "--outliers=6")
    assert "--outliers must be in [0, --num_support=5], got 6" in str(code)
    code, out = run("--model_name=viable", "status")
    assert code == 0 and json.loads(out.out)[0]["state"] == "AVAILABLE"
    code, out = run("--model_name=nope", "status")
    assert code == 1 and out.err.startswith("viable-client: NOT_FOUND:")


def test_fast_calls_run_on_the_event_loop_and_slow_ones_on_the_pool(server, client):
    service = server.server.service
    _good_request_succeeds(client)  # the signature's cost is known from here on
    before = service.inline_calls
    service.inline_below = 1.0  # every call counts as fast (this machine may be busy)
    try:
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda _: client.predict(*_tasks()), range(32)))
        assert all(a["predictions"].shape == (2, 7, 1) for a in answers)
        assert service.inline_calls - before == 32  # no hand-off to a thread
        service.inline_below = 0.0  # as with --inline_below_ms=0: every call on the pool
        _good_request_succeeds(client)
        assert service.inline_calls - before == 32
    finally:
        service.inline_below = 0.002


@pytest.mark.parametrize(
    "value",
    [
        np.arange(12, dtype=np.float32).reshape(2, 3, 2),
        np.zeros((2, 0, 1), np.float32),
        np.array([[True, False]]),
        np.array([[1, -2, 3]], np.int32),
        np.array([7], np.int64),
        np.float64(2.5),
        np.array(["a", "b"]),
    ],
    ids=["float32", "empty", "bool", "int32", "int64", "scalar", "strings"],
)
def test_tensor_conversions_agree_with_tensorflows(value):
    from serving.tensors import from_proto, to_proto

    theirs = tf.make_tensor_proto(value)
    expected = tf.make_ndarray(theirs)
    ours = tf.make_ndarray(to_proto(value))  # TF reads what we write
    assert ours.dtype == expected.dtype and ours.shape == expected.shape
    np.testing.assert_array_equal(ours, expected)
    decoded = from_proto(theirs)  # we read what TF writes
    assert decoded.dtype == expected.dtype and decoded.shape == expected.shape
    np.testing.assert_array_equal(decoded, expected)


def test_a_tensor_content_of_the_wrong_length_is_invalid_argument(client):
    request = client.request(_good_inputs(), model_name="viable")
    request.inputs["query_x"].tensor_content = request.inputs["query_x"].tensor_content[:-4]
    with pytest.raises(grpc.RpcError) as info:
        client.call(request)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "input query_x: cannot decode TensorProto" in info.value.details()
    _good_request_succeeds(client)
