"""Synthetic pictures and volumes with known regions, and scribbles a user might paint on them."""

from __future__ import annotations

import numpy as np
import pytest

from imageforest.apps.segment.synthetic import disc_picture, strokes

__all__ = ["disc_picture", "strokes"]


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
