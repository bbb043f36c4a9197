"""Few-shot classification tasks over an embedding dataset's splits (docs/method.md §5-6).

`FewShotEpisodes` is what the trainer samples from: N-way K-shot episodes over the
meta-training classes (`train_splits`), drawn in the graph from a seed exactly as
sine tasks are, so a resumed run sees the same episodes. Validation and test
episodes come from other splits, whose classes are disjoint from the training
classes (checked), through seeded `tf.data` pipelines (see evaluation/).

The embeddings are read through the tensorflow-datasets builder over LEO's layout
(datasets/leo_tfds.py): `data_dir` is the manual directory holding
`<dataset>/<view>/<split>_embeddings.pkl`; the generated TFDS files go to
`tfds_dir` (default: `data_dir/tfds`).

Shape legend: B episodes, N way, K shot, V queries per class, E embedding size.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import gin
import numpy as np

from viable_tf.tasks.episodes import EpisodeFamily, EpisodeSampler


@gin.configurable
class FewShotEpisodes(EpisodeFamily):
    """N-way K-shot episodes: training stream, validation and test samplers.

    Args:
      data_dir: the manual directory of LEO's layout.
      config: the TFDS builder config, e.g. "mini_imagenet_center", "omniglot_center".
      num_ways, num_shots, num_queries: N, K and V per class.
      train_splits: the splits whose classes are meta-trained on (docs/method.md §5: train + val
        for Mini-ImageNet).
      validation_split, test_split: the splits for early stopping and the test.
      tfds_dir: where the TFDS files are generated (default: data_dir/tfds).
      label_noise, noisy_shots: 'swap' or 'outlier' label noise in `noisy_shots` shots of
        every class, in every split's episodes (tasks/corruption.py); queries stay clean.
    """

    def __init__(
        self,
        *,
        data_dir: str = gin.REQUIRED,
        config: str = "mini_imagenet_center",
        num_ways: int = 5,
        num_shots: int = 1,
        num_queries: int = 15,
        train_splits: Sequence[str] = ("train", "val"),
        validation_split: str = "val",
        test_split: str = "test",
        tfds_dir: str | None = None,
        label_noise: str = "none",
        noisy_shots: int = 0,
    ) -> None:
        from viable_tf.datasets.leo_tfds import SPLITS, load_split, prepare

        for split in (*train_splits, validation_split, test_split):
            if split not in SPLITS:
                raise ValueError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
        if test_split in train_splits:
            raise ValueError(f"test split {test_split!r} must not be meta-trained on")
        builder = prepare(
            config, manual_dir=data_dir, data_dir=tfds_dir or os.path.join(data_dir, "tfds")
        )
        splits = {s: load_split(builder, s) for s in {*train_splits, validation_split, test_split}}
        check_class_disjoint(splits)
        settings = {
            "num_ways": num_ways,
            "num_shots": num_shots,
            "num_queries": num_queries,
            "label_noise": label_noise,
            "noisy_shots": noisy_shots,
        }
        train = [splits[s] for s in train_splits]
        self.train = EpisodeSampler(
            np.concatenate([e for e, _ in train]), np.concatenate([c for _, c in train]), **settings
        )
        self.validation = EpisodeSampler(*splits[validation_split], **settings)
        self.test = EpisodeSampler(*splits[test_split], **settings)
        self.num_ways, self.num_shots, self.num_queries = num_ways, num_shots, num_queries
        self.label_noise, self.noisy_shots = label_noise, noisy_shots
        self.input_dim = self.train.input_dim  # E
        self.output_dim = num_ways  # N logits
        self.task_loss = "cross_entropy"

    def hparams(self) -> dict[str, int | str]:
        """N, K and V of the episodes and their label noise, for results and HParams."""
        return {
            "num_ways": self.num_ways,
            "num_shots": self.num_shots,
            "num_queries": self.num_queries,
            "label_noise": self.label_noise,
            "noisy_shots": self.noisy_shots,
        }

    def warmup_inputs(
        self, rng: np.random.Generator, *, num_support: int, num_query: int
    ) -> dict[str, np.ndarray]:
        def embeddings(count):  # l2-normalised, as the episodes' features are
            x = rng.normal(size=(1, count, self.input_dim)).astype(np.float32)
            return x / np.linalg.norm(x, axis=-1, keepdims=True)

        labels = (np.arange(num_support) % self.num_ways).astype(np.int32)[None]
        return {
            "support_x": embeddings(num_support),
            "support_y": labels,
            "query_x": embeddings(num_query),
        }


def check_class_disjoint(splits: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
    """Raises ValueError if two splits share a class."""
    names = sorted(splits)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            shared = set(splits[a][1]) & set(splits[b][1])
            if shared:
                raise ValueError(
                    f"splits {a} and {b} share {len(shared)} classes (e.g. {sorted(shared)[0]}); "
                    "few-shot splits must be class-disjoint"
                )
