"""The sine figures of the paper, drawn from trained runs (docs/method.md §4 (c) and (d))."""

from __future__ import annotations

import gin
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import tensorflow as tf

from viable_tf.config import load_run
from viable_tf.evaluation.sine import test_evaluator
from viable_tf.evaluation.statistics import mean_confidence_interval
from viable_tf.ops import seed_for
from viable_tf.tasks.sine import sine_curve

FIGURE_TASK_SEED = 4
FIT_COLORS = ("tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")


def adapted_from_four_points(model_dirs: dict[str, str], *, path: str, num_tasks: int = 3) -> None:
    """(c): tasks adapted from K = 4 points: truth, the points, and each run's fit
    (`model_dirs`: label -> trained run, e.g. CAVIA and relVIABLE).

    The tasks are the first `num_tasks` of a fixed seed, not picked by hand.
    """
    fits = {}
    for label, model_dir in model_dirs.items():
        run = load_run(model_dir)
        grid = run.tasks.evaluation_grid(200)
        batch, params = run.tasks.sample_tasks(
            seed_for(FIGURE_TASK_SEED, 0), num_tasks, num_support=4, query_x=grid
        )  # the same tasks for both: the seed alone fixes them
        learner = run.learner
        state = learner.adapt(
            batch.support_x, batch.support_y, batch.support_mask, query_x=batch.query_x
        )
        fits[label] = learner.predict(state, batch.query_x).numpy()[..., 0]  # [B, Q]
        gin.clear_config()
    x = grid.numpy()
    truth = sine_curve(params, batch.query_x).numpy()[..., 0]
    figure, axes = plt.subplots(1, num_tasks, figsize=(4.2 * num_tasks, 3.4))
    for i, ax in enumerate(np.atleast_1d(axes)):
        ax.plot(x, truth[i], color="black", label="truth")
        for (label, fit), color in zip(fits.items(), FIT_COLORS, strict=False):
            ax.plot(x, fit[i], color=color, label=label)
        ax.scatter(
            batch.support_x[i, :, 0],
            batch.support_y[i, :, 0],
            color="tab:blue",
            zorder=3,
            label="support (K = 4)",
        )
        ax.set_xlabel("x")
    np.atleast_1d(axes)[0].legend(fontsize="small")
    figure.suptitle("Sine tasks adapted from K = 4 points (models trained with K ~ U{0..20})")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def adapted_with_outliers(
    model_dirs: dict[str, str], *, path: str, outliers: int = 2, num_tasks: int = 3
) -> None:
    """Tasks adapted from K = 10 points of which `outliers` have y drawn over the output
    range (docs/method.md §8): truth, the clean points, the outliers marked, and each run's fit
    (`model_dirs`: label -> trained run, e.g. CAVIA and relVIABLE). The tasks are the first
    `num_tasks` of a fixed seed, not picked by hand; the same for every run."""
    fits = {}
    for label, model_dir in model_dirs.items():
        run = load_run(model_dir, (f"SineTasks.outliers={outliers}",))
        grid = run.tasks.evaluation_grid(200)
        batch, params = run.tasks.sample_tasks(
            seed_for(FIGURE_TASK_SEED, 0), num_tasks, num_support=10, query_x=grid
        )
        state = run.learner.adapt(
            batch.support_x, batch.support_y, batch.support_mask, query_x=batch.query_x
        )
        fits[label] = run.learner.predict(state, batch.query_x).numpy()[..., 0]  # [B, Q]
        gin.clear_config()
    x = grid.numpy()
    truth = sine_curve(params, batch.query_x).numpy()[..., 0]
    support_x, support_y = batch.support_x.numpy()[..., 0], batch.support_y.numpy()[..., 0]
    bad = np.abs(support_y - sine_curve(params, batch.support_x).numpy()[..., 0]) > 1e-6
    figure, axes = plt.subplots(1, num_tasks, figsize=(4.2 * num_tasks, 3.4))
    for i, ax in enumerate(np.atleast_1d(axes)):
        ax.plot(x, truth[i], color="black", label="truth")
        for (label, fit), color in zip(fits.items(), FIT_COLORS, strict=False):
            ax.plot(x, fit[i], color=color, label=label)
        good = ~bad[i]
        ax.scatter(support_x[i, good], support_y[i, good], color="tab:blue", zorder=3)
        ax.scatter(
            support_x[i, bad[i]], support_y[i, bad[i]], color="red", marker="x", s=60, zorder=4
        )
        ax.set_xlabel("x")
        ax.set_ylim(-5.5, 5.5)
    handles = np.atleast_1d(axes)[0].get_legend_handles_labels()
    np.atleast_1d(axes)[0].legend(
        [
            *handles[0],
            plt.Line2D([], [], color="tab:blue", marker="o", linestyle=""),
            plt.Line2D([], [], color="red", marker="x", linestyle=""),
        ],
        [*handles[1], "support", f"outliers ({outliers} of 10)"],
        fontsize="small",
    )
    figure.suptitle(f"Sine tasks adapted from K = 10 points, {outliers} of them outliers")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def _support_losses(learner, batch):
    """Per task [B]: inner loss and true support MSE, before and after adaptation."""
    before = learner.initial_state(tf.shape(batch.support_x)[0])
    after = learner.adapt(
        batch.support_x, batch.support_y, batch.support_mask, query_x=batch.query_x
    )
    args = (batch.support_x, batch.support_y, batch.support_mask)
    return (
        learner.inner_loss(before, *args, query_x=batch.query_x),
        learner.inner_loss(after, *args, query_x=batch.query_x),
        learner.support_loss(before, *args),
        learner.support_loss(after, *args),
    )


def inner_loss_before_after(model_dirs: dict[str, str], *, path: str) -> dict:
    """(d): the inner loss and the true support MSE on the test tasks, before and after
    the inner update, per method. Returns the numbers plotted."""
    numbers = {}
    for method, model_dir in model_dirs.items():
        run = load_run(model_dir)
        evaluator = test_evaluator(run.tasks)
        num_tasks = evaluator.num_tasks
        losses = tf.function(
            lambda batch, learner=run.learner: _support_losses(learner, batch), autograph=False
        )
        parts = [[], [], [], []]
        for batch in evaluator.batches():  # the test tasks, as the evaluation sees them
            for part, value in zip(parts, losses(batch), strict=True):
                part.append(value.numpy())
        names = ("inner_loss_pre", "inner_loss_post", "support_mse_pre", "support_mse_post")
        numbers[method] = {
            name: mean_confidence_interval(np.concatenate(part))._asdict()
            for name, part in zip(names, parts, strict=True)
        }
        gin.clear_config()

    figure, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    methods = list(numbers)
    width = 0.38
    positions = np.arange(len(methods))
    for ax, (key, title) in zip(
        axes,
        (
            ("inner_loss", "Inner loss (the loss each method descends)"),
            ("support_mse", "True MSE on the support set"),
        ),
        strict=True,
    ):
        for offset, stage, color in (
            (-width / 2, "pre", "tab:grey"),
            (width / 2, "post", "tab:red"),
        ):
            means = [numbers[m][f"{key}_{stage}"]["mean"] for m in methods]
            cis = [numbers[m][f"{key}_{stage}"]["ci95"] for m in methods]
            ax.bar(
                positions + offset,
                means,
                width,
                yerr=cis,
                color=color,
                capsize=3,
                label="before update" if stage == "pre" else "after update",
            )
        ax.set_xticks(positions, methods, fontsize="small", rotation=15)
        ax.axhline(0, color="black", linewidth=0.6)
        ax.set_title(title, fontsize="medium")
        ax.legend(fontsize="small", loc="best")
    figure.suptitle(f"{num_tasks:,} test tasks, K = 10, C = 5: before and after the inner update")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return numbers
