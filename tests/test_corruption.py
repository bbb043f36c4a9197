"""Corrupted support sets (docs/method.md §8): sine outliers and noise, label noise in episodes.
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
        (  # 11 noisy shots of 11 classes from the 1 class outside: more than its 20 drawings
            {
                "label_noise": "outlier",
                "noisy_shots": 2,
                "num_ways": 11,
                "num_shots": 2,
                "num_queries": 1,
            },
            "takes up to 22 drawings of each of the 1 classes outside",
        ),
    ],
)
def test_label_noise_that_cannot_be_drawn_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        _sampler(**kwargs)


# -- robust inner losses: the hand-made baselines -----------------------------------------


def test_robust_losses_equal_their_numpy_definitions():
    from viable_tf.learners import task_losses

    rng = np.random.default_rng(0)
    y_hat, y = rng.normal(size=(2, 5, 1)) * 3, rng.normal(size=(2, 5, 1))
    error = np.abs(y_hat - y)[..., 0]
    huber = np.where(error <= 1.0, 0.5 * error**2, error - 0.5)
    args = (tf.constant(y_hat, tf.float32), tf.constant(y, tf.float32))
    np.testing.assert_allclose(task_losses.huber(*args), huber, rtol=1e-5)
    np.testing.assert_allclose(task_losses.absolute_error(*args), error, rtol=1e-5)
    logits, labels = rng.normal(size=(2, 5, 4)), rng.integers(0, 4, size=(2, 5))
    p = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    target = np.eye(4)[labels] * 0.9 + 0.1 / 4
    smoothed = -(target * np.log(p)).sum(-1)
    bounded = 1.0 - np.take_along_axis(p, labels[..., None], -1)[..., 0]
    args = (tf.constant(logits, tf.float32), tf.constant(labels, tf.int32))
    np.testing.assert_allclose(task_losses.smoothed_cross_entropy(*args), smoothed, rtol=1e-5)
    np.testing.assert_allclose(task_losses.bounded_cross_entropy(*args), bounded, rtol=1e-5)


def test_a_huber_inner_loss_bounds_an_outliers_pull_on_the_context():
    """CAVIA adapting with MSE moves phi in proportion to an outlier's error; with Huber
    the outlier pulls no harder than any point at the threshold. The outer loss stays MSE."""
    from viable_tf.learners import CAVIA

    tasks = _sine()
    batch, _ = tasks.sample_tasks(seed_for(0, 1), 8)
    far = batch.support_y.numpy().copy()
    far[:, 0] += 1000.0  # one wild outlier per task
    moved = {}
    for inner in (None, "huber"):
        tf.keras.utils.set_random_seed(0)
        learner = CAVIA(input_dim=1, output_dim=1, inner_task_loss=inner)
        clean = learner.adapt(batch.support_x, batch.support_y, batch.support_mask)
        wild = learner.adapt(batch.support_x, tf.constant(far), batch.support_mask)
        moved[inner] = np.abs(wild.context.numpy() - clean.context.numpy()).max()
        assert learner.hparams()["inner_task_loss"] == (inner or "mse")
        assert learner.query_loss(batch, clean).shape == (8,)  # the MSE on the queries
    assert moved[None] > 100 * moved["huber"]


@pytest.mark.parametrize(
    ("inner", "task_loss", "message"),
    [
        ("hinge", "mse", "unknown inner_task_loss 'hinge'"),
        ("huber", "cross_entropy", "stands in for 'mse', not this learner's task loss"),
        ("bounded_cross_entropy", "mse", "stands in for 'cross_entropy'"),
    ],
)
def test_an_inner_loss_that_does_not_fit_is_refused(inner, task_loss, message):
    from viable_tf.learners import CAVIA

    with pytest.raises(ValueError, match=message):
        CAVIA(input_dim=1, output_dim=3, task_loss=task_loss, inner_task_loss=inner)


# -- robust prototypes --------------------------------------------------------------------


def _weiszfeld(points, iterations=10, eps=1e-6):
    median = points.mean(0)
    for _ in range(iterations):
        weights = 1.0 / np.sqrt(((points - median) ** 2).sum(-1) + eps**2)
        median = (weights[:, None] * points).sum(0) / weights.sum()
    return median


def test_robust_prototypes_resist_a_far_point_and_respect_the_mask():
    from viable_tf.learners.prototypes import prototype_head

    rng = np.random.default_rng(3)
    cls0 = rng.normal(size=(4, 3)) * 0.1 + 1.0  # features around (1, 1, 1)
    far = np.array([[-40.0, 40.0, -40.0]])  # a mislabelled drawing, far away
    cls1 = rng.normal(size=(5, 3)) * 0.1 + np.array([1.0, -1.0, 0.0])
    padding = np.full((1, 3), np.inf)
    features = np.concatenate([cls0, far, cls1, padding])[None].astype(np.float32)  # [1, 11, 3]
    labels = tf.constant([[0] * 5 + [1] * 5 + [0]])
    mask = tf.constant([[True] * 10 + [False]])
    points0 = np.concatenate([cls0, far])
    expected = {
        "mean": points0.mean(0),
        "median": _weiszfeld(points0.astype(np.float64)),
    }
    for prototype in ("mean", "median", "weighted"):
        kernel, bias = prototype_head(tf.constant(features), labels, mask, 2, prototype)
        mu0 = kernel.numpy()[0, :, 0] / 2.0
        assert np.isfinite(kernel.numpy()).all() and np.isfinite(bias.numpy()).all()
        if prototype in expected:
            np.testing.assert_allclose(mu0, expected[prototype], rtol=1e-4, atol=1e-5)
        if prototype != "mean":  # the far point barely moves it
            assert np.abs(mu0 - cls0.mean(0)).max() < 0.5 < np.abs(points0.mean(0) - mu0).max()
        np.testing.assert_allclose(bias.numpy()[0], -(kernel.numpy()[0] ** 2).sum(0) / 4, 1e-5)
    # The weighted mean gives the far point no weight (its cosine to the rest is < 0) and
    # the others their mean cosine to the other points of the class.
    kernel, _ = prototype_head(tf.constant(features), labels, mask, 2, "weighted")
    unit = points0 / np.linalg.norm(points0, axis=1, keepdims=True)
    cosine = unit @ unit.T
    weight = np.maximum((cosine.sum(1) - 1.0) / 4.0, 0.0)
    assert weight[-1] == 0.0
    expected = (weight[:, None] * points0).sum(0) / weight.sum()
    np.testing.assert_allclose(kernel.numpy()[0, :, 0] / 2.0, expected, rtol=1e-4)


def test_every_class_median_is_its_own_points_weiszfeld():
    """20 classes of 5 shuffled points, two tasks, one point of no class and one padded:
    each class's median is Weiszfeld over its own points alone (the others' distances
    never enter), and its gradient is finite."""
    from viable_tf.learners.prototypes import class_members, class_prototypes

    rng = np.random.default_rng(11)
    n, k, h = 20, 5, 8
    labels = np.stack([rng.permutation(np.repeat(np.arange(n), k)) for _ in range(2)])
    labels[0, 3] = n  # a point of no class of the episode
    mask = np.ones_like(labels, bool)
    mask[1, 7] = False  # padding
    features = rng.normal(size=(2, n * k, h)).astype(np.float32)
    features[~mask] = 0.0  # prototype_head zeroes padding before the prototypes
    x = tf.constant(features)
    with tf.GradientTape() as tape:
        tape.watch(x)
        members = class_members(tf.constant(labels), tf.constant(mask), n)
        median = class_prototypes(x, members, "median")
        loss = tf.reduce_sum(tf.sin(median))
    gradient = tape.gradient(loss, x)
    for b in range(2):
        for c in range(n):
            own = features[b][(labels[b] == c) & mask[b]].astype(np.float64)
            np.testing.assert_allclose(median[b, c], _weiszfeld(own), rtol=1e-4, atol=1e-5)
    assert np.isfinite(gradient.numpy()).all()
    assert gradient[0, 3].numpy().max() == 0.0 == gradient[1, 7].numpy().max()


def test_at_one_shot_every_prototype_is_the_point_itself():
    from viable_tf.learners.prototypes import prototype_head

    features = tf.constant(np.random.default_rng(0).normal(size=(2, 3, 4)), tf.float32)
    labels, mask = tf.constant([[2, 0, 1]] * 2), tf.ones([2, 3], tf.bool)
    heads = [
        prototype_head(features, labels, mask, 3, p)[0] for p in ("mean", "median", "weighted")
    ]
    for kernel in heads[1:]:
        np.testing.assert_allclose(kernel.numpy(), heads[0].numpy(), rtol=1e-5, atol=1e-6)


def test_an_unknown_prototype_is_refused():
    from viable_tf.learners import PrototypeHead

    with pytest.raises(ValueError, match="prototype must be one of"):
        PrototypeHead(prototype="mode")


def test_a_served_request_can_carry_outliers():
    rng = np.random.default_rng(5)
    clean, (amplitude, phase) = _sine().request(
        np.random.default_rng(5), num_support=6, num_query=3
    )
    noisy, same = _sine().request(rng, num_support=6, num_query=3, outliers=2)
    assert same == (amplitude, phase)
    np.testing.assert_array_equal(noisy["support_x"], clean["support_x"])
    moved = noisy["support_y"] != clean["support_y"]
    assert moved.sum() == 2 and np.abs(noisy["support_y"]).max() <= 5.0
    with pytest.raises(ValueError, match="outliers must be in"):
        _sine().request(rng, num_support=6, num_query=3, outliers=7)
