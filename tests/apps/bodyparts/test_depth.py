"""Depth files in: what is a depth map, what is refused, and the camera's geometry."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image as PILImage

from imageforest.apps.bodyparts.depth import Camera, check_depth, read_depth
from imageforest.exceptions import InvalidInputError
from imageforest.imaging.io import ImageReadError


def body_map() -> np.ndarray:
    d = np.zeros((40, 60), dtype=np.uint16)
    d[10:30, 20:40] = 2000
    return d


def test_reads_16_bit_png_tiff_and_npy(tmp_path):
    d = body_map()
    PILImage.fromarray(d).save(tmp_path / "a.png")
    PILImage.fromarray(d.astype(np.float32)).save(tmp_path / "a.tif")
    np.save(tmp_path / "a.npy", d.astype(np.float64))
    for name in ("a.png", "a.tif", "a.npy"):
        got = read_depth(tmp_path / name)
        assert got.dtype == np.float32 and got.shape == (40, 60)
        assert np.array_equal(got, d.astype(np.float32))


@pytest.mark.parametrize("make, words", [
    (lambda p: PILImage.fromarray(np.full((40, 60, 3), 90, np.uint8)).save(p / "x.png"), "colour image"),
    (lambda p: PILImage.fromarray(np.full((40, 60), 90, np.uint8)).save(p / "x.png"), "8-bit"),
    (lambda p: PILImage.fromarray(np.zeros((40, 60), np.uint16)).save(p / "x.png"), "every pixel is 0"),
    (lambda p: (p / "x.png").write_bytes(b"\x89PNG not really"), "not a readable"),
    (lambda p: np.save(p / "x.npy", np.full((40, 60), np.nan)), "NaN"),
    (lambda p: np.save(p / "x.npy", -np.ones((40, 60))), "negative"),
    (lambda p: np.save(p / "x.npy", np.ones((2, 40, 60))), "2-D"),
    (lambda p: np.save(p / "x.npy", np.array([{"a": 1}], dtype=object)), "not a readable"),
])
def test_refuses_what_is_not_a_depth_map(tmp_path, make, words):
    make(tmp_path)
    path = next(tmp_path.iterdir())
    with pytest.raises(ImageReadError, match=words):
        read_depth(path)


def test_refuses_other_suffixes_and_missing_files(tmp_path):
    with pytest.raises(ImageReadError, match="read from"):
        read_depth(tmp_path / "x.jpg")
    with pytest.raises(ImageReadError, match="no such file"):
        read_depth(tmp_path / "x.png")


def test_check_depth_on_arrays():
    assert check_depth(body_map()).dtype == np.float32
    with pytest.raises(InvalidInputError, match="colour"):
        check_depth(np.ones((40, 60, 3)))


def test_camera_back_projects_and_projects_back():
    cam = Camera.kinect(640, 480)
    assert cam.fx == cam.fy == 570.0 and (cam.cx, cam.cy) == (320.0, 240.0)
    y, x, z = np.array([0, 240, 479]), np.array([0, 320, 639]), np.array([1500.0, 2000.0, 3500.0])
    pts = cam.back_project(y, x, z)
    assert np.allclose(pts[1], [0.5 * 2000 / 570, 0.5 * 2000 / 570, 2000])  # the centre pixel's centre
    assert np.allclose(cam.project(pts), np.c_[x + 0.5, y + 0.5])
    with pytest.raises(InvalidInputError, match="field of view"):
        Camera.for_map((480, 640), fx=-1.0)
    assert Camera.for_map((240, 320), fx=300.0).fy == 300.0  # fy follows fx unless given
