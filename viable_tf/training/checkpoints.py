"""A run's checkpoints: numbered series written by TensorFlow's `tf.train.CheckpointManager`
(`<dir>/ckpt-<number>.{index,data-*}`, the newest `max_to_keep` kept, the `<dir>/checkpoint`
record that `tf.train.latest_checkpoint` reads), with the run's training wall-clock
recorded beside each checkpoint so that a resumed run goes on counting.

The manager writes eagerly, about 14 ms for a sine trainer's tensors: 3.8% of the sine
main job's training time at two saves per validation, 0.05% of the image path's
(benchmarks/checkpoint_writes.py), under the 10% that would justify a writer of the
project's own.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time

import tensorflow as tf

from viable_tf.run_dir import RunDir


class WallClock:
    """A run's training wall-clock across the processes that resumed it: the seconds
    recorded with the checkpoint it resumed from, plus this process's."""

    #: Beside the checkpoints: {"<checkpoint number>": seconds of the run up to it}.
    FILE = "wall_clock.json"

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.before = 0.0

    def total(self) -> float:
        return self.before + time.monotonic() - self.start

    @classmethod
    def read(cls, directory: str) -> dict[str, float]:
        try:
            with open(os.path.join(directory, cls.FILE)) as f:
                return json.load(f)
        except (FileNotFoundError, json.JSONDecodeError):
            return {}

    def resume(self, directory: str, checkpoint_number: int) -> None:
        """Continues the clock of checkpoint `checkpoint_number` (0 s if not recorded)."""
        self.before = float(self.read(directory).get(str(checkpoint_number), 0.0))

    @classmethod
    def record(cls, directory: str, checkpoint_number: int, seconds: float) -> None:
        table = cls.read(directory)
        table[str(checkpoint_number)] = round(seconds, 1)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".wall_clock")
        with os.fdopen(fd, "w") as f:
            json.dump(table, f)
        os.replace(tmp, os.path.join(directory, cls.FILE))


class CheckpointSeries:
    """One series of numbered checkpoints of `checkpoint` under `directory`, by
    `tf.train.CheckpointManager`; with `clock`, its reading at each save recorded
    beside the checkpoint (WallClock)."""

    def __init__(
        self,
        checkpoint: tf.train.Checkpoint,
        directory: str,
        *,
        max_to_keep: int,
        clock: WallClock | None = None,
    ) -> None:
        if max_to_keep < 1:
            raise ValueError(f"max_to_keep must be >= 1, got {max_to_keep}")
        self.checkpoint = checkpoint
        self.directory = directory
        self.clock = clock
        self.manager = tf.train.CheckpointManager(checkpoint, directory, max_to_keep=max_to_keep)

    @property
    def latest_checkpoint(self) -> str | None:
        """The prefix of the newest checkpoint written (or found at start), or None."""
        return self.manager.latest_checkpoint

    def save(self, checkpoint_number: int) -> str:
        """Writes checkpoint `checkpoint_number`; returns its prefix."""
        os.makedirs(self.directory, exist_ok=True)
        if self.clock is not None:  # before the record names the checkpoint
            WallClock.record(self.directory, checkpoint_number, self.clock.total())
        return self.manager.save(checkpoint_number=checkpoint_number)


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
        self.clock = WallClock()  # the run's training wall-clock, across resumptions
        self.latest = CheckpointSeries(
            state, writes.checkpoints, max_to_keep=keep, clock=self.clock
        )
        self.best = CheckpointSeries(best, writes.best, max_to_keep=1)

    def restore(self) -> bool:
        """Restores the chief's latest training state, if there is one."""
        state = tf.train.get_checkpoint_state(self.run_dir.checkpoints)
        if state is None:
            return False
        latest = state.model_checkpoint_path  # made absolute by the reader
        if not tf.io.gfile.exists(latest + ".index"):
            # tf.train.latest_checkpoint would log an error and answer None: the run would
            # start over from step 0 and overwrite the folder it was asked to resume.
            raise FileNotFoundError(
                f"{self.run_dir.checkpoints}/checkpoint names {os.path.basename(latest)!r}, "
                "whose files are missing; expected the folder as viable-train left it "
                "(restore the checkpoint's files, or point the record at one that exists)"
            )
        self.latest.checkpoint.restore(latest).assert_consumed()
        self.clock.resume(self.run_dir.checkpoints, int(latest.rsplit("-", 1)[-1]))
        return True

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
