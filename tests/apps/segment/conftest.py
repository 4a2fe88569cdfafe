"""Synthetic pictures and volumes with known regions, and scribbles a user might paint on them."""

from __future__ import annotations

import numpy as np
import pytest


def disc_picture(seed: int = 0, shape=(60, 80)) -> tuple[np.ndarray, np.ndarray]:
    """An RGB picture (uint8) of a reddish disc on a textured greenish background, and the disc's mask."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[: shape[0], : shape[1]]
    disc = (yy - 30) ** 2 + (xx - 38) ** 2 < 16 ** 2
    img = np.empty((*shape, 3))
    img[...] = (60, 140, 70)
    img[disc] = (190, 60, 50)
    img += rng.normal(0, 18, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8), disc


def strokes(shape=(60, 80), fg: int = 1, bg: int = 2) -> np.ndarray:
    """One short stroke inside the disc, two outside."""
    s = np.zeros(shape, dtype=np.uint8)
    s[30, 32:44] = fg
    s[5, 5:30] = bg
    s[50:57, 70] = bg
    return s


@pytest.fixture(scope="module")
def picture():
    return disc_picture()


@pytest.fixture(scope="module")
def ball_volume():
    """A 3-D volume (z, y, x) of a bright ball in darker tissue, 2 x 1 x 1 mm voxels, its mask and scribbles."""
    rng = np.random.default_rng(1)
    zz, yy, xx = np.mgrid[:16, :32, :32]
    ball = ((zz - 8) * 2.0) ** 2 + (yy - 16) ** 2 + (xx - 15) ** 2 < 9 ** 2
    vol = np.where(ball, 60.0, 0.0) + rng.normal(0, 10, ball.shape)
    scr = np.zeros(ball.shape, dtype=np.int16)
    scr[8, 14:18, 13:17] = 1
    scr[8, 2:5, 2:30] = 2
    scr[3, 28:31, 2:20] = 2
    return vol.astype(np.float32), ball, scr
