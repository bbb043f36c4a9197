"""lab/meta_gradient_noise.py: the noise statistics of a set of meta-gradients
against their definitions, and the split of a learner's variables into its parts."""

import numpy as np
import pytest

from lab.meta_gradient_noise import gradient_statistics, parts
from viable_tf.learners import CAVIA, VIABLE
from viable_tf.networks import SimpleLossNetwork


def test_statistics_follow_their_definitions():
    signal = np.array([30.0, 0.0, 40.0, 0.0])  # |s| = 50
    offsets = np.array(
        [
            [1.0, 2.0, 0.0, 0.0],
            [-1.0, -2.0, 0.0, 0.0],
            [0.0, 0.0, 0.0, 20.0],
            [0.0, 0.0, 0.0, -20.0],
        ]
    )  # sum 0: the mean of the four gradients is the signal itself
    gradients = signal + offsets
    stats = gradient_statistics(gradients, clip_value=10.0)
    variance = (offsets**2).sum() / 3  # (5 + 5 + 400 + 400) / 3 = 270
    assert stats["mean_norm"] == pytest.approx(50.0)
    assert stats["snr"] == pytest.approx((2500.0 - variance / 4) / variance)
    assert stats["norm"] == pytest.approx(np.linalg.norm(gradients, axis=1).mean())
    unit = gradients / np.linalg.norm(gradients, axis=1, keepdims=True)
    pairs = [unit[i] @ unit[j] for i in range(4) for j in range(4) if i != j]
    assert stats["cos"] == pytest.approx(np.mean(pairs))
    assert stats["clipped"] == pytest.approx(10 / 16)  # 30 and 40 of each, and the two 20s
    assert stats["elements"] == 4 and stats["live"] == 4
    # Per element |mean| / rms: 30 / sqrt(900.5), 0 / 1 (0 +- 2 twice), 40 / 40, 0 / 14.1.
    rms = np.sqrt((gradients**2).mean(0))
    assert stats["coherence"] == pytest.approx(np.mean(np.abs(signal) / rms))
    assert stats["coherence"] == pytest.approx((30 / np.sqrt(900.5) + 0 + 1 + 0) / 4)
    # An element without any gradient (a dead unit's weight) is not live and not averaged.
    dead = gradient_statistics(np.concatenate([gradients, np.zeros((4, 2))], axis=1), None)
    assert dead["elements"] == 6 and dead["live"] == 4
    assert dead["coherence"] == pytest.approx(stats["coherence"])
    # Noise larger than the mean can carry: no signal left, SNR 0, not negative.
    assert gradient_statistics(np.array([[1.0, 0.0], [-1.0, 0.0]]), None)["snr"] == 0.0
    assert np.isnan(gradient_statistics(gradients, None)["clipped"])


def test_parts_split_a_learned_loss_from_the_rest_and_keep_every_variable():
    kwargs = dict(input_dim=1, output_dim=1, task_loss="mse", context_dim=3)
    viable = VIABLE(**kwargs, loss_network=lambda: SimpleLossNetwork(hidden_units=(8,)))
    split = parts(viable)
    assert list(split) == ["prediction", "loss network"]
    own = {id(v) for v in viable.loss_network.trainable_variables}
    assert own and {id(v) for v in split["loss network"]} == own
    assert not own & {id(v) for v in split["prediction"]}
    assert len(split["prediction"]) + len(own) == len(viable.trainable_variables)
    cavia = CAVIA(**kwargs)
    assert parts(cavia) == {"prediction": list(cavia.trainable_variables)}
