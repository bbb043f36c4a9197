"""Images in, labels out: an end-to-end image classifier exported with the drawings'
preprocessing in its graph, taking them as tensors or as PNG files (serving_png), served
by viable-serve over gRPC and REST ({"b64": ...}), with its bad-input table."""

import base64
import json
import os
import struct
import zlib

import grpc
import numpy as np
import pytest
import requests
import tensorflow as tf
from image_models import DATA_DIR, WAYS, export_image_classifier, image_learner
from serving_harness import RunningServer, model_config

from serving.batching import BatchingOptions
from serving.checks import Limits
from serving.client import Client
from serving.omniglot_client import omniglot_episode
from serving.rest_client import json_value
from serving.server import ServerOptions
from viable_tf.datasets import omniglot
from viable_tf.export import pngs as pngs_module
from viable_tf.export import signature as sig
from viable_tf.export.pngs import decode_png, encode_pngs
from viable_tf.networks import omniglot_encoder

MAX_BYTES = 4 << 20


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    root = tmp_path_factory.mktemp("image_export")
    base = str(root / "glyphs")
    return base, export_image_classifier(base, str(root / "examples"))


@pytest.fixture(scope="module")
def loaded(export):
    return tf.saved_model.load(export[1])


@pytest.fixture(scope="module")
def server(export):
    running = RunningServer(
        ServerOptions(
            models=[model_config("glyphs", export[0])],
            port=0,
            rest_api_port=0,
            max_request_bytes=MAX_BYTES,
            limits=Limits(max_image_pixels=200 * 105 * 105),
        )
    )
    yield running
    running.stop()


def _episode(seed=0, ways=WAYS, shots=1, queries=2):
    return omniglot_episode(DATA_DIR, ways, shots, queries, seed)


def _pngs(images):
    return encode_pngs(images)


def _call_pngs(loaded, support_x, support_y, query_x):
    """serving_png in process, the drawings sent as the PNG files of their pixels."""
    return _call(
        loaded,
        "serving_png",
        support_png=_pngs(support_x),
        support_y=support_y,
        query_png=_pngs(query_x),
    )


def _call(loaded, signature, **inputs):
    tensors = {
        k: tf.constant(v, tf.string if v.dtype == object else None) for k, v in inputs.items()
    }
    outputs = loaded.signatures[signature](**tensors)
    return {k: v.numpy() for k, v in outputs.items()}


@pytest.mark.slow
def test_the_png_signature_answers_exactly_as_the_tensor_one(loaded):
    support_x, support_y, query_x, _ = _episode()
    tensors = _call(
        loaded, "serving_default", support_x=support_x, support_y=support_y, query_x=query_x
    )
    pngs = _call_pngs(loaded, support_x, support_y, query_x)
    for name in ("logits", "probabilities", "classes", "context"):
        np.testing.assert_array_equal(pngs[name], tensors[name])
    assert tensors["classes"].shape == (1, WAYS * 2)
    # As Omniglot's own files are written: 1-bit grey PNGs (the drawings are 0 or 1).
    one_bit = _call(
        loaded,
        "serving_png",
        support_png=_one_bit_pngs(support_x),
        support_y=support_y,
        query_png=_one_bit_pngs(query_x),
    )
    np.testing.assert_array_equal(one_bit["logits"], tensors["logits"])


def _one_bit_pngs(images):
    """Drawings [1, P, H, W, 1] of 0 and 1 -> [1, P] 1-bit grey PNG files, by Pillow."""
    import io

    from PIL import Image

    assert set(np.unique(images)) <= {0.0, 1.0}
    files = np.empty(images.shape[:2], object)
    for i, image in enumerate(images[0]):
        buffer = io.BytesIO()
        Image.fromarray(image[..., 0] > 0.5).save(buffer, "PNG")
        assert buffer.getvalue()[24] == 1  # IHDR's bit depth
        files[0, i] = buffer.getvalue()
    return files


def test_the_served_graph_is_the_learner_behind_the_training_preprocessing(loaded):
    """The export's answer is the learner's on the 784 strokes that training reads (the
    drawings resized to 28 x 28 and inverted, as the end-to-end episodes read them)."""
    support_x, support_y, query_x, _ = _episode(seed=1)
    learner = image_learner()  # the same seed: the exported weights

    def features(images):
        strokes = omniglot_encoder.OmniglotPreprocessing()(images.reshape(-1, 105, 105, 1))
        return tf.reshape(strokes, [1, -1, 784])

    state = learner.adapt(features(support_x), support_y, tf.ones(support_y.shape, tf.bool))
    expected = learner.predict(state, features(query_x)).numpy()
    served = _call(
        loaded, "serving_default", support_x=support_x, support_y=support_y, query_x=query_x
    )
    np.testing.assert_allclose(served["logits"], expected, rtol=1e-5, atol=1e-5)


def test_pngs_of_any_size_and_colour_type_are_read_as_drawings_on_white():
    drawing = np.ones((105, 105, 1), np.float32)
    drawing[20:80, 50:54] = 0.0  # a black bar
    gray = encode_pngs(drawing)[()]
    np.testing.assert_array_equal(decode_png(gray), drawing)
    # RGBA with a transparent background: the strokes over white paper
    rgba = np.zeros((105, 105, 4), np.uint8)
    rgba[20:80, 50:54] = [0, 0, 0, 255]
    np.testing.assert_array_equal(decode_png(tf.io.encode_png(rgba).numpy()), drawing)
    # RGB, opaque: gray values pass exactly
    rgb = np.repeat((drawing * 255).astype(np.uint8), 3, axis=-1)
    np.testing.assert_array_equal(decode_png(tf.io.encode_png(rgb).numpy()), drawing)


@pytest.mark.parametrize("bits", [1, 2, 4])
def test_pngs_of_fewer_than_8_bits_a_sample_are_read_as_pillow_reads_them(bits):
    """Grey and palette PNGs of 1, 2 and 4 bits a sample (Omniglot's drawings are 1-bit
    grey files), with and without a palette's transparency, are read as training reads
    Pillow's decoding of them. TensorFlow's `decode_png(channels=4)` gives such a file the
    alpha 2^bits - 1 in place of 255, which laid every pixel nearly transparent over white:
    the served graph read Omniglot's files as blank pages (0.996 for the strokes)."""
    import io

    from PIL import Image

    from viable_tf.image_decoding import convert_all

    rng = np.random.default_rng(bits)
    levels = 2**bits
    index = rng.integers(0, levels, size=(9, 11)).astype(np.uint8)
    palette = rng.integers(0, 256, size=(levels, 3)).astype(np.uint8)
    alphas = bytes(rng.integers(0, 256, size=levels).astype(np.uint8))
    grey = (
        Image.fromarray(index > 0) if bits == 1 else Image.fromarray(index * (255 // (levels - 1)))
    )
    paletted = Image.fromarray(index, "P")
    paletted.putpalette(palette.ravel().tolist())
    for image, options in (
        (grey, {} if bits == 1 else {"bits": bits}),
        (paletted, {"bits": bits}),
        (paletted, {"bits": bits, "transparency": alphas}),
    ):
        buffer = io.BytesIO()
        image.save(buffer, "PNG", **options)
        data = buffer.getvalue()
        assert data[24] == bits  # IHDR's bit depth: the file is what the case says
        rgba = np.asarray(Image.open(io.BytesIO(data)).convert("RGBA"))
        for channels in (1, 3):
            expected = convert_all([rgba], (9, 11), channels)[0]
            np.testing.assert_array_equal(decode_png(data, channels), expected)


def test_a_jpeg_is_read_as_a_png_is_and_its_size_checked_from_its_header(loaded):
    """serving_png takes JPEG files too: decoded in the graph as `decode_png` decodes
    them (colour, then grey by luma), answered as their decoded tensors are; their size
    is read from the start-of-frame segment at the boundary and in the graph."""
    support_x, support_y, query_x, _ = _episode(seed=2)

    def jpegs(x):  # [1, P, 105, 105, 1] in 0..1 -> [1, P] colour JPEG files
        files = np.empty((1, x.shape[1]), object)
        for i in range(x.shape[1]):
            rgb = np.repeat(np.round(x[0, i] * 255).astype(np.uint8), 3, -1)
            files[0, i] = tf.io.encode_jpeg(rgb, quality=90).numpy()
        return files

    support, query = jpegs(support_x), jpegs(query_x)
    assert sig.image_size(support[0, 0]) == (105, 105) and sig.check_pngs("q", query) is None
    as_read = lambda files: np.stack([decode_png(f) for f in files[0]])[None]  # noqa: E731
    decoded = tf.function(lambda s: pngs_module.decode_pngs("q", s, (105, 105, 1)))(
        tf.constant(support, tf.string)
    ).numpy()
    np.testing.assert_array_equal(decoded, as_read(support))
    tensors = _call(
        loaded,
        "serving_default",
        support_x=as_read(support),
        support_y=support_y,
        query_x=as_read(query),
    )
    served = _call(loaded, "serving_png", support_png=support, support_y=support_y, query_png=query)
    np.testing.assert_array_equal(served["logits"], tensors["logits"])
    wide = tf.io.encode_jpeg(np.zeros((1, 2000, 3), np.uint8)).numpy()
    assert sig.jpeg_size(wide) == (2000, 1)
    assert "is a 2000 x 1 image" in sig.check_pngs("query_png", np.array([wide], object))
    with pytest.raises(tf.errors.InvalidArgumentError, match="larger than 1024"):
        pngs_module.decode_pngs("q", tf.constant([[wide]]), (105, 105, 1))
    assert sig.jpeg_size(b"\xff\xd8\xff\xe0 truncated") is None


def test_a_larger_png_is_resized_to_the_input_by_area(loaded):
    support_x, support_y, query_x, _ = _episode(seed=2)
    big = np.repeat(np.repeat(query_x, 2, axis=2), 2, axis=3)  # 210 x 210, each pixel 2 x 2
    small = _call_pngs(loaded, support_x, support_y, query_x)
    large = _call_pngs(loaded, support_x, support_y, big)
    np.testing.assert_allclose(large["logits"], small["logits"], rtol=1e-5, atol=1e-5)


def test_empty_queries_are_answered_and_an_empty_support_set_is_refused(loaded):
    support_x, support_y, _, _ = _episode()
    empty = np.zeros((1, 0), object)
    out = _call(
        loaded, "serving_png", support_png=_pngs(support_x), support_y=support_y, query_png=empty
    )
    assert out["logits"].shape == (1, 0, WAYS) and out["classes"].shape == (1, 0)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"every class 0\.\.4"):
        _call(
            loaded,
            "serving_png",
            support_png=empty,
            support_y=np.zeros((1, 0), np.int32),
            query_png=_pngs(support_x),
        )


def test_the_export_names_its_signatures_examples_and_licence(export):
    version = export[1]
    extra = os.path.join(version, "assets.extra")
    with open(os.path.join(extra, "viable_model.json")) as f:
        description = json.load(f)
    assert {"serving_png", "serving_png_masked", "serving_default"} <= set(
        description["signatures"]
    )
    assert description["every_class"] == sig.IMAGE_CLASSES_REASON
    assert description["input_shape"] == [105, 105, 1]
    with open(os.path.join(extra, "examples", "index.json")) as f:
        index = json.load(f)
    assert len(index["characters"]) == 8
    for character in index["characters"]:
        assert character["name"].split(".")[0] in omniglot.ALPHABETS["test"]
        for file in character["files"]:
            with open(os.path.join(extra, "examples", file), "rb") as f:
                assert sig.png_size(f.read()) == (105, 105)
    with open(os.path.join(extra, "examples", "LICENSE")) as f:
        assert "MIT License" in f.read()


@pytest.mark.slow
def test_served_over_grpc_and_rest_as_pngs_and_tensors_alike(server, client, loaded):
    support_x, support_y, query_x, _ = _episode(seed=3)
    local = _call(
        loaded, "serving_default", support_x=support_x, support_y=support_y, query_x=query_x
    )
    over_grpc = client.predict_pngs(
        _pngs(support_x), support_y, _pngs(query_x), model_name="glyphs"
    )
    np.testing.assert_array_equal(over_grpc["logits"], local["logits"])
    body = {
        "signature_name": "serving_png",
        "inputs": {
            "support_png": json_value(_pngs(support_x)),
            "support_y": support_y.tolist(),
            "query_png": json_value(_pngs(query_x)),
        },
    }
    answer = requests.post(f"{server.rest_url}/v1/models/glyphs:predict", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    outputs = answer.json()["outputs"]
    assert outputs["classes"] == local["classes"].tolist()
    np.testing.assert_allclose(outputs["logits"], local["logits"], rtol=1e-6)
    # row format ("instances"), one task per instance, as TF Serving's REST API takes it
    rows = {
        "signature_name": "serving_png",
        "instances": [
            {
                "support_png": json_value(_pngs(support_x))[0],
                "support_y": support_y[0].tolist(),
                "query_png": json_value(_pngs(query_x))[0],
            }
        ],
    }
    answer = requests.post(f"{server.rest_url}/v1/models/glyphs:predict", json=rows, timeout=60)
    assert answer.status_code == 200, answer.text
    assert answer.json()["predictions"][0]["classes"] == local["classes"][0].tolist()
    # the masked form: padding drawings are masked out exactly
    pad = np.ones((1, 2, 105, 105, 1), np.float32)
    masked = client.predict_pngs(
        _pngs(np.concatenate([support_x, pad], axis=1)),
        np.concatenate([support_y, [[0, 0]]], axis=1),
        _pngs(query_x),
        support_mask=np.array([[True] * WAYS + [False, False]]),
        model_name="glyphs",
    )
    np.testing.assert_allclose(masked["logits"], local["logits"], rtol=1e-5, atol=1e-5)


def _png_header(width: int, height: int) -> bytes:
    """A PNG's signature and IHDR chunk claiming width x height (no image data)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    return (
        sig.PNG_MAGIC + struct.pack(">I", len(ihdr)) + chunk + struct.pack(">I", zlib.crc32(chunk))
    )


def _bad_cases():
    support_x, support_y, query_x, _ = _episode(seed=4)
    good = {
        "support_png": _pngs(support_x),
        "support_y": support_y,
        "query_png": _pngs(query_x),
    }
    not_png = good["support_png"].copy()
    not_png[0, 2] = b"GIF89a, not a PNG at all"
    huge = good["query_png"].copy()
    huge[0, 1] = _png_header(5000, 5000)
    truncated = good["query_png"].copy()
    truncated[0, 3] = truncated[0, 3][:100]  # a whole header, its image data cut
    many = np.full((1, 60), _png_header(1000, 1000), dtype=object)
    missing = support_y.copy()
    missing[0, 1] = 0  # class 1 has no drawing
    outside = support_y.copy()
    outside[0, 0] = WAYS
    return {
        "a string that is not a PNG": (
            {**good, "support_png": not_png},
            "support_png[0, 2] is not a PNG",
        ),
        "a PNG too large on a side": (
            {**good, "query_png": huge},
            "query_png[0, 1] is a 5000 x 5000 image",
        ),
        "more decoded pixels than the bound": ({**good, "query_png": many}, "--max_image_pixels"),
        # Past the boundary's checks: the decoder's own words, not TensorFlow's wrapper.
        "a PNG cut short": ({**good, "query_png": truncated}, "Invalid PNG data, size 100"),
        "a label outside 0..N-1": ({**good, "support_y": outside}, "class labels 0..4"),
        "a class with no support drawing": (
            {**good, "support_y": missing},
            "class 1 has none in task 0",
        ),
        "mismatched support lengths": (
            {**good, "support_y": support_y[:, :3]},
            "disagree on the number of support points K",
        ),
    }


BAD = _bad_cases()


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_png_requests_are_refused_by_name_over_both_protocols(server, client, export, case):
    inputs, message = BAD[case]
    before = sorted(os.walk(export[0]))
    request = client.request(inputs, model_name="glyphs", signature_name="serving_png")
    with pytest.raises(grpc.RpcError) as info:
        client.call(request)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in info.value.details()
    body = {
        "signature_name": "serving_png",
        "inputs": {k: json_value(np.asarray(v)) for k, v in inputs.items()},
    }
    answer = requests.post(f"{server.rest_url}/v1/models/glyphs:predict", json=body, timeout=60)
    assert answer.status_code == 400 and message in answer.json()["error"]
    assert sorted(os.walk(export[0])) == before  # nothing written to the model directory
    support_x, support_y, query_x, _ = _episode()
    assert client.predict_pngs(_pngs(support_x), support_y, _pngs(query_x), model_name="glyphs")[
        "classes"
    ].shape == (1, 10)  # still serving


def test_bad_tensor_and_rest_encodings_are_refused_by_name(server):
    support_x, support_y, query_x, _ = _episode()
    url = f"{server.rest_url}/v1/models/glyphs:predict"
    rgb = np.repeat(support_x, 3, axis=-1)
    nan = query_x.copy()
    nan[0, 0, 5, 5, 0] = np.nan
    cases = {
        "wrong channel count": (
            {
                "inputs": {
                    "support_x": rgb.tolist(),
                    "support_y": support_y.tolist(),
                    "query_x": query_x.tolist(),
                }
            },
            "support_x: expected shape float32 [?, ?, 105, 105, 1], got [1, 5, 105, 105, 3]",
        ),
        "NaN pixels": (  # JSON's NaN literal, as Python's json writes it
            {
                "inputs": {
                    "support_x": support_x.tolist(),
                    "support_y": support_y.tolist(),
                    "query_x": nan.tolist(),
                }
            },
            "query_x contains NaN",
        ),
        "b64 that is not base64": (
            {
                "signature_name": "serving_png",
                "inputs": {
                    "support_png": [[{"b64": "not base64!"}] * WAYS],
                    "support_y": support_y.tolist(),
                    "query_png": [[{"b64": "AAAA"}]],
                },
            },
            '"b64" holds a string that is not valid base64',
        ),
        "a number where a PNG goes": (
            {
                "signature_name": "serving_png",
                "inputs": {
                    "support_png": [[1] * WAYS],
                    "support_y": support_y.tolist(),
                    "query_png": [[{"b64": "AAAA"}]],
                },
            },
            "expected strings",
        ),
    }
    for case, (body, message) in cases.items():
        data = json.dumps(body)  # Python's json writes NaN as JSON's NaN literal
        answer = requests.post(
            url, data=data, headers={"Content-Type": "application/json"}, timeout=60
        )
        assert answer.status_code == 400 and message in answer.json()["error"], (case, answer.text)
    # NaN pixels over gRPC: named
    client = Client(server.grpc_target)
    try:
        with pytest.raises(grpc.RpcError) as info:
            client.predict(support_x, support_y, nan, model_name="glyphs")
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "query_x contains NaN" in info.value.details()
    finally:
        client.close()


def test_a_huge_png_payload_is_refused_by_the_size_limit(server, client):
    support_x, support_y, _, _ = _episode()
    noise = np.random.default_rng(0).integers(0, 256, (1024, 1024, 1), np.uint8)
    big = tf.io.encode_png(noise).numpy()  # ~1 MB, incompressible
    query = np.full((1, 6), big, dtype=object)
    request = client.request(
        {"support_png": _pngs(support_x), "support_y": support_y, "query_png": query},
        model_name="glyphs",
        signature_name="serving_png",
    )
    with pytest.raises(grpc.RpcError) as info:
        client.call(request)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    body = {
        "signature_name": "serving_png",
        "inputs": {
            "support_png": json_value(_pngs(support_x)),
            "support_y": support_y.tolist(),
            "query_png": json_value(query),
        },
    }
    answer = requests.post(f"{server.rest_url}/v1/models/glyphs:predict", json=body, timeout=60)
    # RESOURCE_EXHAUSTED, as TF Serving maps it over REST
    assert answer.status_code == 429 and "--max_request_bytes" in answer.json()["error"]


@pytest.mark.slow
def test_batched_png_requests_answer_each_exactly(export, loaded):
    running = RunningServer(
        ServerOptions(
            models=[model_config("glyphs", export[0])],
            port=0,
            rest_api_port=None,
            batching=BatchingOptions(
                max_batch_size=8, batch_timeout_micros=20_000, num_batch_threads=1
            ),
        )
    )
    batched = Client(running.grpc_target)
    try:
        episodes = [_episode(seed=s, shots=1 + s % 2, queries=1 + s % 3) for s in range(6)]
        queued, answers = running.merged(
            lambda e: batched.predict_pngs(_pngs(e[0]), e[1], _pngs(e[2]), model_name="glyphs"),
            episodes,
        )
        assert queued == 6 and running.server.service.batcher.batches_run < 6
        for (support_x, support_y, query_x, _), answer in zip(episodes, answers, strict=True):
            alone = _call(
                loaded, "serving_default", support_x=support_x, support_y=support_y, query_x=query_x
            )
            np.testing.assert_array_equal(answer["classes"], alone["classes"])
            np.testing.assert_allclose(answer["logits"], alone["logits"], rtol=1e-5, atol=1e-5)
    finally:
        batched.close()
        running.stop()


def test_the_rest_b64_form_round_trips_any_bytes():
    values = np.empty((1, 2), object)
    values[0, 0], values[0, 1] = b"\x00\x89PNG\x00", b""
    encoded = json_value(values)
    assert encoded == [[{"b64": base64.b64encode(b"\x00\x89PNG\x00").decode()}, {"b64": ""}]]


def test_a_conv_model_answers_an_empty_support_or_query_set_without_aborting(tmp_path):
    """The same learner on its 784 inputs (no featurizer, so K = 0 is allowed): with
    oneDNN, TensorFlow's graph convolutions on zero images give a wrong shape that
    aborts the process; the export branches around the networks instead."""
    from viable_tf.export import export_saved_model

    learner = image_learner()
    path = export_saved_model(learner, str(tmp_path))
    loaded = tf.saved_model.load(path)
    query = np.random.default_rng(0).uniform(size=(2, 3, 784)).astype(np.float32)
    prior = _call(
        loaded,
        "serving_default",
        support_x=np.zeros((2, 0, 784), np.float32),
        support_y=np.zeros((2, 0), np.int32),
        query_x=query,
    )
    context = learner.initial_state(2)
    expected = learner.predict(context, query)
    np.testing.assert_allclose(prior["logits"], expected, rtol=1e-5, atol=1e-6)
    no_query = _call(
        loaded,
        "serving_default",
        support_x=query,
        support_y=np.zeros((2, 3), np.int32),
        query_x=np.zeros((2, 0, 784), np.float32),
    )
    assert no_query["logits"].shape == (2, 0, WAYS)


def test_the_image_export_holds_standard_ops_only(export):
    from tensorflow.core.protobuf import saved_model_pb2
    from tensorflow.python.framework import op_def_registry

    with open(os.path.join(export[1], "saved_model.pb"), "rb") as f:
        graph = saved_model_pb2.SavedModel.FromString(f.read()).meta_graphs[0].graph_def
    ops = {node.op for node in graph.node}
    functions = {function.signature.name for function in graph.library.function}
    for function in graph.library.function:
        ops |= {node.op for node in function.node_def}
        assert "_XlaMustCompile" not in function.attr
    ops -= functions  # calls of the graph's own functions
    assert {"DecodePng", "Conv2D", "While"} <= ops
    unknown = {op for op in ops if op_def_registry.get(op) is None}
    assert not unknown, unknown  # every op is one TensorFlow registers (no custom kernel)
    assert not ops & {"PyFunc", "EagerPyFunc", "PyFuncStateless", "XlaLaunch"}
