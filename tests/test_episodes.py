"""N-way K-shot episodes: classes relabelled, examples without replacement, seeded."""

import numpy as np
import pytest
import tensorflow as tf

from viable_tf.tasks import seed_for
from viable_tf.tasks.episodes import EpisodeSampler


def _dataset(num_classes=12, per_class=20, dim=8):
    # Row r encodes its own index in feature 0, and its class in feature 1.
    labels = np.repeat(np.arange(num_classes) * 7 + 3, per_class)  # arbitrary class ids
    embeddings = np.zeros((len(labels), dim), np.float32)
    embeddings[:, 0] = np.arange(len(labels))
    embeddings[:, 1] = labels
    return embeddings, labels


def test_episode_structure():
    embeddings, labels = _dataset()
    sampler = EpisodeSampler(embeddings, labels, num_ways=5, num_shots=3, num_queries=4)
    episode = sampler.sample(seed_for(0, 1))
    assert episode.support_x.shape == (15, 8) and episode.query_x.shape == (20, 8)
    support_rows = episode.support_x[:, 0].numpy().astype(int)
    query_rows = episode.query_x[:, 0].numpy().astype(int)
    assert len(set(support_rows) | set(query_rows)) == 35  # without replacement
    np.testing.assert_array_equal(np.bincount(episode.support_y.numpy()), [3] * 5)
    np.testing.assert_array_equal(np.bincount(episode.query_y.numpy()), [4] * 5)
    # each label is one class, the same in support and query, and N distinct classes
    classes = {}
    for x, y in ((episode.support_x, episode.support_y), (episode.query_x, episode.query_y)):
        for row_class, label in zip(x[:, 1].numpy(), y.numpy(), strict=True):
            assert classes.setdefault(int(label), row_class) == row_class
    assert len(set(classes.values())) == 5
    assert episode.support_mask.numpy().all()


def test_seeded_episodes_and_random_relabelling():
    embeddings, labels = _dataset()
    sampler = EpisodeSampler(embeddings, labels, num_ways=5, num_shots=1, num_queries=2)
    a, b = sampler.sample(seed_for(3, 0)), sampler.sample(seed_for(3, 0))
    np.testing.assert_array_equal(a.support_x, b.support_x)
    label_zero_classes = {float(sampler.sample(seed_for(3, i)).support_x[0, 1]) for i in range(30)}
    assert len(label_zero_classes) > 5  # label 0 is not always the same class


def test_dataset_batches_episodes_and_evaluation_sets_repeat():
    embeddings, labels = _dataset()
    sampler = EpisodeSampler(embeddings, labels, num_ways=5, num_shots=2, num_queries=3)
    evaluation = sampler.dataset(4, seed=9, num_episodes=8)
    first = [batch.support_x.numpy() for batch in evaluation]
    again = [batch.support_x.numpy() for batch in evaluation]
    assert [f.shape for f in first] == [(4, 10, 8), (4, 10, 8)]
    for x, y in zip(first, again, strict=True):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(first[0][1], sampler.sample(seed_for(9, 1)).support_x)
    training = next(iter(sampler.dataset(6, seed=0)))
    assert training.query_y.shape == (6, 15) and training.query_y.dtype == tf.int32


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_ways": 13}, "13-way episodes need 13 classes, found 12"),
        ({"num_shots": 15, "num_queries": 10}, "has 20 examples"),
        ({"num_queries": 0}, "num_queries must be >= 1"),
    ],
)
def test_bad_settings_are_refused(kwargs, message):
    embeddings, labels = _dataset()
    settings = {"num_ways": 5, "num_shots": 1, "num_queries": 1, **kwargs}
    with pytest.raises(ValueError, match=message):
        EpisodeSampler(embeddings, labels, **settings)
