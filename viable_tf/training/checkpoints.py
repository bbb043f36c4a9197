"""Numbered checkpoints written by one graph call each.

`tf.train.CheckpointManager.save` runs eagerly: TensorFlow reads and serialises every
variable from Python, one at a time, ~17 ms for a sine trainer's 29 tensors, which
the training loop pays twice per validation. Traced once into a `tf.function`, the
same `tf.train.Checkpoint.write` is one graph call (~3 ms) and writes the same
variables and object graph (in two data shards where the manager writes one; tested).
`CheckpointWriter` keeps the rest of the manager's contract: files
`<dir>/ckpt-<number>.{index,data-*}`, the newest `max_to_keep` kept, and the
`<dir>/checkpoint` record that `tf.train.latest_checkpoint` reads, rewritten atomically
after the files exist and before older ones are deleted, so a process killed at any
moment leaves a whole checkpoint as the latest.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile

import tensorflow as tf

from viable_tf.run_dir import RunDir


class CheckpointWriter:
    """Saves `checkpoint` under `directory` as `ckpt-<number>`, keeping `max_to_keep`."""

    def __init__(self, checkpoint: tf.train.Checkpoint, directory: str, *, max_to_keep: int):
        if max_to_keep < 1:
            raise ValueError(f"max_to_keep must be >= 1, got {max_to_keep}")
        self.checkpoint = checkpoint
        self.directory = directory
        self.max_to_keep = max_to_keep
        # Written as the manager writes it (its value unused), so that checkpoints of
        # either kind restore into either with every object matched.
        checkpoint.save_counter  # noqa: B018  (the property creates the variable)
        self._write = tf.function(
            lambda prefix: checkpoint.write(prefix),
            input_signature=[tf.TensorSpec([], tf.string)],
        )
        state = tf.train.get_checkpoint_state(directory)
        # Names relative to the directory, as the manager records them: a run's folder
        # can be moved or copied.
        self._kept = (
            [os.path.basename(p) for p in state.all_model_checkpoint_paths] if state else []
        )

    @property
    def latest_checkpoint(self) -> str | None:
        """The prefix of the newest checkpoint written (or found at start), or None."""
        return os.path.join(self.directory, self._kept[-1]) if self._kept else None

    def save(self, checkpoint_number: int) -> str:
        """Writes checkpoint `checkpoint_number`; returns its prefix."""
        os.makedirs(self.directory, exist_ok=True)
        name = f"ckpt-{checkpoint_number}"
        self._write(tf.constant(os.path.join(self.directory, name)))
        if name in self._kept:  # rewritten: it is the newest now
            self._kept.remove(name)
        self._kept.append(name)
        dropped, self._kept = self._kept[: -self.max_to_keep], self._kept[-self.max_to_keep :]
        self._record()
        if dropped:  # one listing, not two globs per checkpoint (~4 ms on a local disk)
            names = tf.io.gfile.listdir(self.directory)
            for old in dropped:
                for name in names:
                    if name == f"{old}.index" or name.startswith(f"{old}.data-"):
                        tf.io.gfile.remove(os.path.join(self.directory, name))
        return self.latest_checkpoint

    def _record(self) -> None:
        """Rewrites `<dir>/checkpoint` (a CheckpointState text proto) atomically."""
        lines = [f"model_checkpoint_path: {json.dumps(self._kept[-1])}"]
        lines += [f"all_model_checkpoint_paths: {json.dumps(name)}" for name in self._kept]
        path = os.path.join(self.directory, "checkpoint")
        with tf.io.gfile.GFile(path + ".tmp", "w") as f:
            f.write("\n".join(lines) + "\n")
        tf.io.gfile.rename(path + ".tmp", path, overwrite=True)


class TrainingCheckpoints:
    """A run's two checkpoint series, as viable-train writes them (run_dir.RunDir): the
    latest training state in D/checkpoints/ (`keep` kept) and the best weights in D/best/
    (one kept). Non-chief workers save too (tf.distribute needs every worker to), but
    into a temporary folder that `close` drops; everyone restores from the chief's."""

    def __init__(
        self,
        run_dir: RunDir,
        state: tf.train.Checkpoint,
        best: tf.train.Checkpoint,
        *,
        chief: bool,
        keep: int,
    ) -> None:
        self.run_dir = run_dir
        write_dir = run_dir.path if chief else tempfile.mkdtemp(prefix="viable-worker-")
        self._scratch = None if chief else write_dir
        writes = RunDir(write_dir)
        self.latest = CheckpointWriter(state, writes.checkpoints, max_to_keep=keep)
        self.best = CheckpointWriter(best, writes.best, max_to_keep=1)

    def restore(self) -> bool:
        """Restores the chief's latest training state, if there is one."""
        latest = tf.train.latest_checkpoint(self.run_dir.checkpoints)
        if latest:
            self.latest.checkpoint.restore(latest).assert_consumed()
        return bool(latest)

    def restore_best(self, learner) -> int:
        """Loads the best weights into `learner` (falling back to the latest state's);
        returns their step."""
        path = self.run_dir.best_checkpoint()
        if path is None:
            raise FileNotFoundError(
                f"no checkpoint in {self.run_dir.path}: expected {self.run_dir.best} or "
                f"{self.run_dir.checkpoints}, as written by viable-train"
            )
        tf.train.Checkpoint(learner=learner).read(path).expect_partial()
        return int(path.rsplit("-", 1)[-1])

    def close(self) -> None:
        """Drops a non-chief worker's temporary folder."""
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
