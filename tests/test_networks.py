import keras
import numpy as np
import pytest
import tensorflow as tf
from tolerances import assert_within_ulps

from viable_tf import hardware
from viable_tf.networks import (
    Normalize,
    PredictionNetwork,
    RelationLossNetwork,
    SimpleLossNetwork,
    SkipInputs,
)


def _numpy_mlp(x, kernels, biases):
    h = x
    for i, (kernel, bias) in enumerate(zip(kernels, biases, strict=True)):
        h = h @ kernel + bias
        if i < len(kernels) - 1:
            h = np.maximum(h, 0.0)
    return h


def test_prediction_network_equals_mlp_on_concatenated_input_and_context():
    net = PredictionNetwork(input_dim=2, output_dim=3, context_dim=4, hidden_units=(8, 6))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(5, 7, 2)).astype(np.float32)  # [B, P, D]
    context = rng.normal(size=(5, 4)).astype(np.float32)  # [B, C]
    w = [p.numpy() for p in net.params]
    first = np.concatenate([w[0], w[1]], axis=0)  # [D + C, H]
    inputs = np.concatenate([x, np.repeat(context[:, None], 7, axis=1)], axis=-1)
    expected = _numpy_mlp(inputs, [first, w[3], w[5]], [w[2], w[4], w[6]])
    np.testing.assert_allclose(net(x, context), expected, rtol=1e-5, atol=1e-5)


def test_forward_with_per_task_weights_matches_shared_weights():
    net = PredictionNetwork(input_dim=1, output_dim=1, context_dim=2)
    x = tf.random.normal([3, 4, 1])
    context = tf.random.normal([3, 2])
    tiled = [tf.repeat(p[None], 3, axis=0) for p in net.params]
    np.testing.assert_allclose(net.forward(tiled, x, context), net(x, context), atol=1e-6)


def test_prediction_network_without_context():
    net = PredictionNetwork(input_dim=1, output_dim=1, context_dim=0)
    assert [p.name for p in net.params][:2] == ["kernel_x", "bias_0"]
    assert net(tf.zeros([2, 3, 1])).shape == (2, 3, 1)


@pytest.mark.parametrize(
    "layer",
    [
        lambda: PredictionNetwork(input_dim=1, output_dim=2, context_dim=3, hidden_units=(5,)),
        lambda: PredictionNetwork(
            input_dim=1,
            output_dim=2,
            context_dim=3,
            hidden_units=(5,),
            output_layer=False,
            features=[SkipInputs(context_scaled=True), Normalize()],
        ),
        lambda: SimpleLossNetwork(hidden_units=(4, 3), output_activation="softplus"),
        lambda: RelationLossNetwork(hidden_units=(4, 3, 2)),
    ],
)
def test_networks_serialize_and_deserialize(layer):
    original = layer()
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(original))
    assert type(restored) is type(original)
    assert restored.get_config() == original.get_config()


def test_relation_first_layer_decomposition_equals_naive_pairs():
    net = RelationLossNetwork(hidden_units=(16, 8))
    net.build((None, None, 5))
    features = tf.random.normal([3, 6, 5])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(features)
        fast = net.pair_losses(features)
        naive = net.naive_pair_losses(features)
    np.testing.assert_allclose(fast, naive, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        tape.gradient(fast, features), tape.gradient(naive, features), rtol=1e-4, atol=1e-5
    )
    # And against NumPy: pair (j, k) sees [f_j; f_k].
    f = features.numpy()
    w_a, w_b, b = net.kernel_first.numpy(), net.kernel_second.numpy(), net.bias.numpy()
    pair = np.concatenate([f[0, 2], f[0, 4]])
    hidden = np.maximum(pair @ np.concatenate([w_a, w_b]) + b, 0)
    hidden = np.maximum(hidden @ net.hidden_1.kernel.numpy() + net.hidden_1.bias.numpy(), 0)
    expected = hidden @ net._output.kernel.numpy()
    np.testing.assert_allclose(fast[0, 2, 4], expected[0], rtol=1e-5)


def test_relation_loss_uses_only_real_pairs():
    net = RelationLossNetwork(hidden_units=(8,))
    net.build((None, None, 3))
    features = tf.random.normal([2, 5, 3])
    mask = tf.constant([[True, True, True, False, False], [True] * 5])
    pairs = net.pair_losses(features).numpy()
    np.testing.assert_allclose(
        net(features, mask), [pairs[0, :3, :3].mean(), pairs[1].mean()], rtol=1e-5
    )
    # Garbage in padded points changes nothing.
    garbage = tf.tensor_scatter_nd_update(features, [[0, 3], [0, 4]], tf.fill([2, 3], 1e30))
    np.testing.assert_allclose(net(garbage, mask), net(features, mask), rtol=1e-6)


def test_simple_loss_uses_only_real_points():
    net = SimpleLossNetwork(hidden_units=(8, 8))
    net.build((None, None, 3))
    features = tf.random.normal([2, 4, 3])
    mask = tf.constant([[True, False, True, False], [False, False, False, False]])
    points = net.point_losses(features).numpy()
    np.testing.assert_allclose(net(features, mask), [points[0, [0, 2]].mean(), 0.0], rtol=1e-5)


def test_loss_networks_have_no_output_bias():
    for net in (SimpleLossNetwork(), RelationLossNetwork()):
        net.build((None, None, 4))
        assert not net._output.use_bias
        assert all("output/bias" not in v.path for v in net.weights)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: PredictionNetwork(input_dim=0, output_dim=1, context_dim=1), "input_dim"),
        (lambda: PredictionNetwork(input_dim=1, output_dim=1, context_dim=-1), "context_dim"),
        (lambda: SimpleLossNetwork(hidden_units=()), "hidden_units"),
        (lambda: RelationLossNetwork(hidden_units=(0,)), "hidden_units"),
        (lambda: RelationLossNetwork(compute_dtype="float16"), "compute_dtype must be one of"),
    ],
)
def test_bad_constructor_arguments(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def _relviable_meta_gradients(compute_dtype="float32", jit_compile=False):
    """relVIABLE on classification-shaped episodes (small): meta-loss and meta-gradients
    of one meta-update, second order through 2 inner steps, as the trainer takes them."""
    from viable_tf.learners import VIABLE
    from viable_tf.tasks import TaskBatch

    keras.utils.set_random_seed(3)
    learner = VIABLE(
        input_dim=32,
        output_dim=5,
        context_dim=10,
        num_inner_steps=2,
        task_loss="cross_entropy",
        loss_network=lambda: RelationLossNetwork(
            hidden_units=(64, 64), activation="tanh", compute_dtype=compute_dtype
        ),
    )
    rng = np.random.default_rng(0)
    labels = np.tile(np.repeat(np.arange(5, dtype=np.int32), 2), (2, 1))  # 5-way 2-shot, B=2
    batch = TaskBatch(
        tf.constant(rng.normal(size=(2, 10, 32)), tf.float32),
        tf.constant(labels),
        tf.ones([2, 10], tf.bool),
        tf.constant(rng.normal(size=(2, 10, 32)), tf.float32),
        tf.constant(labels),
    )

    @tf.function(jit_compile=jit_compile, autograph=False)
    def gradients():
        with tf.GradientTape() as tape:
            loss, _ = learner.meta_loss(batch)
        return loss, tape.gradient(loss, learner.trainable_variables)

    loss, grads = gradients()
    return float(loss), [g.numpy() for g in grads], learner


@pytest.mark.float_sensitive
def test_relation_network_float32_paths_agree_with_and_without_xla():
    """The trainer compiles relVIABLE with XLA or runs it on TensorFlow's (oneDNN)
    kernels by config: one meta-update's loss and meta-gradients agree to rounding.

    k = 64 ulps of the loss, and of each variable's largest gradient entry: the two paths
    fuse and order the sums of a second-order graph differently (2 inner steps over 100
    pairs of 64-unit tanh layers). Measured 0 and at most 3.8 on the three float paths of
    an AMD EPYC (docs/TESTING.md); 64 leaves room for other CPUs' kernels."""
    loss, grads, _ = _relviable_meta_gradients(jit_compile=False)
    loss_xla, grads_xla, _ = _relviable_meta_gradients(jit_compile=True)
    assert_within_ulps(loss_xla, loss, 64, what="meta-loss")
    for i, (g, g_xla) in enumerate(zip(grads, grads_xla, strict=True)):
        assert_within_ulps(g_xla, g, 64, what=f"meta-gradient {i}")


@pytest.mark.float_sensitive
def test_bfloat16_relation_network_meta_gradient_is_close_to_float32():
    """bfloat16 in the relation network's pair layers (8 bits of mantissa): the
    meta-loss within 1% and each variable's meta-gradient within 5% (relative L2
    error) of float32's; variables, loss and gradients stay float32.

    Where this CPU's kernels cannot run bfloat16 (ONEDNN_MAX_CPU_ISA=AVX2 on an AVX-512
    CPU aborts inside oneDNN), the option is refused at construction with the reason."""
    reason = hardware.bfloat16_unsupported()
    if reason is not None:
        with pytest.raises(ValueError, match="compute_dtype='bfloat16' cannot run here"):
            RelationLossNetwork(hidden_units=(8,), compute_dtype="bfloat16")
        return
    loss, grads, _ = _relviable_meta_gradients("float32")
    loss_bf16, grads_bf16, learner = _relviable_meta_gradients("bfloat16")
    assert all(v.dtype == "float32" for v in learner.trainable_variables)
    assert all(g.dtype == np.float32 for g in grads_bf16)
    assert learner.loss_network.hidden_1.compute_dtype == "bfloat16"
    assert abs(loss_bf16 - loss) <= 0.01 * abs(loss)
    for g, g_bf16 in zip(grads, grads_bf16, strict=True):
        error = np.linalg.norm(g_bf16 - g) / max(np.linalg.norm(g), 1e-12)
        assert error <= 0.05, error


AVX512 = frozenset({"avx2", "avx512f", "avx512bw", "avx512vl", "avx512dq"})


@pytest.mark.parametrize(
    "flags, env, refused",
    [
        (AVX512, {}, None),
        (AVX512 | {"avx512_bf16"}, {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}, None),
        (AVX512, {"ONEDNN_MAX_CPU_ISA": "AVX2"}, "ONEDNN_MAX_CPU_ISA=AVX2 keeps oneDNN below"),
        (AVX512, {"ONEDNN_MAX_CPU_ISA": "avx2_vnni_2"}, "ONEDNN_MAX_CPU_ISA=AVX2_VNNI_2"),
        (frozenset({"avx2", "fma"}), {}, "missing: avx512f, avx512bw"),
        (frozenset({"avx2", "fma"}), {"TF_ENABLE_ONEDNN_OPTS": "0"}, None),  # Eigen
        (AVX512, {"ONEDNN_MAX_CPU_ISA": "AVX2", "TF_ENABLE_ONEDNN_OPTS": "0"}, None),
    ],
)
def test_bfloat16_is_refused_where_the_kernels_cannot_run_it(monkeypatch, flags, env, refused):
    """The decision, for CPUs other than this one: AVX-512 with oneDNN capped below
    AVX512_CORE aborts the process (seen on an AMD EPYC with ONEDNN_MAX_CPU_ISA=AVX2),
    a CPU without AVX-512 has no native bfloat16; oneDNN off runs Eigen's kernels."""
    for name in ("ONEDNN_MAX_CPU_ISA", "TF_ENABLE_ONEDNN_OPTS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    reason = hardware.bfloat16_unsupported(flags)
    if refused is None:
        assert reason is None
    else:
        assert refused in reason and "compute_dtype='float32'" in reason


def test_the_prediction_network_reads_its_weights_by_name():
    net = PredictionNetwork(
        input_dim=3,
        output_dim=2,
        context_dim=2,
        hidden_units=(4,),
        output_layer=False,
        features=[SkipInputs(context_scaled=True)],
    )
    assert net.param_names == (
        "kernel_x",
        "kernel_context",
        "bias_0",
        "feature_scale",
        "kernel_input_scale",
    )
    assert [w.name for w in net.params] == list(net.param_names)
    assert net.named(net.params)["kernel_input_scale"] is net.kernel_input_scale
    with pytest.raises(ValueError, match="expected 5 weights, got 4"):
        net.forward(net.params[:-1], tf.zeros([1, 2, 3]), tf.zeros([1, 2]))
