"""N-way K-shot classification episodes over an embedding dataset (docs/method.md §5).

An episode draws N classes, relabels them 0..N-1 in random order, and draws K
support and V query examples per class without replacement. Sampling is
stateless and in the graph, like the sine tasks: an episode is a pure function of
its seed, so evaluation episodes are fixed by a seed and `dataset()` can batch B
episodes per meta-update through tf.data. One sampler covers one split; splits are
class-disjoint by construction when built from disjoint class lists.

With `label_noise` ('swap' or 'outlier', tasks/corruption.py), `noisy_shots` = m of each
class's K shots hold a drawing of another class of the episode or of a class outside it,
under their class's label; the queries stay clean.

Shape legend: N way, K shot, V queries per class, E embedding size, B episodes, m noisy
shots per class.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from viable_tf import ops
from viable_tf.ops import seed_for
from viable_tf.tasks import corruption
from viable_tf.tasks.base import TaskBatch, TaskFamily


class RowFiles:
    """Rows [n, E] of float32 kept on disk, one file each (`<directory>/<row>.f32`, the
    row's E numbers as raw little-endian float32), read in the graph where an episode
    needs them: a dataset whose rows do not fit in memory (tasks/images.py writes it).

    `RowFiles.write(directory, n, E)` opens one to fill in row order (`append`); reading
    uses standard ops (ReadFile, DecodeRaw), which XLA does not compile: the image
    configs run uncompiled."""

    def __init__(self, directory: str, count: int, dim: int) -> None:
        self.directory, self.shape = directory, (count, dim)

    def __len__(self) -> int:
        return self.shape[0]

    @classmethod
    def write(cls, directory: str, count: int, dim: int) -> RowFiles:
        import os

        os.makedirs(directory, exist_ok=True)
        rows = cls(directory, count, dim)
        rows.filled = 0
        return rows

    def append(self, rows: np.ndarray) -> None:
        """Writes `rows` [m, E] after the rows written so far."""
        for row in np.asarray(rows, "<f4"):
            with open(self._path(self.filled), "wb") as f:
                f.write(row.tobytes())
            self.filled += 1

    def _path(self, row: int) -> str:
        return f"{self.directory}/{row:09d}.f32"

    def gather(self, rows: tf.Tensor) -> tf.Tensor:
        """rows int32 [...] -> their numbers [..., E], read from their files."""
        flat = tf.reshape(rows, [-1])
        names = tf.strings.join(
            [self.directory + "/", tf.strings.as_string(flat, width=9, fill="0"), ".f32"]
        )
        data = tf.map_fn(tf.io.read_file, names, fn_output_signature=tf.string)
        values = tf.io.decode_raw(data, tf.float32, little_endian=True)  # [R, E]
        return tf.reshape(values, tf.concat([tf.shape(rows), [self.shape[1]]], 0))


class EpisodeSampler:
    """Episodes from `embeddings` [n, E] whose class of each row is `labels` [n]: an array
    held in memory, or `RowFiles` on disk (the same episodes from the same seed)."""

    def __init__(
        self,
        embeddings: np.ndarray | RowFiles,
        labels: np.ndarray,
        *,
        num_ways: int,
        num_shots: int,
        num_queries: int,
        label_noise: str = "none",
        noisy_shots: int = 0,
    ) -> None:
        on_disk = isinstance(embeddings, RowFiles)
        if not on_disk:
            embeddings = np.asarray(embeddings, np.float32)
        labels = np.asarray(labels)
        if len(embeddings.shape) != 2 or labels.shape != (len(embeddings),):
            raise ValueError(
                f"expected embeddings [n, E] and labels [n], got {list(embeddings.shape)} "
                f"and {list(labels.shape)}"
            )
        for name, value in (("num_ways", num_ways), ("num_queries", num_queries)):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        classes, class_index = np.unique(labels, return_inverse=True)
        if len(classes) < num_ways:
            raise ValueError(
                f"{num_ways}-way episodes need {num_ways} classes, found {len(classes)}"
            )
        counts = np.bincount(class_index)
        self._fewest = (classes[counts.argmin()], int(counts.min()))  # (class, examples)
        self.num_queries = num_queries
        self.num_ways, self.label_noise, self.noisy_shots = num_ways, label_noise, noisy_shots
        self._num_classes = len(classes)
        self._check_shots(num_shots)
        # [C, M]: row c lists the examples of class c, padded with -1.
        members = np.full((len(classes), counts.max()), -1, np.int32)
        for c in range(len(classes)):
            rows = np.flatnonzero(class_index == c)
            members[c, : len(rows)] = rows
        self.classes = classes
        self.num_shots = num_shots
        self.input_dim = embeddings.shape[1]  # E
        self.output_dim = num_ways  # N logits
        self._rows = embeddings if on_disk else None
        self._embeddings = None if on_disk else tf.constant(embeddings)
        self._members = tf.constant(members)
        self._counts = tf.constant(counts.astype(np.int32))

    def with_shots(self, num_shots: int) -> EpisodeSampler:
        """The same classes and examples, K = `num_shots` (e.g. testing at 1..9 shots)."""
        self._check_shots(num_shots)
        other = object.__new__(EpisodeSampler)
        other.__dict__.update(self.__dict__)
        other.num_shots = num_shots
        return other

    def _check_shots(self, num_shots: int) -> None:
        """Every class must hold K support and V query examples."""
        if num_shots < 0:
            raise ValueError(f"num_shots must be >= 0, got {num_shots}")
        short, count = self._fewest
        needed = num_shots + self.num_queries
        if count < needed:
            raise ValueError(
                f"class {str(short)!r} has {count} examples; {num_shots}-shot episodes with "
                f"{self.num_queries} queries per class need {needed}"
            )
        corruption.check_label_noise(
            self.label_noise,
            self.noisy_shots,
            num_shots=num_shots,
            num_ways=self.num_ways,
            spare_drawings=count - needed,
            fewest_drawings=count,
            num_classes=self._num_classes,
        )

    def sample_batch(self, seed: tf.Tensor, batch_size: int) -> TaskBatch:
        """B episodes as a pure function of `seed` [2], with a leading axis B.

        Returns support_x [B, N*K, E], support_y int32 [B, N*K], query_x [B, N*V, E],
        query_y int32 [B, N*V]; the mask is all True (every episode has N*K points).
        """
        n, k, v = self.num_ways, self.num_shots, self.num_queries
        m = self.noisy_shots if self.label_noise != "none" else 0
        spare = m if self.label_noise == "swap" else 0  # drawings each class gives away
        b = batch_size
        class_seed, example_seed = tf.unstack(ops.split_seed(seed, 2))
        # A random permutation of the classes per episode; label i is chosen[:, i], so
        # classes are relabelled in random order.
        order = tf.argsort(ops.uniform([b, len(self.classes)], class_seed), stable=True)
        chosen = order[:, :n]  # [B, N]
        members = tf.gather(self._members, chosen)  # [B, N, M], padded with -1
        scores = ops.uniform(tf.shape(members), example_seed)  # [B, N, M]
        valid = tf.range(tf.shape(members)[2]) < tf.gather(self._counts, chosen)[..., None]
        scores = tf.where(valid, scores, 2.0)  # padding sorts last
        picks = tf.argsort(scores, axis=2, stable=True)[..., : k + v + spare]
        rows = tf.gather(members, picks, batch_dims=2)  # [B, N, K + V (+ m)]
        if m:
            rows = self._noisy_rows(example_seed, order, rows, k=k, v=v, m=m)  # [B, N, K + V]
        x = (
            self._rows.gather(rows) if self._rows is not None else tf.gather(self._embeddings, rows)
        )  # [B, N, K + V, E]
        y = tf.broadcast_to(tf.range(n, dtype=tf.int32)[:, None], [b, n, k + v])
        return TaskBatch(
            support_x=tf.reshape(x[:, :, :k], [b, n * k, self.input_dim]),
            support_y=tf.reshape(y[:, :, :k], [b, n * k]),
            support_mask=tf.ones([b, n * k], tf.bool),
            query_x=tf.reshape(x[:, :, k:], [b, n * v, self.input_dim]),
            query_y=tf.reshape(y[:, :, k:], [b, n * v]),
        )

    def _noisy_rows(self, seed, order, rows, *, k: int, v: int, m: int) -> tf.Tensor:
        """rows [B, N, K + V (+ m spare)] -> [B, N, K + V] whose first m shots of each
        class hold drawings of the classes `corruption.noisy_sources` names."""
        n, b = self.num_ways, tf.shape(order)[0]
        position_seed, member_seed = tf.unstack(ops.split_seed(seed, 2))
        if self.label_noise == "swap":
            # Shot j of class i: the j-th spare drawing of the episode's class at
            # `position` (each class gives one per j).
            position = corruption.swap_positions(
                position_seed, b, num_ways=n, noisy_shots=m
            )  # [B, N, m]
            by_shot = tf.transpose(rows[:, :, k + v :], [0, 2, 1])  # [B, m, N] spare drawings
            noisy = tf.gather(by_shot, tf.transpose(position, [0, 2, 1]), batch_dims=2)
            return tf.concat([tf.transpose(noisy, [0, 2, 1]), rows[:, :, m : k + v]], axis=2)
        # outlier: a drawing of a class outside the episode, the class's next in a random
        # order of its drawings each time it is taken again.
        position, repeat = corruption.outside_positions(
            position_seed, b, tf.shape(order)[1], num_ways=n, noisy_shots=m
        )  # [B, N*m] positions in `order`, [N*m]
        # A random order of every class's drawings, per episode: [B, C, M].
        members = tf.gather(self._members, order)  # [B, C, M], padded with -1
        valid = tf.range(tf.shape(members)[2]) < tf.gather(self._counts, order)[..., None]
        scores = tf.where(valid, ops.uniform(tf.shape(members), member_seed), 2.0)
        ranked = tf.argsort(scores, axis=2, stable=True)  # [B, C, M]
        nth = tf.broadcast_to(repeat[None, :], [b, n * m])  # [B, N*m]
        slot = tf.stack([position, nth], axis=-1)  # [B, N*m, 2]
        pick = tf.gather_nd(ranked, slot, batch_dims=1)  # [B, N*m]
        picked = tf.stack([position, pick], axis=-1)
        noisy = tf.reshape(tf.gather_nd(members, picked, batch_dims=1), [b, n, m])  # [B, N, m]
        return tf.concat([noisy, rows[:, :, m : k + v]], axis=2)  # [B, N, K + V]

    def sample(self, seed: tf.Tensor) -> TaskBatch:
        """One episode as a pure function of `seed` [2]: x [N*K, E], labels int32 [N*K]."""
        return TaskBatch(*(t[0] for t in self.sample_batch(seed, 1)))

    def dataset(self, batch_size: int, seed: int, *, num_episodes: int | None = None):
        """tf.data of TaskBatch with a leading axis B; episode i comes from seed (seed, i).

        Without `num_episodes` the stream is endless (training); with it, the same
        `num_episodes` episodes every time (evaluation).
        """
        indices = (
            tf.data.Dataset.range(num_episodes) if num_episodes else tf.data.Dataset.range(2**62)
        )
        return (
            indices.map(
                lambda i: self.sample(seed_for(seed, i)),
                num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=True,
            )
            .batch(batch_size)
            .prefetch(tf.data.AUTOTUNE)
        )


class EpisodeFamily(TaskFamily):
    """A task family of N-way K-shot episodes over three class-disjoint samplers:
    `train` (what the trainer samples), `validation` and `test` (the evaluation
    protocols' episodes, registered once for every such family in evaluation/)."""

    train: EpisodeSampler
    validation: EpisodeSampler
    test: EpisodeSampler

    def sample(self, seed: tf.Tensor, batch_size: int) -> TaskBatch:
        """B training episodes from `seed` [2] (the trainer's interface)."""
        return self.train.sample_batch(seed, batch_size)
