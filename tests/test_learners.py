"""CAVIA, MAML and VIABLE on sine: what each adapts, meta-gradients, overfitting one batch,
the reproduction's options (the contract every learner meets: test_contract.py)."""

import numpy as np
import pytest
import tensorflow as tf
from conftest import unreached_by_design

from viable_tf.learners import CAVIA, MAML, MAMLVIABLE, VIABLE, AdaptedState, Residual
from viable_tf.networks import AttentionLossNetwork, RelationLossNetwork, SimpleLossNetwork
from viable_tf.tasks import SineTasks, seed_for
from viable_tf.training import Trainer

LEARNERS = {
    "cavia": lambda **kw: CAVIA(input_dim=1, output_dim=1, **kw),
    "maml": lambda **kw: MAML(input_dim=1, output_dim=1, **kw),
    "simviable": lambda **kw: VIABLE(
        input_dim=1, output_dim=1, loss_network=SimpleLossNetwork, **kw
    ),
    "relviable": lambda **kw: VIABLE(
        input_dim=1, output_dim=1, loss_network=RelationLossNetwork, **kw
    ),
    "attviable": lambda **kw: VIABLE(
        input_dim=1, output_dim=1, loss_network=AttentionLossNetwork, **kw
    ),
    "maml_simviable": lambda **kw: MAMLVIABLE(
        input_dim=1, output_dim=1, loss_network=SimpleLossNetwork, **kw
    ),
    "maml_relviable": lambda **kw: MAMLVIABLE(
        input_dim=1, output_dim=1, loss_network=RelationLossNetwork, **kw
    ),
}


@pytest.fixture(params=sorted(LEARNERS))
def make_learner(request):
    return LEARNERS[request.param]


def _batch(num_tasks=6, num_support=10, min_support=None, step=0):
    tasks = SineTasks(num_support=num_support, min_support=min_support)
    return tasks.sample(seed_for(0, step), num_tasks)


def test_method_names():
    assert [LEARNERS[name]().method_name for name in sorted(LEARNERS)] == sorted(LEARNERS)


def test_shapes(make_learner):
    learner = make_learner()
    batch = _batch()
    state = learner.adapt(batch.support_x, batch.support_y, batch.support_mask)
    assert isinstance(state, AdaptedState)
    assert all(s.shape[0] == 6 for s in tf.nest.flatten(state))
    # The parts by name: CAVIA and VIABLE adapt phi alone, MAML the network's weights.
    if learner.capabilities.adapts_context:
        assert state.context.shape == (6, learner.context_dim) and not state.weights
    else:
        assert len(state.weights) == len(learner.network.params) and state.context is None
    assert learner.predict(state, batch.query_x).shape == (6, 10, 1)
    loss, metrics = learner.meta_loss(batch)
    assert loss.shape == () and np.isfinite(loss)
    assert np.isfinite(metrics["inner_loss_pre"])


def test_adaptation_changes_predictions_and_k0_does_not(make_learner):
    learner = make_learner()
    batch = _batch()
    unadapted = learner.predict(learner.initial_state(6), batch.query_x)
    adapted = learner.predict(
        learner.adapt(batch.support_x, batch.support_y, batch.support_mask), batch.query_x
    )
    assert not np.allclose(adapted, unadapted)
    no_support = tf.zeros_like(batch.support_mask)  # K = 0 for every task
    state = learner.adapt(batch.support_x, batch.support_y, no_support)
    np.testing.assert_allclose(learner.predict(state, batch.query_x), unadapted, atol=1e-6)


def _meta_gradients(learner, batch):
    with tf.GradientTape() as tape:
        loss, _ = learner.meta_loss(batch)
    variables = learner.trainable_variables
    return dict(zip([v.path for v in variables], tape.gradient(loss, variables), strict=True))


def test_every_weight_gets_a_meta_gradient(make_learner):
    """theta, and psi's kernels for VIABLE, all get non-zero meta-gradients.

    With ReLU hidden units the loss network's biases get exactly zero: d Lhat/d phi
    (or d Lhat/d theta, on MAML) depends on a bias only through which units are on
    (ReLU'' = 0), a piecewise constant. See `test_smooth_loss_network_learns_its_biases_too`.
    The attention network (tanh) learns every weight but its key projection's bias,
    which shifts a softmax row by a constant and gets zero up to rounding.
    """
    learner = make_learner()
    expected = len(learner.network.params)
    loss_network = getattr(learner, "loss_network", None)
    if loss_network is not None:
        expected += len(loss_network.trainable_variables)
    assert len(learner.trainable_variables) == expected
    grads = _meta_gradients(learner, _batch(num_tasks=10))
    ids = unreached_by_design(learner)
    unreached = {v.path for v in learner.trainable_variables if id(v) in ids}
    for path in unreached:  # no path at all: the exact zero of a ReLU loss network's biases
        assert grads[path] is None, path
    missing = [path for path, grad in grads.items() if grad is None and path not in unreached]
    assert not missing, f"no meta-gradient reaches {missing}"
    grads = {p: tf.zeros(1) if g is None else g for p, g in grads.items()}
    scale = max(float(np.max(np.abs(g.numpy()))) for g in grads.values())
    for path, grad in grads.items():
        if "/key/bias" in path:  # attention: softmax ignores a per-row shift
            assert np.max(np.abs(grad.numpy())) < 1e-6 * scale, path
        elif (
            path.startswith("prediction_network")
            or "kernel" in path
            or isinstance(loss_network, AttentionLossNetwork)
        ):
            assert np.any(grad.numpy() != 0), path
        else:  # a ReLU loss network's bias
            assert np.all(grad.numpy() == 0), path


@pytest.mark.parametrize("loss_network", [SimpleLossNetwork, RelationLossNetwork])
def test_smooth_loss_network_learns_its_biases_too(loss_network):
    learner = VIABLE(
        input_dim=1,
        output_dim=1,
        loss_network=lambda: loss_network(activation="softplus"),
    )
    for path, grad in _meta_gradients(learner, _batch(num_tasks=10)).items():
        assert np.any(grad.numpy() != 0), path


def test_loss_network_learns_only_through_second_order_path():
    """psi reaches the query loss only through the inner update's gradient."""
    learner = LEARNERS["relviable"](first_order=True)
    with tf.GradientTape() as tape:
        loss, _ = learner.meta_loss(_batch())
    grads = tape.gradient(loss, learner.loss_network.trainable_variables)
    assert all(g is None for g in grads)


def test_task_data_are_constants_of_the_meta_update():
    """Sampling creates and reads no variables; the meta-gradient goes to theta and psi."""
    tasks = SineTasks()
    learner = LEARNERS["relviable"]()
    with tf.GradientTape() as tape:
        batch = tasks.sample(seed_for(0, 0), 4)
        assert not tape.watched_variables()
        loss, _ = learner.meta_loss(batch)
    watched = sorted(v.name for v in tape.watched_variables())
    assert watched == sorted(v.value.name for v in learner.trainable_variables)
    assert tape.gradient(loss, batch.support_y) is None  # data are not differentiated


#: The overfitting claim, stated so that it holds on every float path (docs/TESTING.md):
#: 400 of the product's meta-updates on one fixed batch bring the median of the last 20
#: losses below OVERFIT_RATIO x the initial loss, and no loss after the first 20 updates
#: rises above DIVERGENCE_RATIO x the initial one.
OVERFIT_STEPS, OVERFIT_RATIO, DIVERGENCE_RATIO = 400, 0.25, 1.5


def overfit_losses(make_learner, model_dir: str, steps: int) -> np.ndarray:
    """The losses of `steps` meta-updates on one fixed batch of 5 sine tasks, trained as the
    product trains (lab/float_path_bits.py hashes them on each float path)."""
    trainer = Trainer(
        model_dir=model_dir,
        tasks=SineTasks(),
        learner=lambda input_dim, output_dim: make_learner(),  # sine: 1 -> 1
        meta_batch_size=5,
        show_progress=False,
    )
    batch = _batch(num_tasks=5)

    @tf.function(jit_compile=trainer.jit_compile)
    def train():
        losses = tf.TensorArray(tf.float32, size=steps)
        for i in tf.range(steps):
            loss, _, grads = trainer.meta_gradients(batch)
            trainer.optimizer.apply_gradients(zip(grads, trainer.variables, strict=True))
            losses = losses.write(i, loss)
        return losses.stack()

    return train().numpy()


@pytest.mark.slow
@pytest.mark.float_sensitive
@pytest.mark.xla_only  # the meta-updates are one XLA program; the batch is drawn before it
def test_overfits_one_fixed_batch(make_learner, tmp_path):
    """Trained as the product trains (the Trainer's Adam at 1e-3, its elementwise
    clipping at 10, XLA as the sine configs compile), every learner fits one batch.

    A steady statistic, not one point of the trajectory: training on one CPU's kernels
    ends elsewhere than on another's, so the last loss alone is a draw."""
    losses = overfit_losses(make_learner, str(tmp_path), OVERFIT_STEPS)
    initial, steady = float(losses[0]), float(np.median(losses[-20:]))
    worst = float(np.max(losses[20:]))
    margin = (
        f"initial {initial:.4f}, median of the last 20 {steady:.4f} "
        f"({steady / initial:.3f}x), worst after 20 {worst:.4f} ({worst / initial:.2f}x)"
    )
    assert np.all(np.isfinite(losses)), margin
    assert steady < OVERFIT_RATIO * initial, margin
    assert worst < DIVERGENCE_RATIO * initial, margin


def test_multiple_inner_steps_and_validation():
    learner = LEARNERS["cavia"](num_inner_steps=3, inner_lr=0.1)
    batch = _batch()
    _, losses = learner.adapt(
        batch.support_x, batch.support_y, batch.support_mask, return_inner_losses=True
    )
    assert losses.shape == (3, 6)
    # Small steps on the true loss: the support loss goes down step after step.
    assert np.all(np.diff(losses.numpy().mean(axis=1)) < 0)
    with pytest.raises(ValueError, match="inner_lr must be > 0"):
        LEARNERS["cavia"](inner_lr=0.0)
    with pytest.raises(ValueError, match="context_dim >= 1"):
        LEARNERS["cavia"](context_dim=0)
    with pytest.raises(ValueError, match="unknown task_loss 'mae'"):
        LEARNERS["maml"](task_loss="mae")


def test_the_adapted_state_nests_by_its_parts():
    weights, context, kernel, bias = (tf.fill([2, 3], float(v)) for v in range(4))
    state = AdaptedState(context=context, weights=[weights], head=(kernel, bias))
    assert [float(t[0, 0]) for t in tf.nest.flatten(state)] == [0, 1, 2, 3]  # w, phi, head
    assert state.in_parts(["context"]) == [False, True, False, False]
    doubled = tf.nest.map_structure(lambda t: 2 * t, state)
    assert isinstance(doubled, AdaptedState) and float(doubled.head[1][0, 0]) == 6
    assert state.replace(head=()).head == () and state.replace(head=()).context is context

    @tf.function
    def either(flag):  # both branches give the same structure (as the export's K = 0 one)
        return tf.cond(flag, lambda: doubled, lambda: state)

    chosen = either(tf.constant(True))
    assert isinstance(chosen, AdaptedState) and float(chosen.context[0, 0]) == 2
    assert AdaptedState(context=context).in_parts(["weights", "head"]) == [False]


@pytest.mark.parametrize(
    "base, learned",
    [
        (CAVIA, lambda **kw: VIABLE(loss_network=_zero(RelationLossNetwork), **kw)),
        (MAML, lambda **kw: MAMLVIABLE(loss_network=_zero(SimpleLossNetwork), **kw)),
    ],
)
def test_a_residual_learned_loss_from_zero_adapts_as_its_base_learner(base, learned):
    """`form=Residual()` adds the learned loss to the base learner's own inner loss, so with
    the loss network's output from zero the inner loop is the base learner's, on CAVIA
    and on MAML alike (the same prediction network, drawn first under one seed)."""
    batch = _batch()
    support = (batch.support_x, batch.support_y, batch.support_mask)
    tf.keras.utils.set_random_seed(5)
    plain = base(input_dim=1, output_dim=1)
    tf.keras.utils.set_random_seed(5)
    residual = learned(input_dim=1, output_dim=1, form=Residual())
    expected = tf.nest.flatten(plain.adapt(*support))
    got = tf.nest.flatten(residual.adapt(*support))
    assert len(got) == len(expected)
    for ours, theirs in zip(got, expected, strict=True):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-6)
    assert any(
        np.abs(t.numpy() - s.numpy()).max() > 1e-4
        for t, s in zip(expected, tf.nest.flatten(plain.start_state(*support)), strict=True)
    )  # the base learner's steps move the state: the match is not two unmoved states


def _zero(network):
    return lambda: network(hidden_units=(8, 8), output_init="zeros")
