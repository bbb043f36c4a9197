"""lab/inner_path.py, the inner loop the lab's probes walk: on the inner loss at the
learner's rate it is the learner's own loop bit for bit (MeTAL's per-step networks and
query term, a padded support point), on the task loss it is CAVIA's, and a learner whose
loop is not the context's alone at one rate is refused in one line naming it."""

import numpy as np
import pytest
import tensorflow as tf

from lab import inner_path
from viable_tf.learners import CAVIA, MAML, VIABLE, MeTAL, SteppedLinearHead
from viable_tf.networks import RelationLossNetwork
from viable_tf.tasks import TaskBatch

TASKS, WAYS, SHOTS, DIM = 2, 3, 2, 5
SHARED = dict(
    input_dim=DIM,
    output_dim=WAYS,
    task_loss="cross_entropy",
    context_dim=4,
    num_inner_steps=2,
    inner_lr=0.5,
)


def _batch() -> TaskBatch:
    labels = np.tile(np.tile(np.arange(WAYS), SHOTS)[None], [TASKS, 1]).astype(np.int32)
    mask = np.ones(labels.shape, bool)
    mask[1, -1], labels[1, -1] = False, -1  # a padded point, its label anything
    return TaskBatch(
        support_x=tf.random.stateless_normal([TASKS, WAYS * SHOTS, DIM], [1, 2]),
        support_y=tf.constant(labels),
        support_mask=tf.constant(mask),
        query_x=tf.random.stateless_normal([TASKS, WAYS * SHOTS, DIM], [3, 4]),
        query_y=tf.constant(np.where(labels < 0, 0, labels)),
    )


def _move_off_zero(learner) -> None:
    """Learned terms and loss networks may start flat: give every weight outside the
    prediction network a random value."""
    network = {id(v) for v in learner.network.trainable_variables}
    for k, variable in enumerate(learner.trainable_variables):
        if id(variable) not in network:
            variable.assign(tf.random.stateless_normal(variable.shape, [5, k]) * 0.5)


def _learners():
    metal = MeTAL(**SHARED)  # per-step networks and the query term
    viable = VIABLE(
        **SHARED, loss_network=lambda: RelationLossNetwork(hidden_units=(8, 8), activation="tanh")
    )
    return {"CAVIA": CAVIA(**SHARED), "VIABLE": viable, "MeTAL": metal}


@pytest.mark.parametrize("name", ["CAVIA", "VIABLE", "MeTAL"])
def test_the_walk_on_the_inner_loss_is_the_learners_own_loop_bit_for_bit(name):
    learner, batch = _learners()[name], _batch()
    support = (batch.support_x, batch.support_y, batch.support_mask)
    learner.adapt(*support, query_x=batch.query_x)  # builds its weights
    _move_off_zero(learner)
    path, walked = inner_path.walk(learner, batch)
    adapted, losses = learner.adapt(*support, query_x=batch.query_x, return_inner_losses=True)
    np.testing.assert_array_equal(walked.context, adapted.context)
    np.testing.assert_array_equal(tf.stack([step.inner for step in path]), losses)
    assert [step.index for step in path] == [0, 1]
    np.testing.assert_array_equal(path[0].state.context, learner.start_state(*support).context)


def test_each_step_reads_its_own_network_and_the_queries():
    learner, batch = _learners()["MeTAL"], _batch()
    support = (batch.support_x, batch.support_y, batch.support_mask)
    learner.adapt(*support, query_x=batch.query_x)
    _move_off_zero(learner)
    path, _ = inner_path.walk(learner, batch)
    real = inner_path.support_of(batch)
    state = path[1].state
    at_one = learner.inner_loss(state, *real, step=1, query_x=batch.query_x)
    at_zero = learner.inner_loss(state, *real, step=0, query_x=batch.query_x)
    np.testing.assert_array_equal(path[1].inner, at_one)
    assert np.all(np.abs(at_one - at_zero) > 1e-6)  # another network at step 1
    other = learner.inner_loss(state, *real, step=1, query_x=batch.query_x[:, ::-1] * 2)
    assert np.all(np.abs(at_one - other) > 1e-6)  # the query term reads the queries
    with pytest.raises(ValueError, match="a loss network for each of its 2 inner steps"):
        inner_path.walk(learner, batch, steps=3)  # step 2 has no network of its own


def test_the_walk_on_the_task_loss_is_cavias_loop_on_the_same_weights():
    learners, batch = _learners(), _batch()
    viable, cavia = learners["VIABLE"], learners["CAVIA"]
    support = (batch.support_x, batch.support_y, batch.support_mask)
    viable.adapt(*support)
    cavia.adapt(*support)
    _move_off_zero(viable)
    cavia.network.set_weights(viable.network.get_weights())
    path, walked = inner_path.walk(viable, batch, stepped="task")
    np.testing.assert_array_equal(walked.context, cavia.adapt(*support).context)
    step = path[0]
    assert np.all(np.abs(step.inner_grad - step.task_grad) > 1e-6)  # two losses, two steps
    assert np.all(np.abs(step.cosine) <= 1 + 1e-6)
    # A rate of the walk's own: the first step's length scales with it.
    _, half = inner_path.walk(viable, batch, stepped="task", steps=1, rate=0.25)
    np.testing.assert_allclose(half.context, -0.25 * step.task_grad, rtol=1e-6)


@pytest.mark.parametrize(
    "learner, says",
    [
        (lambda: MAML(**SHARED), "adapts weights"),
        (
            lambda: CAVIA(**SHARED, head=SteppedLinearHead(), adapt_head=True),
            "adapts context, head",
        ),
        (lambda: CAVIA(**SHARED, learned_inner_lr=True), "Meta-SGD's learned rates"),
    ],
    ids=["MAML", "CAVIA with its head stepped", "Meta-SGD"],
)
def test_a_loop_that_is_not_the_contexts_at_one_rate_is_refused(learner, says):
    learner = learner()
    with pytest.raises(ValueError, match=says) as refused:
        inner_path.walk(learner, _batch())
    assert learner.method_name in str(refused.value) and "\n" not in str(refused.value)
