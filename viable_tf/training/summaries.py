"""TensorBoard summaries that are more than a scalar: the config and figures."""

from __future__ import annotations

import functools
import os

import gin
import tensorflow as tf

from viable_tf import plots
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


@functools.lru_cache(maxsize=4)
def _figure_tasks(tasks: SineTasks, num_tasks: int, num_support: int):
    """The figure's fixed tasks, drawn once (eagerly, ~30 ms) per task family."""
    grid = tasks.evaluation_grid(200)
    batch, params = tasks.sample_tasks(
        seed_for(FIGURE_SEED, num_support), num_tasks, num_support=num_support, query_x=grid
    )
    return grid, batch, sine_curve(params, batch.query_x).numpy()


def adapted_fits(
    learner, tasks: SineTasks, *, num_tasks: int = 4, num_support: int = 10
) -> dict[str, functools.partial]:
    """For a few fixed tasks, the true curve, support points and the fits before and
    after adaptation: the fits are computed now, and {"adapted_fits": draw} is
    returned, `draw()` giving the PNG from those numbers alone (`plots.adapted_fits`)."""
    grid, batch, truth = _figure_tasks(tasks, num_tasks, num_support)
    unadapted = learner.predict(learner.initial_state(num_tasks), batch.query_x)
    adapted = learner.predict(
        learner.adapt(batch.support_x, batch.support_y, batch.support_mask), batch.query_x
    )
    draw = functools.partial(
        plots.adapted_fits,
        x=grid.numpy(),
        truth=truth,
        unadapted=unadapted.numpy(),
        adapted=adapted.numpy(),
        support_x=batch.support_x.numpy(),
        support_y=batch.support_y.numpy(),
        title=f"{learner.method_name}: adapted from K = {num_support} points",
    )
    return {"adapted_fits": draw}


def png_to_image(png: bytes) -> tf.Tensor:
    """PNG bytes as the uint8 image [1, H, W, 4] that tf.summary.image takes."""
    return tf.image.decode_png(png, channels=4)[None]
