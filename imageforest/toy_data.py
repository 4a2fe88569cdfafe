"""Synthetic 2-D and 1-D data sets like those of the monograph's figures (Criminisi et al. 2012, ch. 3-4).

Used by the tests, the gallery and the benchmarks; all are deterministic given `seed`.
"""

from __future__ import annotations

import numpy as np


def spirals(n_per_class: int = 100, n_classes: int = 4, noise: float = 0.05, turns: float = 1.0,
            seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Points along `n_classes` interleaved spiral arms (Fig. 3.4-3.5), X (n, 2) in about [-1, 1]^2, y (n,)."""
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for c in range(n_classes):
        r = np.sqrt(rng.uniform(0.02, 1.0, n_per_class))
        angle = 2 * np.pi * (turns * r + c / n_classes)
        pts = np.c_[r * np.cos(angle), r * np.sin(angle)] + rng.normal(0, noise, (n_per_class, 2))
        xs.append(pts)
        ys.append(np.full(n_per_class, c))
    return np.concatenate(xs), np.concatenate(ys)


def separable_clusters(n_per_class: int = 100, gap: tuple[float, float] = (-0.25, 0.25),
                       seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two classes perfectly separable by a vertical line inside the x1-gap `gap` (Fig. 3.9)."""
    rng = np.random.default_rng(seed)
    left = np.c_[rng.uniform(-1.0, gap[0], n_per_class), rng.uniform(-1, 1, n_per_class)]
    right = np.c_[rng.uniform(gap[1], 1.0, n_per_class), rng.uniform(-1, 1, n_per_class)]
    # Put points exactly on the gap's edges so the gap is what the data say it is.
    left[0, 0], right[0, 0] = gap
    return np.concatenate([left, right]), np.repeat([0, 1], n_per_class)


def four_clusters(n_per_class: int = 50, spread: float = 0.12, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Four Gaussian blobs around the origin (Fig. 3.6): X (4 n, 2), y (4 n,)."""
    rng = np.random.default_rng(seed)
    centres = np.array([[-0.5, 0.5], [0.5, 0.5], [0.5, -0.5], [-0.5, -0.5]])
    X = np.concatenate([c + rng.normal(0, spread, (n_per_class, 2)) for c in centres])
    return X, np.repeat(np.arange(4), n_per_class)


def gap_regression(n: int = 120, gap: tuple[float, float] = (0.4, 0.6), noise: float = 0.03,
                   seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """1-D regression on a smooth curve with the x-interval `gap` left empty (Fig. 4.6): X (n, 1), y (n,)."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, 4 * n)
    x = x[(x < gap[0]) | (x > gap[1])][:n]
    y = 0.5 * np.sin(2 * np.pi * x) + x + rng.normal(0, noise, x.size)
    return x[:, None], y


def ambiguous_gap_regression(n: int = 120, noise: float = 0.03, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two flat segments at different heights with a wide gap between them (Fig. 4.9 b-c): the posterior in the
    gap should be bimodal. X (n, 1) in [0, 0.35] and [0.65, 1]; y near 0.2 on the left and 0.8 on the right."""
    rng = np.random.default_rng(seed)
    half = n // 2
    x = np.r_[rng.uniform(0, 0.35, half), rng.uniform(0.65, 1.0, n - half)]
    y = np.r_[0.2 + 0.1 * x[:half], 0.8 - 0.1 * (x[half:] - 0.65)] + rng.normal(0, noise, n)
    return x[:, None], y


def s_shape(n: int = 1000, noise: float = 0.05, seed: int = 0) -> np.ndarray:
    """Points along an "S" in 2-D (Fig. 5.13-5.14): x = sin(2t) / 2, y = t / 2 for t in [-3 pi / 4, 3 pi / 4], plus
    noise. Near x = 0 the conditional p(y | x) has three modes (y = 0 and +-pi / 4)."""
    rng = np.random.default_rng(seed)
    t = rng.uniform(-0.75 * np.pi, 0.75 * np.pi, n)
    return np.c_[0.5 * np.sin(2 * t) + rng.normal(0, noise, n), 0.5 * t + rng.normal(0, noise, n)]
