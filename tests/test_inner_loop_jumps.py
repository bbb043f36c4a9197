"""lab/inner_loop_jumps.py: `catch` trains on from a copy of a run's latest checkpoint
and keeps the states before a jump; `anatomy`'s inner loop is the learner's own."""

import numpy as np
import pytest
import tensorflow as tf

from lab import inner_loop_jumps
from viable_tf.cli import train as train_cli
from viable_tf.learners import CAVIA, VIABLE
from viable_tf.networks import RelationLossNetwork
from viable_tf.tasks import TaskBatch


@pytest.mark.slow
def test_catch_keeps_the_ring_before_the_jump_and_leaves_the_run_alone(tmp_path, run_cli, capsys):
    run, out = tmp_path / "run", tmp_path / "out"
    argv = [
        "--gin_file=sine/cavia.gin",
        "--gin_param=NUM_STEPS=20",
        "--gin_param=EvaluationSpec.eval_every=10",
        "--gin_param=Trainer.show_progress=False",
        "--gin_param=test_evaluator.num_tasks=20",
        f"--model_dir={run}",
    ]
    code, printed = run_cli(train_cli, argv)
    assert code == 0, printed.err[-2000:]
    record = (run / "checkpoints" / "checkpoint").read_text()

    # Any loss is above 0 x the median: the update after the first 50 is the "jump".
    step = inner_loop_jumps.catch(str(run), str(out), max_updates=60, factor=0.0, gin_params=())
    assert step == 20 + 51
    assert "jump: meta loss" in capsys.readouterr().out
    kept = inner_loop_jumps.ring_states(str(out / f"caught_{step}"))
    assert [s for s, _, _ in kept] == list(range(step - 7, step + 1))
    assert all(np.isfinite(loss) and loss > 0 for _, loss, _ in kept)
    assert (run / "checkpoints" / "checkpoint").read_text() == record  # the run untouched

    inner_loop_jumps.anatomy(str(run), str(out / f"caught_{step}"), (), rates=(1.0, 0.5))
    report = capsys.readouterr().out
    assert f"meta-batch drawn at step {step}" in report and f"state at {step - 7}" in report
    assert report.count("task loss at rate 0.5") == 2 * 8  # two meta-batches, eight states


def test_inner_loop_rows_follow_the_learners_own_adaptation():
    tasks, ways, shots, dim = 2, 3, 2, 5
    labels = tf.tile(tf.tile(tf.range(ways), [shots])[None], [tasks, 1])
    batch = TaskBatch(
        support_x=tf.random.stateless_normal([tasks, ways * shots, dim], [1, 2], alg="philox"),
        support_y=labels,
        support_mask=tf.ones([tasks, ways * shots], tf.bool),
        query_x=tf.random.stateless_normal([tasks, ways * shots, dim], [3, 4], alg="philox"),
        query_y=labels,
    )
    shared = dict(
        input_dim=dim,
        output_dim=ways,
        task_loss="cross_entropy",
        context_dim=4,
        num_inner_steps=2,
        inner_lr=0.5,
    )
    learner = VIABLE(
        **shared, loss_network=lambda: RelationLossNetwork(hidden_units=(8, 8), activation="tanh")
    )
    rows = inner_loop_jumps.inner_loop_rows(learner, batch)
    assert [row["step"] for row in rows] == [0, 1, 2]
    adapted = learner.adapt(batch.support_x, batch.support_y, batch.support_mask)
    np.testing.assert_allclose(rows[-1]["query"], learner.query_loss(batch, adapted), rtol=1e-5)
    np.testing.assert_allclose(rows[-1]["phi"], tf.norm(adapted.context, axis=1), rtol=1e-5)
    for row in rows[:-1]:
        assert np.all(np.abs(row["cosine"]) <= 1 + 1e-5) and np.all(row["grad"] > 0)
    # The task loss's gradient at phi_0 is the support loss's: central differences.
    start = learner.start_state(batch.support_x, batch.support_y, batch.support_mask)
    support = (batch.support_x, batch.support_y, batch.support_mask)
    eps, grad = 3e-3, np.zeros(start.context.shape)
    for j in range(start.context.shape[1]):
        step = tf.one_hot(j, start.context.shape[1]) * eps
        up = learner.support_loss(start.replace(context=start.context + step), *support)
        down = learner.support_loss(start.replace(context=start.context - step), *support)
        grad[:, j] = (up - down).numpy() / (2 * eps)
    np.testing.assert_allclose(rows[0]["task_grad"], np.linalg.norm(grad, axis=1), rtol=2e-2)
    # ... and not the learned inner loss's, which this loss network moves by far more.
    assert np.all(np.abs(rows[0]["grad"] / rows[0]["task_grad"] - 1) > 0.1)
    # The counterfactual at the learner's own rate is its own inner loop...
    path, query = inner_loop_jumps.stepped_path(learner, batch, "inner", 0.5)
    np.testing.assert_allclose(path, [row["support"] for row in rows], rtol=1e-5)
    np.testing.assert_allclose(query, rows[-1]["query"], rtol=1e-5)
    # ... and the task loss's steps are CAVIA's: a learner whose inner loss is its task loss.
    cavia = CAVIA(**shared)
    cavia.network.set_weights(learner.network.get_weights())
    path, query = inner_loop_jumps.stepped_path(learner, batch, "task", 0.5)
    adapted = cavia.adapt(batch.support_x, batch.support_y, batch.support_mask)
    np.testing.assert_allclose(query, cavia.query_loss(batch, adapted), rtol=1e-5)
    assert path.shape == (3, tasks) and np.all(path[2] < path[0])
