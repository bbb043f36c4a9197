"""bfloat16 compute (viable_tf/precision.py): a bfloat16 meta-step against the float32
step on a fixed batch within a stated tolerance, float32 where it must stay float32, the
fall-back on a CPU without native bfloat16 (its flags faked), the refusals, and an
export of a bfloat16 learner that serves float32 unchanged with standard ops."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from viable_tf import hardware, precision
from viable_tf.cli import train as train_cli
from viable_tf.export.saved_model import AdaptThenPredict
from viable_tf.learners import CAVIA, MAML, PrototypeHead
from viable_tf.networks.keras_model import FiLM, conv4_film, keras_network
from viable_tf.tasks import TaskBatch
from viable_tf.training.settings import PerformanceSpec

#: bfloat16 keeps 8 bits of mantissa (2-3 decimal digits), and every intermediate of the
#: networks is rounded to it. The stated tolerance, for any CPU: the meta-loss of one step
#: within 1% of float32's; the whole meta-gradient (all weights as one vector) at a cosine
#: of at least 0.9 with float32's for the Prototypical Network (no inner loop; measured
#: 0.98-0.995) and 0.6 through two second-order inner steps (CAVIA at alpha = 0.1, MAML;
#: measured 0.72-0.96: a second-order meta-gradient at initialisation is sensitive to any
#: rounding, float32's own moves to a cosine of 0.77-0.98 when only the inputs are rounded
#: to bfloat16), its norm within 35%. A wrong cast or a lost gradient path gives ~0.
LOSS_RTOL, GRAD_NORM_RTOL = 1e-2, 0.35
GRAD_COSINE = {"protonet": 0.9, "cavia": 0.6, "maml": 0.6}
WITHOUT = frozenset({"sse4_2", "avx2", "fma"})  # a Zen 3: no avx512_bf16, no amx_bf16
#: conv4_film's element-wise layers: under bfloat16, in float32 where FiLM is (faster).
ELEMENTWISE = (FiLM, keras.layers.ReLU, keras.layers.MaxPooling2D)
ZEN4 = WITHOUT | {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16"}


def _capped() -> bool:
    """oneDNN capped below its bfloat16 ISA on an AVX-512 CPU: bfloat16 aborts there."""
    reason = hardware.bfloat16_unsupported()
    return reason is not None and "ONEDNN_MAX_CPU_ISA" in reason


def _batch(b=2, ways=3, shots=1, queries=2):
    rng = np.random.default_rng(0)
    support = tf.constant(rng.random((b, ways * shots, 784)), tf.float32)
    query = tf.constant(rng.random((b, ways * queries, 784)), tf.float32)
    labels = np.tile(np.arange(ways), (b, 1))
    return TaskBatch(
        support,
        tf.constant(np.repeat(labels, shots, 1), tf.int32),
        tf.ones((b, ways * shots), tf.bool),
        query,
        tf.constant(np.repeat(labels, queries, 1), tf.int32),
    )


def _learner(cls, number_format, num_inner_steps=2, **kw):
    keras.utils.set_random_seed(0)
    network = keras_network(build=lambda d, y, c: conv4_film(d, y, c, filters=8, blocks=2))
    with precision.building(number_format):
        return cls(
            input_dim=784,
            output_dim=3,
            task_loss="cross_entropy",
            network=network,
            num_inner_steps=num_inner_steps,
            **kw,
        )


def _step(learner, batch):
    with tf.GradientTape() as tape:
        loss, _ = learner.meta_loss(batch)
    return loss, tape.gradient(loss, learner.trainable_variables)


CASES = {
    "cavia": (CAVIA, {"context_dim": 8, "inner_lr": 0.1}),
    "maml": (MAML, {"inner_lr": 0.1}),  # the per-task weights' grouped convolutions
    "protonet": (CAVIA, {"context_dim": 8, "num_inner_steps": 0, "head": PrototypeHead()}),
}


@pytest.mark.skipif(_capped(), reason="ONEDNN_MAX_CPU_ISA keeps oneDNN below bfloat16")
@pytest.mark.skipif(
    not hardware.onednn_enabled(),
    reason="oneDNN off: a run falls back to float32 (Eigen's bfloat16 is not native)",
)
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_bfloat16_step_matches_the_float32_step_within_the_stated_tolerance(name):
    cls, kw = CASES[name]
    batch = _batch()
    results = {}
    for number_format in ("float32", "bfloat16"):
        learner = _learner(cls, number_format, **kw)
        results[number_format] = (learner, *_step(learner, batch))
    (_, loss, grads), (half, loss16, grads16) = results["float32"], results["bfloat16"]
    conv = next(layer for layer in half.network.model.layers if "conv" in layer.name)
    assert conv.compute_dtype == "bfloat16" and conv.kernel.dtype == "float32"
    elementwise = [layer for layer in half.network.model.layers if isinstance(layer, ELEMENTWISE)]
    expected = "float32" if half.network.context_dim else "bfloat16"  # FiLM's or MAML's
    assert elementwise and {layer.compute_dtype for layer in elementwise} == {expected}
    assert loss16.dtype == tf.float32
    np.testing.assert_allclose(loss16, loss, rtol=LOSS_RTOL)
    g = np.concatenate([np.ravel(tf.convert_to_tensor(x)) for x in grads])
    g16 = np.concatenate([np.ravel(tf.convert_to_tensor(x)) for x in grads16])
    assert g16.dtype == np.float32
    norm, norm16 = np.linalg.norm(g), np.linalg.norm(g16)
    assert g @ g16 / (norm * norm16) >= GRAD_COSINE[name]
    assert abs(norm16 - norm) <= GRAD_NORM_RTOL * norm
    state = half.adapt(batch.support_x, batch.support_y, batch.support_mask)
    assert all(t.dtype == tf.float32 for t in state.tensors())  # the adapted state


def test_float32_is_the_default_and_changes_nothing():
    assert precision.current() == "float32"
    assert PerformanceSpec().precision == "float32"
    model = _learner(CAVIA, "float32", context_dim=4).network.model
    assert {layer.compute_dtype for layer in model.layers} == {"float32"}
    assert keras.config.dtype_policy().name == "float32"  # the global policy as it was


def test_without_native_bfloat16_a_run_says_so_in_one_line_and_uses_float32(monkeypatch):
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "1")
    said = []
    assert precision.resolve("bfloat16", flags=WITHOUT, say=said.append) == "float32"
    assert len(said) == 1 and "no native bfloat16" in said[0] and "\n" not in said[0]
    assert precision.resolve("bfloat16", flags=ZEN4, say=said.append) == "bfloat16"
    assert precision.resolve("float32", flags=WITHOUT, say=said.append) == "float32"
    assert len(said) == 1
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")  # Eigen's kernels: not native
    assert precision.resolve("bfloat16", flags=ZEN4, say=said.append) == "float32"


def test_forced_bfloat16_where_the_kernels_cannot_run_it_is_refused(monkeypatch):
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "1")
    skylake = ZEN4 - {"avx512_bf16"}  # AVX-512 without native bfloat16
    with pytest.raises(ValueError, match=r"forced, but it cannot run here.*ONEDNN_MAX_CPU_ISA"):
        precision.resolve("bfloat16", force=True, flags=skylake)  # oneDNN capped below it
    with pytest.raises(ValueError, match=r"forced, but it cannot run here.*emulated"):
        precision.resolve("bfloat16", force=True, flags=WITHOUT)  # no AVX-512 at all
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    assert precision.resolve("bfloat16", force=True, flags=skylake) == "bfloat16"


def test_an_unknown_precision_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"unknown precision 'float16': expected one of"):
        PerformanceSpec(precision="float16")


@pytest.mark.parametrize(
    "binding, message",
    [
        ("PerformanceSpec.precision='half'", "unknown precision 'half'"),
        ("PerformanceSpec.force_precision=True", None),
    ],
)
def test_viable_train_refuses_a_bad_precision_before_writing_anything(
    binding, message, tmp_path, run_cli, monkeypatch
):
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "1")  # the refusal is oneDNN's
    model_dir = tmp_path / "run"
    params = [binding]
    if message is None:  # bfloat16 forced on a CPU whose oneDNN is capped below it
        monkeypatch.setattr(hardware, "cpu_flags", lambda: ZEN4 - {"avx512_bf16"})
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
        params.append("PerformanceSpec.precision='bfloat16'")
        message = "forced, but it cannot run here"
    code, out = run_cli(
        train_cli,
        [
            "--gin_file=sine/cavia.gin",
            *(f"--gin_param={p}" for p in params),
            "--gin_param=NUM_STEPS=2",
            f"--model_dir={model_dir}",
        ],
    )
    assert code == 2
    assert message in out.err and len(out.err.strip().splitlines()) == 1
    assert not os.path.exists(model_dir)


@pytest.mark.skipif(_capped(), reason="ONEDNN_MAX_CPU_ISA keeps oneDNN below bfloat16")
def test_an_export_of_a_bfloat16_learner_serves_float32_with_standard_ops(tmp_path):
    learner = _learner(CAVIA, "bfloat16", context_dim=4)
    module = AdaptThenPredict(learner)
    batch = _batch()
    for name, function in module.signatures().items():
        floats = [spec for spec in function.input_signature if spec.dtype.is_floating]
        assert all(s.dtype == tf.float32 for s in floats), name
    out = module.serving_default(batch.support_x, batch.support_y, batch.query_x)
    assert out["logits"].dtype == tf.float32 and out["context"].dtype == tf.float32
    path = str(tmp_path / "1")
    tf.saved_model.save(module, path, signatures=module.signatures())
    from tensorflow.core.protobuf import saved_model_pb2

    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        graph = saved_model_pb2.SavedModel.FromString(f.read()).meta_graphs[0].graph_def
    ops = {node.op for function in graph.library.function for node in function.node_def}
    assert "Conv2D" in ops and "Cast" in ops
    assert not ops & {"PyFunc", "EagerPyFunc", "XlaLaunch"}
    loaded = tf.saved_model.load(path).signatures["serving_default"]
    served = loaded(support_x=batch.support_x, support_y=batch.support_y, query_x=batch.query_x)[
        "logits"
    ]
    np.testing.assert_allclose(served, out["logits"], rtol=1e-5, atol=1e-5)
