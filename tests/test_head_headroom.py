"""experiments/head_headroom: the rules it scores, each against NumPy."""

import numpy as np
import pytest
import tensorflow as tf
from fake_leo import write_fake_leo

from lab import head_headroom
from viable_tf.tasks import TaskBatch

N, K, V, H, B = 4, 2, 3, 6, 5


def _batch(seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(B, N, H))
    support_y = np.tile(np.repeat(np.arange(N), K), (B, 1)).astype(np.int32)
    query_y = np.tile(np.repeat(np.arange(N), V), (B, 1)).astype(np.int32)
    take = lambda y: np.take_along_axis(centres, y[..., None], 1)  # noqa: E731
    # Wide noise and unequal norms, so that Euclidean and cosine class means disagree.
    scale = rng.uniform(0.2, 5.0, size=(B, N * K, 1))
    support_x = scale * (take(support_y) + 0.9 * rng.normal(size=(B, N * K, H)))
    query_x = take(query_y) + 0.9 * rng.normal(size=(B, N * V, H))
    return TaskBatch(
        tf.constant(support_x, tf.float32),
        tf.constant(support_y),
        tf.ones(support_y.shape, tf.bool),
        tf.constant(query_x, tf.float32),
        tf.constant(query_y),
    )


def _unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _nearest_mean(support_x, support_y, query_x):
    means = np.stack(
        [[s[t == c].mean(0) for c in range(N)] for s, t in zip(support_x, support_y, strict=True)]
    )
    return ((query_x[:, :, None] - means[:, None]) ** 2).sum(-1).argmin(-1), means


@pytest.fixture(autouse=True)
def small_grid(monkeypatch):
    """A grid of 2 x 2 x 2 points (the tool's own has 50): the suite's time."""
    monkeypatch.setattr(head_headroom, "TAUS", (0.1, 0.05))
    monkeypatch.setattr(head_headroom, "RATES", (0.03, 0.3))
    monkeypatch.setattr(head_headroom, "STEPS", (1, 5))


def test_each_rule_matches_numpy():
    batch = _batch()
    sx, sy, qx, qy = (
        t.numpy() for t in (batch.support_x, batch.support_y, batch.query_x, batch.query_y)
    )
    got = head_headroom.head_accuracies(batch, N)
    nearest, _ = _nearest_mean(sx, sy, qx)
    np.testing.assert_allclose(got[("means",)], (nearest == qy).mean(1), atol=1e-6)
    cosine, means = _nearest_mean(_unit(sx), sy, _unit(qx))
    np.testing.assert_allclose(got[("cosine",)], (cosine == qy).mean(1), atol=1e-6)
    assert not np.array_equal(nearest, cosine)  # the two rules differ on this batch

    # S gradient steps of the support cross-entropy (mean over points) on the head,
    # derived by hand: dL/dz = (softmax(z) - onehot) / (tau * P).
    tau, lr, steps = 0.1, 0.3, 5
    kernel = 2.0 * np.transpose(means, (0, 2, 1))  # [B, H, N]
    bias = -(means**2).sum(-1)  # [B, N]
    support, onehot = _unit(sx), np.eye(N)[sy]
    for _ in range(steps):
        z = (support @ kernel + bias[:, None]) / tau
        p = np.exp(z - z.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        dz = (p - onehot) / (tau * support.shape[1])  # [B, P, N]
        kernel = kernel - lr * np.transpose(support, (0, 2, 1)) @ dz
        bias = bias - lr * dz.sum(1)
    logits = _unit(qx) @ kernel + bias[:, None]
    ordered = np.sort(logits, -1)
    clear = ordered[..., -1] - ordered[..., -2] > 1e-3  # no near-ties between float paths
    assert clear.mean() > 0.9
    tuned = got[("tuned", tau, lr, steps)]
    expected = (logits.argmax(-1) == qy).mean(1)
    # Episodes without a near-tie agree exactly; the rest within one query.
    exact = clear.all(1)
    np.testing.assert_allclose(tuned[exact], expected[exact], atol=1e-6)
    assert np.all(np.abs(tuned - expected) <= 1.0 / qy.shape[1] + 1e-6)
    assert len([k for k in got if k[0] == "tuned"]) == (
        len(head_headroom.TAUS) * len(head_headroom.RATES) * len(head_headroom.STEPS)
    )


def test_the_tool_scores_validation_and_test_episodes(tmp_path):
    features = write_fake_leo(
        tmp_path,
        dataset="omniglot",
        dim=64,
        per_class=20,
        split_classes={"train": 6, "val": 6, "test": 6},
    )
    result = head_headroom.headroom(features, "5way1shot", episodes=20)
    assert set(result) == {"validation", "test"}
    for split in result.values():
        assert all(values.shape == (20,) for values in split.values())
    text = head_headroom.report("5way1shot", result)
    assert "fine-tuned head, chosen on validation" in text and "| class means (reference) |" in text


def test_bad_episodes_are_refused(monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["head_headroom", "--features=x", "--episodes=0"])
    with pytest.raises(SystemExit):
        head_headroom.main()
    assert "--episodes must be >= 1, got 0" in capsys.readouterr().err
