"""Figures drawn from numbers alone (numpy and matplotlib, never TensorFlow), so that
the figure worker process (figure_worker.py) can draw them while training goes on."""

from __future__ import annotations

import io

import numpy as np
from matplotlib.figure import Figure


def to_png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=80)
    return buffer.getvalue()


def adapted_fits(
    *,
    x: np.ndarray,
    truth: np.ndarray,
    unadapted: np.ndarray,
    adapted: np.ndarray,
    support_x: np.ndarray,
    support_y: np.ndarray,
    title: str,
) -> bytes:
    """PNG: per task, the true curve, the fit before and after adaptation and the
    support points. x [P]; truth, unadapted, adapted [T, P, 1]; support_* [T, K, 1]."""
    num_tasks = len(truth)
    figure = Figure(figsize=(3.2 * num_tasks, 2.8))
    axes = np.atleast_1d(figure.subplots(1, num_tasks, sharey=True))
    for i, ax in enumerate(axes):
        ax.plot(x, truth[i, :, 0], color="black", label="true")
        ax.plot(x, unadapted[i, :, 0], color="grey", linestyle="--", label="before")
        ax.plot(x, adapted[i, :, 0], color="tab:red", label="adapted")
        ax.scatter(support_x[i, :, 0], support_y[i, :, 0], color="tab:blue", zorder=3)
        ax.set_xlabel("x")
    axes[0].legend(loc="lower left", fontsize="small")
    figure.suptitle(title)
    # Fixed margins: tight_layout would draw the figure once more to measure it.
    figure.subplots_adjust(left=0.05, right=0.99, bottom=0.2, top=0.85, wspace=0.08)
    return to_png(figure)
