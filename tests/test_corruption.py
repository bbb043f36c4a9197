"""Corrupted support sets (SPEC §8): sine outliers and noise, label noise in episodes.
Seeded, in the graph, the exact count, masks respected, queries clean, bad input refused."""

import numpy as np
import pytest
import tensorflow as tf

from viable_tf.cli.common import UsageError, parse_gin
from viable_tf.tasks import EpisodeSampler, SineTasks, seed_for, sine_curve
from viable_tf.tasks.corruption import chosen_points


def _sine(**kwargs):
    return SineTasks(num_support=10, num_query=7, **kwargs)


def test_m_outliers_of_each_task_and_nothing_else_changes():
    clean, params = _sine().sample_tasks(seed_for(3, 5), 64)
    noisy, noisy_params = _sine(outliers=2).sample_tasks(seed_for(3, 5), 64)
    np.testing.assert_array_equal(params.amplitude.numpy(), noisy_params.amplitude.numpy())
    for name in ("support_x", "support_mask", "query_x", "query_y"):  # queries stay clean
        np.testing.assert_array_equal(getattr(clean, name).numpy(), getattr(noisy, name))
    changed = (noisy.support_y.numpy() != clean.support_y.numpy())[..., 0]  # [B, K]
    np.testing.assert_array_equal(changed.sum(axis=1), 2)  # exactly m per task
    assert np.abs(noisy.support_y.numpy()).max() <= 5.0  # drawn over the output range
    outlier_y = noisy.support_y.numpy()[changed]
    assert outlier_y.min() < -3.0 and outlier_y.max() > 3.0  # uniform over [-5, 5]
    # Not always the same positions: drawn per task.
    assert len({tuple(np.flatnonzero(row)) for row in changed}) > 20
    # Seeded: the same seed, the same corruption; another seed, another.
    again, _ = _sine(outliers=2).sample_tasks(seed_for(3, 5), 64)
    np.testing.assert_array_equal(again.support_y.numpy(), noisy.support_y.numpy())
    other, _ = _sine(outliers=2).sample_tasks(seed_for(3, 6), 64)
    assert not np.array_equal(other.support_y.numpy(), noisy.support_y.numpy())


def test_outliers_land_on_real_points_only_and_keep_their_mask_bit():
    tasks = SineTasks(num_support=6, min_support=0, outliers=3)
    batch, params = tasks.sample_tasks(seed_for(1, 2), 200)
    curve = sine_curve(params, batch.support_x).numpy()[..., 0]
    changed = batch.support_y.numpy()[..., 0] != curve
    mask = batch.support_mask.numpy()
    assert not (changed & ~mask).any()  # padding untouched
    np.testing.assert_array_equal(changed.sum(1), np.minimum(3, mask.sum(1)))  # all if K < m
    assert (mask.sum(1) == 0).any() and (mask.sum(1) >= 3).any()


def test_gaussian_noise_moves_every_real_point():
    tasks = SineTasks(num_support=8, min_support=4, noise_std=0.5)
    batch, params = tasks.sample_tasks(seed_for(0, 0), 300)
    noise = batch.support_y.numpy()[..., 0] - sine_curve(params, batch.support_x).numpy()[..., 0]
    mask = batch.support_mask.numpy()
    np.testing.assert_array_equal(noise[~mask], 0.0)
    # 1,800 draws: within 4 standard errors of N(0, 0.5^2)'s mean and spread
    assert abs(noise[mask].std() - 0.5) < 0.04 and abs(noise[mask].mean()) < 0.05


def test_the_corruption_is_the_same_under_xla():
    tasks = _sine(outliers=3, noise_std=0.1)

    def draw(seed):
        return tasks.sample(seed, 16).support_y

    eager = draw(seed_for(4, 4)).numpy()
    compiled = tf.function(draw, jit_compile=True, autograph=False)(seed_for(4, 4)).numpy()
    # The same draws; XLA's log and cos may round the noise's last bits differently.
    np.testing.assert_allclose(compiled, eager, rtol=1e-5, atol=1e-6)


def test_chosen_points_picks_exactly_min_m_k_real_points():
    mask = tf.constant([[True, True, True, False], [False, True, False, False]])
    chosen = chosen_points(seed_for(0, 1), mask, 2).numpy()
    np.testing.assert_array_equal(chosen.sum(1), [2, 1])
    assert not (chosen & ~mask.numpy()).any()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"outliers": 11}, "outliers=11 is more than the num_support=10"),
        ({"outliers": -1}, "outliers must be >= 0"),
        ({"noise_std": -0.1}, "noise_std must be >= 0"),
    ],
)
def test_sine_corruption_that_cannot_be_drawn_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        _sine(**kwargs)


def test_sine_outliers_are_recorded_in_the_hparams():
    assert _sine(outliers=2, noise_std=0.3).hparams() == {
        "num_support": 10,
        "min_support": 10,
        "outliers": 2,
        "noise_std": 0.3,
    }


def test_label_noise_on_a_regression_family_stops_at_start():
    with pytest.raises(UsageError, match="label_noise"):
        parse_gin(["sine/cavia.gin"], ["SineTasks.label_noise='swap'"])


# -- label noise in episodes ------------------------------------------------------------

CLASSES, PER_CLASS = 12, 20


def _sampler(**kwargs):
    """Embeddings that say what they are: [class, example, 1]."""
    labels = np.repeat([f"c{i:02d}" for i in range(CLASSES)], PER_CLASS)
    embeddings = np.stack(
        [np.repeat(np.arange(CLASSES), PER_CLASS), np.tile(np.arange(PER_CLASS), CLASSES)], 1
    ).astype(np.float32)
    embeddings = np.concatenate([embeddings, np.ones([len(labels), 1], np.float32)], 1)
    settings = {"num_ways": 5, "num_shots": 5, "num_queries": 10, **kwargs}
    return EpisodeSampler(embeddings, labels, **settings)


def _true_classes(sampler, seed):
    batch = sampler.sample_batch(seed, 32)
    support = batch.support_x.numpy().reshape(32, 5, 5, 3)  # [B, N, K, (class, example, 1)]
    query = batch.query_x.numpy().reshape(32, 5, 10, 3)
    return batch, support, query


@pytest.mark.parametrize("noise", ["swap", "outlier"])
def test_m_noisy_shots_per_class_the_queries_clean(noise):
    clean_batch, clean, clean_query = _true_classes(_sampler(), seed_for(0, 9))
    batch, support, query = _true_classes(
        _sampler(label_noise=noise, noisy_shots=2), seed_for(0, 9)
    )
    np.testing.assert_array_equal(batch.support_y.numpy(), clean_batch.support_y.numpy())
    np.testing.assert_array_equal(query, clean_query)  # the queries are the clean ones
    np.testing.assert_array_equal(support[:, :, 2:], clean[:, :, 2:])  # the other shots too
    own = clean[:, :, :1, 0]  # [B, N, 1]: each label's true class
    episode = clean[:, :, 0, 0]  # [B, N]: the episode's classes
    noisy_class = support[:, :, :2, 0]  # [B, N, 2]
    assert (noisy_class != own).all()  # every noisy shot is another class's drawing
    inside = (noisy_class[..., None] == episode[:, None, None, :]).any(-1)
    assert inside.all() if noise == "swap" else not inside.any()
    # No drawing twice in an episode: the noisy ones are not any query or other shot.
    drawings = np.concatenate([support, query], axis=2)[..., :2].reshape(32, -1, 2)
    for episode_drawings in drawings:
        assert len({tuple(d) for d in episode_drawings}) == len(episode_drawings)
    if noise == "swap":  # each class gives exactly one drawing per noisy shot index
        for j in range(2):
            given = np.sort(noisy_class[:, :, j], axis=1)
            np.testing.assert_array_equal(given, np.sort(episode, axis=1))


def test_label_noise_is_seeded():
    sampler = _sampler(label_noise="outlier", noisy_shots=1)
    a = sampler.sample_batch(seed_for(2, 3), 4).support_x.numpy()
    np.testing.assert_array_equal(a, sampler.sample_batch(seed_for(2, 3), 4).support_x.numpy())
    assert not np.array_equal(a, sampler.sample_batch(seed_for(2, 4), 4).support_x.numpy())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"label_noise": "flip", "noisy_shots": 1}, "label_noise must be one of"),
        ({"label_noise": "swap", "noisy_shots": 6}, "noisy_shots=6 is more than the 5 shots"),
        ({"label_noise": "none", "noisy_shots": 1}, "needs a label_noise"),
        ({"label_noise": "swap", "noisy_shots": -1}, "noisy_shots must be >= 0"),
        (  # 20 drawings: 5 shots + 14 queries leave 1 spare per class
            {"label_noise": "swap", "noisy_shots": 2, "num_queries": 14},
            "the smallest class has 1 beyond its shots and queries",
        ),
        ({"label_noise": "outlier", "noisy_shots": 1, "num_ways": 12}, "classes outside"),
    ],
)
def test_label_noise_that_cannot_be_drawn_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        _sampler(**kwargs)
