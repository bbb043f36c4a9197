"""TensorBoard summaries that are more than a scalar: the config and figures."""

from __future__ import annotations

import io
import os
from collections.abc import Callable

import gin
import numpy as np
import tensorflow as tf
from matplotlib.figure import Figure

from viable_tf.ops import seed_for
from viable_tf.run_dir import RunDir
from viable_tf.tasks.sine import SineTasks, sine_curve

FIGURE_SEED = 20190303


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


def figure_to_image(figure: Figure) -> tf.Tensor:
    """A matplotlib figure as a uint8 image [1, H, W, 4]."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=80)
    return tf.image.decode_png(buffer.getvalue(), channels=4)[None]


def adapted_fits(
    learner, tasks: SineTasks, *, num_tasks: int = 4, num_support: int = 10
) -> Callable[[], dict[str, tf.Tensor]]:
    """For a few fixed tasks, the true curve, support points and the fits before and
    after adaptation: the fits are computed now, and the returned function draws them
    ({"adapted_fits": image}) without pyplot's global state."""
    grid = tasks.evaluation_grid(200)
    batch, params = tasks.sample_tasks(
        seed_for(FIGURE_SEED, num_support), num_tasks, num_support=num_support, query_x=grid
    )
    unadapted = learner.predict(learner.initial_state(num_tasks), batch.query_x).numpy()
    adapted = learner.predict(
        learner.adapt(batch.support_x, batch.support_y, batch.support_mask), batch.query_x
    ).numpy()
    truth = sine_curve(params, batch.query_x).numpy()
    x = grid.numpy()
    support_x, support_y = batch.support_x.numpy(), batch.support_y.numpy()
    title = f"{learner.method_name}: adapted from K = {num_support} points"

    def draw() -> dict[str, tf.Tensor]:
        figure = Figure(figsize=(3.2 * num_tasks, 2.8))
        axes = figure.subplots(1, num_tasks, sharey=True)
        for i, ax in enumerate(np.atleast_1d(axes)):
            ax.plot(x, truth[i, :, 0], color="black", label="true")
            ax.plot(x, unadapted[i, :, 0], color="grey", linestyle="--", label="before")
            ax.plot(x, adapted[i, :, 0], color="tab:red", label="adapted")
            ax.scatter(support_x[i, :, 0], support_y[i, :, 0], color="tab:blue", zorder=3)
            ax.set_xlabel("x")
        np.atleast_1d(axes)[0].legend(loc="lower left", fontsize="small")
        figure.suptitle(title)
        # Fixed margins: tight_layout draws the figure once more to measure it (half
        # of the drawing time, which the training loop waits for).
        figure.subplots_adjust(left=0.05, right=0.99, bottom=0.2, top=0.85, wspace=0.08)
        return {"adapted_fits": figure_to_image(figure)}

    return draw
