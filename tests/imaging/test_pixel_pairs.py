"""Pixel-pair tests and the Hough feature channels."""

from __future__ import annotations

import numpy as np
import pytest

from imageforest.exceptions import InvalidInputError
from imageforest.imaging.channels import CHANNEL_NAMES, as_rgb, hough_channels
from imageforest.imaging.pixel_pairs import PixelPairs


def test_responses_are_pixel_differences_with_border_clamping():
    rng = np.random.default_rng(0)
    images = [rng.random((3, 9, 11)).astype(np.float32), rng.random((3, 5, 6)).astype(np.float32)]
    fam = PixelPairs(3, 8)
    stack = fam.prepare(images)
    points = np.array([[0, 0, 4, 5], [1, 0, 0, 0], [1, 0, 4, 5]], dtype=np.int32)
    params = fam.sample(np.random.default_rng(1), 3, 20)
    assert params[..., 1:].min() >= -4 and params[..., 1:].max() <= 3
    resp = fam.responses((stack, points), params, np.arange(3, dtype=np.int32), np.arange(3, dtype=np.int32))
    for m, (img, _, y, x) in enumerate(points):
        for c in range(20):
            ch, uy, ux, vy, vx = params[m, c].astype(int)
            im = images[img][ch]

            def at(yy, xx, im=im):
                return im[np.clip(yy, 0, im.shape[0] - 1), np.clip(xx, 0, im.shape[1] - 1)]

            assert resp[c, m] == pytest.approx(at(y + uy, x + ux) - at(y + vy, x + vx), abs=1e-6)


def test_the_family_refuses_foreign_parameters_and_channel_counts():
    fam = PixelPairs(32, 16)
    assert fam.validate_params(np.array([[3, -8, 7, 0, 1]], dtype=np.float64))
    assert not fam.validate_params(np.array([[32, 0, 0, 0, 0]], dtype=np.float64))
    assert not fam.validate_params(np.array([[0, 0, 99, 0, 0]], dtype=np.float64))
    with pytest.raises(InvalidInputError, match="expects 32 channels"):
        fam.prepare([np.zeros((3, 4, 4), np.float32)])


def test_hough_channels_shape_and_meaning():
    rgb = np.zeros((30, 40, 3), np.float32)
    rgb[:, 20:] = 1.0  # a vertical edge, black to white
    ch = hough_channels(rgb)
    assert ch.shape == (len(CHANNEL_NAMES), 30, 40) == (32, 30, 40) and ch.dtype == np.float32
    L_max, dx_max, dy_max = ch[16], ch[16 + 3], ch[16 + 4]
    assert L_max[:, 0].max() < 1 and L_max[:, -1].min() > 99
    assert dx_max[15, 20] > 10 and dy_max[15, 20] < 1e-3


@pytest.mark.parametrize("window", [1, 4, 5, 6])
def test_hough_channels_min_max_are_scipys_filters(window):
    from scipy import ndimage

    rgb = np.random.default_rng(window).random((23, 31, 3)).astype(np.float32)
    ch = hough_channels(rgb, window)
    from skimage.color import rgb2lab

    # the first base channel is scikit-image's L*: its min and max channels are scipy's filters of it, borders and
    # even windows included
    L = rgb2lab(rgb).astype(np.float32)[..., 0]
    assert np.array_equal(ch[0], ndimage.minimum_filter(L, window, mode="nearest"))
    assert np.array_equal(ch[16], ndimage.maximum_filter(L, window, mode="nearest"))


def test_as_rgb_accepts_colour_and_refuses_grey():
    assert as_rgb(np.full((4, 5, 4), 255, np.uint8)).max() == 1.0
    assert as_rgb(np.full((4, 5, 3), 128.0)).max() == pytest.approx(128 / 255)
    for bad, match in ((np.zeros((4, 5)), "grey"), (np.zeros((4, 5, 1)), "grey"), (np.zeros((1, 5, 3)), "small"),
                       (np.full((4, 5, 3), -1.0), "lie in"), (np.zeros((4, 5, 3), bool), "numbers")):
        with pytest.raises(InvalidInputError, match=match):
            as_rgb(bad)
