"""Draws TensorBoard figures in a child process, off the training loop.

Drawing a figure with matplotlib holds the GIL for ~0.2 s: on the training thread it
stalls training, on a worker thread it stalls it more (docs/PERFORMANCE.md). A child
process (`python -m viable_tf.figure_worker`, which imports numpy and matplotlib,
never TensorFlow) draws while training goes on. Requests and answers are pickled
frames on its stdin and stdout: (key, a pickled zero-argument `draw`) in, (key, PNG
bytes or the error's text) out. `draw` must be importable by the child (e.g. a
`functools.partial` of a module-level function of a module without TensorFlow).
The child runs at the lowest scheduling priority (nice 19).
"""

from __future__ import annotations

import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
from typing import Any

_LENGTH = struct.Struct("<Q")


def _write_frame(stream, value: Any) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_LENGTH.pack(len(data)) + data)
    stream.flush()


def _read_frame(stream) -> Any:
    header = stream.read(_LENGTH.size)
    if len(header) < _LENGTH.size:
        raise EOFError
    (length,) = _LENGTH.unpack(header)
    # Only frames this module's own parent or child wrote, over a private pipe.
    return pickle.loads(stream.read(length))


class FigureWorker:
    """A child process that draws; `submit` returns at once, `done` and `wait` collect
    (key, PNG bytes) in submission order. Close it (or use it as a context manager)."""

    def __init__(self) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-m", "viable_tf.figure_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self._answers: queue.Queue = queue.Queue()
        self._pending = 0
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            while True:
                self._answers.put(_read_frame(self._process.stdout))
        except (EOFError, OSError, ValueError):
            self._answers.put(None)  # the child is gone

    def submit(self, key: Any, draw) -> None:
        """Asks the child to call `draw()` -> PNG bytes, answered as `key`. `draw` is
        pickled here and unpickled by the child, which must be able to import it."""
        _write_frame(self._process.stdin, (key, pickle.dumps(draw)))
        self._pending += 1

    def _collect(self, block: bool) -> list[tuple[Any, bytes]]:
        done = []
        while self._pending:
            try:
                answer = self._answers.get(block=block)
            except queue.Empty:
                break
            if answer is None:
                raise RuntimeError("the figure worker process stopped unexpectedly")
            self._pending -= 1
            key, png, error = answer
            if error is not None:
                raise RuntimeError(f"drawing figure {key!r} failed in the worker: {error}")
            done.append((key, png))
        return done

    def done(self) -> list[tuple[Any, bytes]]:
        """The figures drawn so far and not yet collected."""
        return self._collect(block=False)

    def wait(self) -> list[tuple[Any, bytes]]:
        """Every figure still owed, waiting for them."""
        return self._collect(block=True)

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.stdin.close()
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process.stdout.close()

    def __enter__(self) -> FigureWorker:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _serve() -> None:
    requests, answers = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            key, draw = _read_frame(requests)
        except EOFError:
            return
        try:
            _write_frame(answers, (key, pickle.loads(draw)(), None))
        except Exception as error:  # reported to the parent, which raises it
            _write_frame(answers, (key, None, f"{type(error).__name__}: {error}"))


if __name__ == "__main__":
    # The lowest priority: the child draws in the training's idle moments instead of
    # taking a core from its compiled updates (which use every core).
    os.nice(19)
    _serve()
    # Every answer is written and flushed: skip the interpreter's teardown (~0.2 s with
    # matplotlib loaded), which the trainer would wait for at the end of training.
    os._exit(0)
