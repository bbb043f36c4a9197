"""Numbered checkpoints written by one graph call each.

`tf.train.CheckpointManager.save` runs eagerly: TensorFlow reads and serialises every
variable from Python, one at a time, ~17 ms for a sine trainer's 29 tensors, which
the training loop pays twice per validation (benchmarks/checkpoint_writes.py: about an
eighth of the sine main job's training time). Traced once into a `tf.function`, the
same `tf.train.Checkpoint.write` is one graph call (~3 ms) and writes the same
variables and object graph (in two data shards where the manager writes one; tested).
`CheckpointWriter` keeps the rest of the manager's contract: files
`<dir>/ckpt-<number>.{index,data-*}`, the newest `max_to_keep` kept, and the
`<dir>/checkpoint` record that `tf.train.latest_checkpoint` reads, rewritten atomically
after the files exist and before older ones are deleted, so a process killed at any
moment leaves a whole checkpoint as the latest.

With `background=` (an executor), a save takes a snapshot and returns: one graph call
copies every variable's value into a shadow variable (`Snapshot`), and the executor's
thread writes the shadows, which stand in the same object graph under the same names,
so the files are those the synchronous write makes of the same values (tested), while
training goes on. TensorFlow's own asynchronous checkpointing (`CheckpointOptions(
experimental_enable_async_checkpoint=True)`) copies objects through a private hook
that Keras 3 variables do not implement inside a graph function; this takes the copy
through public APIs only (`tf.train.TrackableView`).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from concurrent.futures import Executor, Future, ThreadPoolExecutor

import keras
import tensorflow as tf

from viable_tf.run_dir import RunDir


def _is_variable(obj) -> bool:
    return isinstance(obj, (tf.Variable, keras.Variable))


class Snapshot:
    """A copy of `checkpoint`'s object graph whose variables are shadows of its own.

    `take()` (one graph call) copies every variable's current value into its shadow;
    `mirror` is a `tf.train.Checkpoint` with the same children under the same names
    down to the variables, an object reached by two paths mirrored once, so that
    `mirror.write` writes the same keys, values and object graph as `checkpoint.write`
    did at the moment of `take()`. What cannot be mirrored is refused (ValueError
    naming it): a variable with children of its own, and an object that writes tensors
    other than variables (a dataset iterator's state), found by writing the checkpoint
    and the mirror once each to a temporary folder and comparing their keys (public APIs
    only: `write` and `tf.train.list_variables`).
    """

    def __init__(self, checkpoint: tf.train.Checkpoint) -> None:
        view = tf.train.TrackableView(checkpoint)
        self.pairs: list[tuple[tf.Variable, object]] = []  # (shadow, original)
        copies: dict[int, object] = {}

        def copy(obj, path: str):
            if id(obj) in copies:
                return copies[id(obj)]
            children = view.children(obj)
            if _is_variable(obj) and not children:
                # Under the original's name too: the object graph records it.
                name = obj.path if isinstance(obj, keras.Variable) else obj.name.split(":")[0]
                shadow = tf.Variable(tf.zeros(obj.shape, obj.dtype), trainable=False, name=name)
                self.pairs.append((shadow, obj))
                copies[id(obj)] = shadow
                return shadow
            if _is_variable(obj):
                raise ValueError(f"cannot snapshot {path} ({type(obj).__name__})")
            node = copies[id(obj)] = tf.Module()
            for name, child in children.items():
                setattr(node, name, copy(child, f"{path}/{name}"))
            return node

        children = view.children(checkpoint)
        counter = children.pop("save_counter", None)
        self.mirror = tf.train.Checkpoint(
            **{name: copy(child, name) for name, child in children.items()}
        )
        if counter is not None:  # the mirror's own counter, shadowing the original's
            self.pairs.append((self.mirror.save_counter, counter))
        self._refuse_what_is_not_mirrored(checkpoint)
        self.take = tf.function(self._copy, input_signature=[], autograph=False)

    def _refuse_what_is_not_mirrored(self, checkpoint: tf.train.Checkpoint) -> None:
        with tempfile.TemporaryDirectory(prefix="snapshot-keys-") as folder:
            original = checkpoint.write(os.path.join(folder, "original"))
            mirror = self.mirror.write(os.path.join(folder, "mirror"))
            written = {name for name, _ in tf.train.list_variables(original)}
            mirrored = {name for name, _ in tf.train.list_variables(mirror)}
        missing = sorted(written - mirrored)
        if missing:
            path = missing[0].split("/.ATTRIBUTES")[0]
            raise ValueError(f"cannot snapshot {path} (it writes tensors that are not variables)")

    def _copy(self) -> None:
        for shadow, original in self.pairs:
            shadow.assign(original.value if isinstance(original, keras.Variable) else original)


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


class CheckpointWriter:
    """Saves `checkpoint` under `directory` as `ckpt-<number>`, keeping `max_to_keep`;
    with `background` (an executor of one thread), from a snapshot on that thread."""

    def __init__(
        self,
        checkpoint: tf.train.Checkpoint,
        directory: str,
        *,
        max_to_keep: int,
        background: Executor | None = None,
        clock: WallClock | None = None,
    ):
        if max_to_keep < 1:
            raise ValueError(f"max_to_keep must be >= 1, got {max_to_keep}")
        self.checkpoint = checkpoint
        self.directory = directory
        self.max_to_keep = max_to_keep
        self.clock = clock  # its reading at each save is recorded beside the checkpoint
        # Written as the manager writes it (its value unused), so that checkpoints of
        # either kind restore into either with every object matched.
        checkpoint.save_counter  # noqa: B018  (the property creates the variable)
        self._background = background
        self._pending: Future | None = None
        self._snapshot = Snapshot(checkpoint) if background is not None else None
        written = self._snapshot.mirror if self._snapshot else checkpoint
        self._write = tf.function(
            lambda prefix: written.write(prefix),
            input_signature=[tf.TensorSpec([], tf.string)],
            autograph=False,
        )
        state = tf.train.get_checkpoint_state(directory)
        # Names relative to the directory, as the manager records them: a run's folder
        # can be moved or copied.
        self._kept = (
            [os.path.basename(p) for p in state.all_model_checkpoint_paths] if state else []
        )

    @property
    def latest_checkpoint(self) -> str | None:
        """The prefix of the newest checkpoint written (or found at start), or None;
        waits for a write in the background."""
        self.wait()
        return os.path.join(self.directory, self._kept[-1]) if self._kept else None

    def wait(self) -> None:
        """Waits for the write in the background, if any; raises what it raised."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def save(self, checkpoint_number: int) -> str:
        """Writes checkpoint `checkpoint_number` (in the background: takes the snapshot
        and returns while it is written); returns its prefix."""
        seconds = self.clock.total() if self.clock else None
        if self._snapshot is None:
            return self._write_and_rotate(checkpoint_number, seconds)
        self.wait()  # the shadows are free again
        self._snapshot.take()
        self._pending = self._background.submit(self._write_and_rotate, checkpoint_number, seconds)
        return os.path.join(self.directory, f"ckpt-{checkpoint_number}")

    def _write_and_rotate(self, checkpoint_number: int, seconds: float | None = None) -> str:
        os.makedirs(self.directory, exist_ok=True)
        if seconds is not None:  # before the record names the checkpoint
            WallClock.record(self.directory, checkpoint_number, seconds)
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
        return os.path.join(self.directory, self._kept[-1])

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
    into a temporary folder that `close` drops; everyone restores from the chief's.
    With `background`, both series are written from snapshots on one thread of their own
    (one device only: distributed variables are written as tf.distribute writes them)."""

    def __init__(
        self,
        run_dir: RunDir,
        state: tf.train.Checkpoint,
        best: tf.train.Checkpoint,
        *,
        chief: bool,
        keep: int,
        background: bool = False,
    ) -> None:
        self.run_dir = run_dir
        write_dir = run_dir.path if chief else tempfile.mkdtemp(prefix="viable-worker-")
        self._scratch = None if chief else write_dir
        writes = RunDir(write_dir)
        # One thread for both series: writes land in the order they were asked for.
        thread = ThreadPoolExecutor(1, "viable-checkpoints") if background else None
        self.clock = WallClock()  # the run's training wall-clock, across resumptions
        self.latest = CheckpointWriter(
            state, writes.checkpoints, max_to_keep=keep, background=thread, clock=self.clock
        )
        self.best = CheckpointWriter(best, writes.best, max_to_keep=1, background=thread)

    def wait(self) -> None:
        """Waits for the writes in the background; raises what they raised."""
        self.best.wait()
        self.latest.wait()

    def restore(self) -> bool:
        """Restores the chief's latest training state, if there is one."""
        self.wait()
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
        self.wait()
        path = self.run_dir.best_checkpoint()
        if path is None:
            raise FileNotFoundError(
                f"no checkpoint in {self.run_dir.path}: expected {self.run_dir.best} or "
                f"{self.run_dir.checkpoints}, as written by viable-train"
            )
        tf.train.Checkpoint(learner=learner).read(path).expect_partial()
        return int(path.rsplit("-", 1)[-1])

    def close(self) -> None:
        """Waits for the writes; drops a non-chief worker's temporary folder."""
        self.wait()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
