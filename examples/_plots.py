"""Drawing helpers for the gallery and the demo: posteriors as colour mixtures, p(y|x) as density images."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # files only; no display needed

import matplotlib.pyplot as plt
import numpy as np

CLASS_COLOURS = np.array([[0.85, 0.15, 0.15], [0.15, 0.65, 0.15], [0.15, 0.3, 0.85], [0.9, 0.75, 0.1]])


def grid2d(lim: float = 1.5, n: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """Query points on an n x n grid over [-lim, lim]^2: (n*n, 2) float32, and the axis values."""
    axis = np.linspace(-lim, lim, n)
    xx, yy = np.meshgrid(axis, axis[::-1])
    return np.c_[xx.ravel(), yy.ravel()].astype(np.float32), axis


def posterior_image(forest, lim: float = 1.5, n: int = 200) -> np.ndarray:
    """RGB image whose colour mixes class colours by the forest posterior (grey where uncertain), (n, n, 3)."""
    pts, _ = grid2d(lim, n)
    proba = forest.predict_proba(pts)
    colours = CLASS_COLOURS[: proba.shape[1]]
    rgb = proba @ colours
    # Blend towards grey by normalised entropy so uncertain regions read as uncertain.
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -np.sum(np.where(proba > 0, proba * np.log(proba), 0), axis=1) / np.log(proba.shape[1])
    rgb = rgb * (1 - 0.6 * ent[:, None]) + 0.5 * 0.6 * ent[:, None]
    return np.clip(rgb.reshape(n, n, 3), 0, 1)


def show_posterior(ax, forest, X, y, title: str, lim: float = 1.5) -> None:
    ax.imshow(posterior_image(forest, lim), extent=(-lim, lim, -lim, lim))
    ax.scatter(X[:, 0], X[:, 1], c=CLASS_COLOURS[y], s=12, edgecolors="w", linewidths=0.6)
    ax.set_title(title, fontsize=9)
    ax.set_xticks([])
    ax.set_yticks([])


def show_regression(ax, forest, X, y, title: str, xlim=(-0.2, 1.2), ylim=(-0.4, 1.6)) -> None:
    """p(y|x) as a density image with the training points, the mean (green) and the mode (grey)."""
    xs = np.linspace(*xlim, 240)
    ys = np.linspace(*ylim, 240)
    dist = forest.predict_distribution(xs[:, None].astype(np.float32))
    dens = dist.pdf(ys)  # (len(xs), len(ys))
    dens = dens / np.maximum(dens.max(axis=1, keepdims=True), 1e-300)  # per-column scaling, as in Fig. 4.6
    ax.imshow(dens.T[::-1], extent=(*xlim, *ylim), aspect="auto", cmap="magma")
    ax.plot(xs, dist.mean()[:, 0], color="lime", lw=1.2, label="mean")
    ax.plot(xs, dist.mode()[:, 0], color="0.75", lw=0.8, ls="--", label="mode")
    ax.scatter(X[:, 0], y, s=6, c="w", edgecolors="k", linewidths=0.3)
    ax.set_title(title, fontsize=9)
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)


def save(fig, path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def figure(n_cols: int, n_rows: int = 1, size: float = 3.0):
    return plt.subplots(n_rows, n_cols, figsize=(size * n_cols, size * n_rows), squeeze=False)
