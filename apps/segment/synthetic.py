"""A small synthetic picture with a known object and the strokes a user would paint on it: the tests' and the
plugin tests' common ground (no real data needed)."""

from __future__ import annotations

import numpy as np


def disc_picture(seed: int = 0, shape: tuple[int, int] = (60, 80)) -> tuple[np.ndarray, np.ndarray]:
    """An RGB picture (uint8) of a reddish disc (radius 16 at (30, 38)) on a noisy greenish background, and the
    disc's mask."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[: shape[0], : shape[1]]
    disc = (yy - 30) ** 2 + (xx - 38) ** 2 < 16 ** 2
    img = np.empty((*shape, 3))
    img[...] = (60, 140, 70)
    img[disc] = (190, 60, 50)
    img += rng.normal(0, 18, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8), disc


def strokes(shape: tuple[int, int] = (60, 80), fg: int = 1, bg: int = 2) -> np.ndarray:
    """Scribbles for `disc_picture`: one short stroke inside the disc (label fg), two outside (label bg)."""
    s = np.zeros(shape, dtype=np.uint8)
    s[30, 32:44] = fg
    s[5, 5:30] = bg
    s[50:57, 70] = bg
    return s
