"""The learned loss's parts (viable_tf/learners/loss_features.py), each on its own: what a
point's features hold, how they fit together and with the loss network, the two forms,
and the parts chosen in gin."""

import numpy as np
import pytest
import tensorflow as tf

from viable_tf.cli.common import UsageError, parse_gin
from viable_tf.learners import (
    VIABLE,
    AdaptedState,
    GradientAgreement,
    Inputs,
    Labels,
    Learned,
    Outputs,
    Residual,
    TaskLoss,
)
from viable_tf.learners.loss_features import Support, canonical_logits
from viable_tf.networks import RelationLossNetwork, SimpleLossNetwork
from viable_tf.tasks import SineTasks, seed_for


def _sine(loss_network=RelationLossNetwork, **kwargs):
    return VIABLE(input_dim=1, output_dim=1, loss_network=loss_network, **kwargs)


def _classifier(**kwargs):
    return VIABLE(
        input_dim=4,
        output_dim=3,
        task_loss="cross_entropy",
        loss_network=SimpleLossNetwork,
        **kwargs,
    )


def _sine_support(learner, y_hat_shift=1.0):
    """Three sine tasks, some points padded, predictions y + shift."""
    batch = SineTasks(num_support=5, min_support=2).sample(seed_for(0, 0), 3)
    x, y, mask = batch.support_x, batch.support_y, batch.support_mask
    return Support(learner, None, x, y, mask, y + y_hat_shift, x)


def _class_support(learner):
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(2, 4, 4)), tf.float32)
    y = tf.constant([[0, 2, 1, 2], [1, 1, 0, 2]], tf.int32)
    y_hat = tf.constant(rng.normal(size=(2, 4, 3)), tf.float32)
    mask = tf.constant([[True, True, True, False], [True] * 4])
    return Support(learner, None, x, y, mask, y_hat, x)


def test_task_loss_gives_the_points_own_the_sets_mean_over_real_points_or_both():
    learner = _sine()
    support = _sine_support(learner, y_hat_shift=tf.range(5, dtype=tf.float32)[:, None])
    own = TaskLoss()(support).numpy()  # [B, K, 1]
    np.testing.assert_allclose(own[..., 0], np.square(np.arange(5.0))[None].repeat(3, 0), rtol=1e-6)
    mask = support.mask.numpy()
    assert not mask.all()  # padded points present: the mean leaves them out
    expected = (own[..., 0] * mask).sum(1) / mask.sum(1)  # [B]
    mean = TaskLoss(of="mean")(support).numpy()
    np.testing.assert_allclose(mean[..., 0], expected[:, None].repeat(5, 1), rtol=1e-6)
    both = TaskLoss(of="both")(support).numpy()
    np.testing.assert_allclose(both, np.concatenate([own, mean], -1), rtol=1e-6)
    np.testing.assert_allclose(TaskLoss(scale=5.0)(support), own / 25.0, rtol=1e-6)
    assert [TaskLoss(of=of).width(learner) for of in ("point", "mean", "both")] == [1, 1, 2]
    assert TaskLoss().hparams() == {} and TaskLoss(of="both").hparams()["task_loss_feature"]
    with pytest.raises(ValueError, match=r"TaskLoss\.of must be one of"):
        TaskLoss(of="median")
    with pytest.raises(ValueError, match="scale must be > 0"):
        TaskLoss(scale=0.0)


def test_outputs_give_the_predictions_in_the_episodes_order_or_canonically():
    learner = _classifier()
    support = _class_support(learner)
    np.testing.assert_array_equal(Outputs()(support), support.y_hat)
    np.testing.assert_array_equal(
        Outputs(class_order="canonical")(support), canonical_logits(support.y_hat, support.y)
    )
    np.testing.assert_allclose(Outputs(scale=2.0)(support), support.y_hat / 2.0)
    assert Outputs().width(learner) == 3 and Outputs(class_order="canonical").holds_label
    with pytest.raises(ValueError, match="needs a classifier"):
        Outputs(class_order="canonical").width(_sine())


def test_labels_are_one_hot_for_a_classifier_and_as_given_for_a_regressor():
    learner = _classifier()
    support = _class_support(learner)
    np.testing.assert_array_equal(Labels()(support), tf.one_hot(support.y, 3))
    sine = _sine()
    support = _sine_support(sine)
    np.testing.assert_allclose(Labels(scale=4.0)(support), support.y / 4.0)
    assert Labels().width(learner) == 3 and Labels().width(sine) == 1


def test_inputs_give_x_or_penultimate_features_and_stopped_ones_pass_no_gradient():
    learner = _sine()
    support = _sine_support(learner)
    np.testing.assert_array_equal(Inputs()(support), support.x)
    np.testing.assert_allclose(Inputs(scale=5.0)(support), support.x / 5.0)
    assert Inputs().width(learner) == 1 and not Inputs().reads_penultimate
    h = tf.constant([[[1.0, 2.0]]])
    for source, reaches in (("penultimate", True), ("penultimate_stopped", False)):
        part = Inputs(source=source)
        assert part.reads_penultimate and part.hparams() == {"pair_inputs": source}
        with tf.GradientTape() as tape:
            tape.watch(h)
            out = tf.reduce_sum(part(Support(learner, None, h, h, None, h, h)))
        assert (tape.gradient(out, h) is not None) == reaches
    with pytest.raises(ValueError, match="needs VIABLE on CAVIA"):
        Inputs(source="penultimate").width(_sine())  # the MLP gives no penultimate features


def test_gradient_agreement_widens_by_two_and_reports_itself():
    learner = _sine(SimpleLossNetwork)
    assert GradientAgreement().width(learner) == 2
    assert GradientAgreement().hparams() == {"gradient_agreement": True}


def test_the_parts_must_fit_together_and_with_the_loss_network():
    paper = [TaskLoss(), Outputs(), Labels()]
    assert _sine(SimpleLossNetwork).features == tuple(paper)  # the paper's, by default
    assert _sine().features == (*paper, Inputs())  # relVIABLE reads x
    with pytest.raises(ValueError, match="need Inputs"):
        _sine(features=paper)
    with pytest.raises(ValueError, match="cannot hold Inputs"):
        _sine(SimpleLossNetwork, features=[*paper, Inputs()])
    with pytest.raises(ValueError, match="at most once"):
        _sine(SimpleLossNetwork, features=[*paper, TaskLoss(of="mean")])
    with pytest.raises(ValueError, match="need Outputs"):
        _sine(SimpleLossNetwork, features=[TaskLoss(), Labels()])
    with pytest.raises(ValueError, match="features must be parts of"):
        _sine(SimpleLossNetwork, features=[*paper, "x"])
    with pytest.raises(ValueError, match="drop Labels"):
        _classifier(features=[Outputs(class_order="canonical"), Labels()])


def test_the_reproduction_studys_options_as_parts():
    """Every part scaled by 5 (the task loss by 25), or no task loss: the features and
    the loss network's fan-in follow."""
    plain = _sine()
    support = _sine_support(plain)
    f = plain.point_features(support).numpy()  # (L_T, y_hat, y, x)
    np.testing.assert_allclose(f[..., 0], 1.0, rtol=1e-6)  # (y_hat - y)^2
    scaled = _sine(
        features=[TaskLoss(scale=5.0), *(p(scale=5.0) for p in (Outputs, Labels, Inputs))]
    )
    np.testing.assert_allclose(scaled.point_features(support), f / [25.0, 5.0, 5.0, 5.0], rtol=1e-6)
    no_loss = _sine(features=[Outputs(), Labels(), Inputs()])
    np.testing.assert_allclose(no_loss.point_features(support), f[..., 1:], rtol=1e-6)
    assert no_loss.feature_dim == 3 and no_loss.loss_network.kernel_first.shape == (3, 32)


def test_the_residual_form_adds_the_base_learners_own_loss_over_real_points():
    learner = _sine(SimpleLossNetwork)
    support = _sine_support(learner, y_hat_shift=2.0)
    learned = tf.constant([0.5, -1.0, 2.0])
    np.testing.assert_array_equal(Learned()(learned, support), learned)
    np.testing.assert_allclose(Residual()(learned, support), learned + 4.0, rtol=1e-6)
    assert Learned().hparams() == {"residual": False} and Residual().hparams()["residual"]
    residual = _sine(SimpleLossNetwork, form=Residual())
    state = AdaptedState(context=tf.zeros([3, residual.context_dim]))
    args = (support.x, support.y, support.mask)
    plain_learner = _sine(SimpleLossNetwork)
    residual.loss_network.set_weights(plain_learner.loss_network.get_weights())
    residual.network.set_weights(plain_learner.network.get_weights())
    task = residual.support(state, *args)
    expected = plain_learner.inner_loss(state, *args) + tf.reduce_sum(
        residual.task_loss(task.y_hat, task.y) * tf.cast(task.mask, tf.float32), 1
    ) / tf.reduce_sum(tf.cast(task.mask, tf.float32), 1)
    np.testing.assert_allclose(residual.inner_loss(state, *args), expected, rtol=1e-5)


def test_the_parts_are_chosen_in_gin_and_the_retired_options_are_refused():
    import gin

    try:
        parse_gin(
            ["sine/relviable.gin"],
            [
                "VIABLE.features = [@TaskLoss(), @Outputs(), @Labels(), @Inputs(), "
                "@GradientAgreement()]",
                "TaskLoss.of = 'both'",
                "VIABLE.form = @Residual()",
            ],
        )
        learner = VIABLE(input_dim=1, output_dim=1)
        assert learner.feature_dim == 2 + 1 + 1 + 1 + 2
        assert learner.hparams()["residual"] and learner.hparams()["gradient_agreement"]
        gin.clear_config()
        for retired in ("residual = True", "pair_inputs = 'x'", "class_order = 'episode'"):
            with pytest.raises(UsageError, match=retired.split(" ")[0]):
                parse_gin(["sine/relviable.gin"], [f"VIABLE.{retired}"])
            gin.clear_config()
    finally:
        gin.clear_config()
