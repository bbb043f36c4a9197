"""Everything the trainer writes to TensorBoard: the training and validation scalars (each
a chunk's points in one graph call), the operative config, the HParams session, and the
figures (computed on the training thread, drawn by a worker process, written when drawn).
"""

from __future__ import annotations

import contextlib
import functools
import os

import gin
import tensorflow as tf

from viable_tf.figure_worker import FigureWorker
from viable_tf.run_dir import RunDir


def summary_points(start, loss_sums, inner_sums, counts, rates, updates_per_second) -> None:
    """A chunk's points of the training summaries from its per-segment sums [S] (see
    `Trainer.run_meta_updates`), traced into one graph call: a call per point cost
    ~1 ms from Python."""
    ends = start + tf.cumsum(tf.cast(counts, tf.int64))
    for i in tf.range(tf.size(counts)):
        if counts[i] > 0:  # a point every summary_every updates, and at the end
            with tf.name_scope("train/"):  # absolute: keeps the loop's scope out of the tags
                tf.summary.scalar("meta_loss", loss_sums[i] / counts[i], step=ends[i])
                tf.summary.scalar("inner_loss_pre", inner_sums[i] / counts[i], step=ends[i])
                tf.summary.scalar("learning_rate", rates[i], step=ends[i])
                tf.summary.scalar("meta_updates_per_second", updates_per_second, step=ends[i])


def validation_point(step, value, inner_loss_pre, inner_loss_post, *, metric: str) -> None:
    """A validation's summaries (one graph call, as `summary_points`)."""
    tf.summary.scalar(f"validation/{metric}", value, step=step)
    tf.summary.scalar("validation/inner_loss_pre", inner_loss_pre, step=step)
    tf.summary.scalar("validation/inner_loss_post", inner_loss_post, step=step)


class TrainingSummaries:
    """A trainer's summary writer and its two graph calls (`points`: a chunk's training
    scalars; `validation`: a validation's), which hold the writer they were traced with,
    hence one writer per trainer. Only the chief writes; other workers get a no-op one."""

    def __init__(self, model_dir: str, *, chief: bool, metric: str) -> None:
        self.model_dir = model_dir
        self.chief = chief
        self._writer = None
        segments = tf.TensorSpec([None], tf.float32)
        # The one graph function AutoGraph converts: summary_points loops in Python.
        self.points = tf.function(
            summary_points,
            input_signature=[tf.TensorSpec([], tf.int64)] + [segments] * 4 + [tf.TensorSpec([])],
        )
        self.validation = tf.function(
            functools.partial(validation_point, metric=metric),
            input_signature=[tf.TensorSpec([], tf.int64)] + [tf.TensorSpec([])] * 3,
            autograph=False,
        )

    def writer(self):
        if self._writer is None:
            if self.chief:
                # Flushed at each validation (Trainer.train), not every 10 summaries: a
                # flush is a file write on the training thread.
                self._writer = tf.summary.create_file_writer(self.model_dir, max_queue=10_000)
            else:
                self._writer = tf.summary.create_noop_writer()
        return self._writer


class FigureWriter:
    """Figures drawn by a worker process (started at the first figure, within `stack`)
    while training goes on, and written when drawn: drawing on the training thread would
    hold the GIL for ~0.2 s a figure."""

    def __init__(self, stack: contextlib.ExitStack) -> None:
        self._stack = stack
        self._worker: FigureWorker | None = None

    def submit(self, step: int, figures: dict | None) -> None:
        """{name: draw} (see evaluation.protocols.figures), drawn in the worker."""
        if figures and self._worker is None:
            self._worker = self._stack.enter_context(FigureWorker())
        for name, draw in (figures or {}).items():
            self._worker.submit((name, step), draw)

    def write(self, *, wait: bool) -> None:
        """Writes the figures the worker has drawn (all of them, waiting, if `wait`)."""
        if self._worker is not None:
            for (name, step), png in self._worker.wait() if wait else self._worker.done():
                tf.summary.image(name, png_to_image(png), step=step)


def write_operative_config(run: RunDir) -> str:
    """Writes gin's operative config (every binding used so far) to the run's file; the
    one place that writes it."""
    config = gin.operative_config_str()
    os.makedirs(run.path, exist_ok=True)
    with open(run.operative_config, "w") as f:
        f.write(config)
    return config


def operative_config(model_dir: str, step: int) -> str:
    """Writes the operative config (`write_operative_config`) and shows it in TensorBoard."""
    config = write_operative_config(RunDir(model_dir))
    # Markdown: indent by four spaces so TensorBoard shows it as a code block.
    tf.summary.text("operative_config", "    " + config.replace("\n", "\n    "), step=step)
    return config


def hparams_session(model_dir: str, hparams: dict, metrics: dict[str, float], step: int) -> None:
    """Logs a run's hyper-parameters and final metrics with TensorBoard's HParams plugin,
    so that `tensorboard --logdir` over many runs shows them as one sortable table."""
    from tensorboard.plugins.hparams import api as hp

    writer = tf.summary.create_file_writer(model_dir)
    with writer.as_default():
        hp.hparams(hparams, trial_id=os.path.basename(os.path.normpath(model_dir)))
        for tag, value in metrics.items():
            tf.summary.scalar(tag, value, step=step)
    writer.close()


def png_to_image(png: bytes) -> tf.Tensor:
    """PNG bytes as the uint8 image [1, H, W, 4] that tf.summary.image takes."""
    return tf.image.decode_png(png, channels=4)[None]
