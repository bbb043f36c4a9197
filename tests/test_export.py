"""The exported SavedModel: same numbers as the model in memory, TF Serving's layout."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import prediction_log_pb2

from viable_tf.export import export_saved_model, next_version
from viable_tf.learners import MAML, VIABLE
from viable_tf.networks import RelationLossNetwork

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FORBIDDEN_OPS = {"PyFunc", "EagerPyFunc", "PyFuncStateless", "XlaLaunch", "_XlaCompile", "_XlaRun"}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    learner = VIABLE(input_dim=1, output_dim=1, loss_network=RelationLossNetwork)
    base = str(tmp_path_factory.mktemp("export"))
    path = export_saved_model(
        learner, base, operative_config="NUM_STEPS = 1\n", metadata={"evaluation": {"mean": 0.5}}
    )
    return learner, path


def _task_batch(rng, b, k, q, masked=False):
    support_x = rng.uniform(-5, 5, (b, k, 1)).astype(np.float32)
    mask = np.ones((b, k), bool)
    if masked and k:
        mask[0, k // 2 :] = False
    return support_x, np.sin(support_x), mask, rng.uniform(-5, 5, (b, q, 1)).astype(np.float32)


@pytest.mark.parametrize(
    ("b", "k", "q", "masked"),
    [(1, 10, 100, False), (4, 3, 7, False), (2, 0, 5, False), (5, 20, 1, True)],
)
def test_reloaded_model_matches_the_model_in_memory(exported, b, k, q, masked):
    learner, path = exported
    signatures = tf.saved_model.load(path).signatures
    support_x, support_y, mask, query_x = _task_batch(np.random.default_rng(b + k), b, k, q, masked)
    if masked:
        outputs = signatures["serving_masked"](
            support_x=support_x, support_y=support_y, support_mask=mask, query_x=query_x
        )
    else:
        outputs = signatures["serving_default"](
            support_x=support_x, support_y=support_y, query_x=query_x
        )
    state = learner.adapt(support_x, support_y, mask)
    np.testing.assert_allclose(outputs["predictions"], learner.predict(state, query_x), atol=1e-5)
    np.testing.assert_allclose(outputs["context"], state.context, atol=1e-5)
    if k == 0:  # no support: the unadapted prediction
        unadapted = learner.predict(learner.initial_state(b), query_x)
        np.testing.assert_allclose(outputs["predictions"], unadapted, atol=1e-6)


def test_serving_default_takes_three_inputs_and_equals_the_masked_form(exported):
    """What a client of the real TF Serving sends from the signature's plain inputs."""
    _, path = exported
    signatures = tf.saved_model.load(path).signatures
    support_x, support_y, mask, query_x = _task_batch(np.random.default_rng(7), 3, 8, 11)
    plain = signatures["serving_default"](support_x=support_x, support_y=support_y, query_x=query_x)
    masked = signatures["serving_masked"](
        support_x=support_x, support_y=support_y, support_mask=mask, query_x=query_x
    )
    assert mask.all()
    for name in ("predictions", "context"):
        np.testing.assert_array_equal(plain[name], masked[name])
    adapted = signatures["adapt"](support_x=support_x, support_y=support_y)["context"]
    adapted_masked = signatures["adapt_masked"](
        support_x=support_x, support_y=support_y, support_mask=mask
    )["context"]
    np.testing.assert_array_equal(adapted, adapted_masked)
    np.testing.assert_array_equal(adapted, plain["context"])


def test_adapt_then_predict_signatures_compose(exported):
    _, path = exported
    loaded = tf.saved_model.load(path)
    support_x, support_y, mask, query_x = _task_batch(np.random.default_rng(0), 3, 6, 9)
    context = loaded.signatures["adapt_masked"](
        support_x=support_x, support_y=support_y, support_mask=mask
    )
    twice = loaded.signatures["predict"](context=context["context"], query_x=query_x)
    once = loaded.signatures["serving_masked"](
        support_x=support_x, support_y=support_y, support_mask=mask, query_x=query_x
    )
    np.testing.assert_allclose(twice["predictions"], once["predictions"], atol=1e-6)


def test_signatures_have_named_inputs_and_outputs(exported):
    _, path = exported
    signatures = tf.saved_model.load(path).signatures
    assert set(signatures) == {
        "serving_default",
        "serving_masked",
        "adapt",
        "adapt_masked",
        "predict",
    }
    expected = {
        "serving_default": ({"support_x", "support_y", "query_x"}, {"predictions", "context"}),
        "serving_masked": (
            {"support_x", "support_y", "support_mask", "query_x"},
            {"predictions", "context"},
        ),
        "adapt": ({"support_x", "support_y"}, {"context"}),
        "adapt_masked": ({"support_x", "support_y", "support_mask"}, {"context"}),
        "predict": ({"context", "query_x"}, {"predictions"}),
    }
    for name, (inputs, outputs) in expected.items():
        function = signatures[name]
        specs = function.structured_input_signature[1]
        assert set(specs) == inputs
        assert set(function.structured_outputs) == outputs
        assert all(spec.shape[0] is None for spec in specs.values())  # leading task axis


def test_graph_uses_standard_ops_only(exported):
    _, path = exported
    from tensorflow.core.protobuf import saved_model_pb2

    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        graph = saved_model_pb2.SavedModel.FromString(f.read()).meta_graphs[0].graph_def
    ops = {node.op for node in graph.node}
    for function in graph.library.function:
        ops |= {node.op for node in function.node_def}
        assert "_XlaMustCompile" not in function.attr
    assert not ops & FORBIDDEN_OPS, ops & FORBIDDEN_OPS
    assert "MatMul" in ops or "BatchMatMulV2" in ops


@pytest.mark.slow
def test_saved_model_cli_lists_the_signatures(exported):
    _, path = exported
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    result = subprocess.run(
        [cli, "show", "--dir", path, "--all"], capture_output=True, text=True, check=True
    )
    for name in ("serving_default", "serving_masked", "adapt", "predict", "support_mask"):
        assert name in result.stdout


def test_assets_extra(exported):
    _, path = exported
    extra = os.path.join(path, "assets.extra")
    with open(os.path.join(extra, "operative_config.gin")) as f:
        assert f.read() == "NUM_STEPS = 1\n"
    with open(os.path.join(extra, "viable_model.json")) as f:
        description = json.load(f)
    assert description["method"] == "relviable" and description["evaluation"] == {"mean": 0.5}
    records = list(tf.data.TFRecordDataset(os.path.join(extra, "tf_serving_warmup_requests")))
    requests = [
        prediction_log_pb2.PredictionLog.FromString(r.numpy()).predict_log.request for r in records
    ]
    assert [r.model_spec.signature_name for r in requests] == [
        "serving_default",
        "serving_default",
        "serving_masked",
    ]
    assert set(requests[0].inputs) == {"support_x", "support_y", "query_x"}
    assert set(requests[2].inputs) == {"support_x", "support_y", "support_mask", "query_x"}


def test_versions_number_up_and_are_never_overwritten(tmp_path):
    learner = MAML(input_dim=1, output_dim=1)
    assert next_version(str(tmp_path)) == 1
    first = export_saved_model(learner, str(tmp_path))
    second = export_saved_model(learner, str(tmp_path))
    assert (os.path.basename(first), os.path.basename(second)) == ("1", "2")
    assert sorted(os.listdir(tmp_path)) == ["1", "2"]  # no staging folder left behind
    with pytest.raises(FileExistsError, match="exists"):
        export_saved_model(learner, str(tmp_path), version=2)
    # MAML adapts weights, not a context: serving_default and its masked form only.
    signatures = tf.saved_model.load(second).signatures
    assert sorted(signatures) == ["serving_default", "serving_masked"]
    assert set(signatures["serving_default"].structured_outputs) == {"predictions"}


@pytest.mark.slow
@pytest.mark.parametrize("method", ["attviable", "maml_relviable"])
def test_beyond_the_paper_learners_export_and_match(method, tmp_path):
    from viable_tf.learners import MAMLVIABLE
    from viable_tf.networks import AttentionLossNetwork

    if method == "attviable":
        learner = VIABLE(input_dim=1, output_dim=1, loss_network=AttentionLossNetwork)
    else:
        learner = MAMLVIABLE(input_dim=1, output_dim=1, loss_network=RelationLossNetwork)
    path = export_saved_model(learner, str(tmp_path))
    signatures = tf.saved_model.load(path).signatures
    expected_signatures = {"serving_default", "serving_masked"}
    if method == "attviable":
        expected_signatures |= {"adapt", "adapt_masked", "predict"}
    assert set(signatures) == expected_signatures
    support_x, support_y, mask, query_x = _task_batch(np.random.default_rng(3), 3, 7, 5, True)
    outputs = signatures["serving_masked"](
        support_x=support_x, support_y=support_y, support_mask=mask, query_x=query_x
    )
    expected = learner.predict(learner.adapt(support_x, support_y, mask), query_x)
    np.testing.assert_allclose(outputs["predictions"], expected, atol=1e-5)
    from tensorflow.core.protobuf import saved_model_pb2

    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        graph = saved_model_pb2.SavedModel.FromString(f.read()).meta_graphs[0].graph_def
    ops = {node.op for function in graph.library.function for node in function.node_def}
    assert not ops & FORBIDDEN_OPS
