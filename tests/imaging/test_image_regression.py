"""ImageRegressionForest: per-voxel regression with box features, on the engine's public growth."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from imageforest import InvalidInputError, NotFittedError
from imageforest.imaging import BoxFeatures, Image, ImageRegressionForest


def bright_square(offset: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A 40 x 40 picture with a bright square, and every pixel's offset (dy, dx) to the square's centre."""
    img = np.zeros((40, 40), np.float32)
    c = 20 + offset
    img[c - 5:c + 5, c - 5:c + 5] = 100.0
    yy, xx = np.mgrid[:40, :40]
    return img, np.stack([c - yy, c - xx], axis=-1).astype(np.float64)


def test_offsets_to_a_landmark_are_learnt_and_generalise(tmp_path: Path):
    images, pts, targets = [], [], []
    for k, off in enumerate((-6, -2, 2, 6)):
        img, offsets = bright_square(off)
        yy, xx = np.mgrid[2:38:2, 2:38:2]
        images.append(img)
        pts.append(np.c_[np.full(yy.size, k), yy.ravel(), xx.ravel()])
        targets.append(offsets[yy.ravel(), xx.ravel()])
    forest = ImageRegressionForest(BoxFeatures(max_offset_mm=15, box_size_mm=(2, 6)), n_trees=8, max_depth=12,
                                   random_state=0)
    forest.fit(images, np.concatenate(pts).astype(np.int32), np.concatenate(targets))
    test, truth = bright_square(0)
    near = np.array([[0, y, x] for y in range(12, 28, 3) for x in range(12, 28, 3)], dtype=np.int32)
    pred = forest.predict([test], near)
    assert pred.shape == (len(near), 2)
    assert np.median(np.abs(pred - truth[near[:, 1], near[:, 2]])) < 3.0  # pixels
    dist = forest.predict_distribution([test], near)
    assert dist.std().shape == (len(near), 2) and np.all(dist.std() >= 0)
    image = forest.predict_image(Image(test, np.ones(2), np.zeros(2), np.eye(2)))
    assert image.array.shape == (40, 40, 2)
    forest.save(tmp_path / "m.npz")
    loaded = ImageRegressionForest.load(tmp_path / "m.npz")
    assert np.allclose(loaded.predict([test], near), pred)
    assert loaded.score([test], near, truth[near[:, 1], near[:, 2]]) > 0.5


def test_checks():
    with pytest.raises(NotFittedError):
        ImageRegressionForest().predict([np.zeros((5, 5))], np.zeros((1, 3), np.int32))
    with pytest.raises(InvalidInputError, match="leaf_model must be one of 'constant', 'gaussian'"):
        ImageRegressionForest(leaf_model="linear").fit([np.zeros((5, 5))], np.array([[0, 1, 1], [0, 2, 2]]),
                                                       np.array([1.0, 2.0]))
    with pytest.raises(TypeError):
        ImageRegressionForest(None, 3)  # keyword-only after the first
