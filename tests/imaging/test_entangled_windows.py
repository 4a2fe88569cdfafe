"""The entangled forest's image windows: each window is one more image channel that tests may read, a window's
box mean is a tissue share that a plain box mean cannot tell, and windows survive the model file."""

import numpy as np
import pytest

from imageforest.exceptions import InvalidInputError
from imageforest.imaging.entangled import EntangledForest

SETTINGS = {"n_trees": 4, "max_depth": 6, "entangled_depths": (), "n_candidates": 16, "max_offset_mm": 2,
            "box_size_mm": (3, 5), "min_samples_leaf": 2, "mean_share": 1.0, "random_state": 0}


def _bone_and_air(seed):
    """Class 1 is a square of bone and air voxels mixed at random (mean 0 HU), the background soft tissue (0 HU,
    noisy): any box's mean is near 0 on both, only its share of bone tells them apart."""
    rng = np.random.default_rng(seed)
    img = rng.normal(0, 300, (40, 40)).astype(np.float32)
    truth = np.zeros((40, 40), int)
    truth[10:30, 12:28] = 1
    img[truth == 1] = rng.choice([-1000.0, 1000.0], int(truth.sum()))
    return img, truth


def _points(n_images):
    return np.array([[i, y, x] for i in range(n_images) for y in range(0, 40, 2) for x in range(0, 40, 2)], np.int32)


def test_a_window_tells_a_tissue_share_that_a_box_mean_cannot():
    train = [_bone_and_air(s) for s in range(3)]
    pts = _points(3)
    labels = np.array([train[i][1][y, x] for i, y, x in pts])
    windowed = EntangledForest(image_windows=((300.0, 700.0),), **SETTINGS).fit([t[0] for t in train], pts, labels)
    plain = EntangledForest(**SETTINGS).fit([t[0] for t in train], pts, labels)
    img, truth = _bone_and_air(9)
    inner = np.zeros_like(truth, bool)
    inner[3:37, 3:37] = True  # away from the picture's edge, where boxes read the fill
    right = (windowed.predict_proba_image(img).array.argmax(-1) == truth)[inner].mean()
    blind = (plain.predict_proba_image(img).array.argmax(-1) == truth)[inner].mean()
    assert right > 0.94 and right > blind + 0.03, (right, blind)
    use = windowed.context_use()
    assert use.shape == (1, 3) and use[0, 1] > use[0, 0]  # the image, its window, the class-1 map


def test_windows_survive_the_model_file(tmp_path):
    img, truth = _bone_and_air(0)
    pts = _points(1)
    forest = EntangledForest(image_windows=((-1000, -400), (300, 700)), **SETTINGS).fit(
        [img], pts, truth[pts[:, 1], pts[:, 2]])
    forest.save(tmp_path / "f.npz")
    loaded = EntangledForest.load(tmp_path / "f.npz")
    assert loaded.windows().tolist() == [[-1000, -400], [300, 700]]
    assert np.array_equal(loaded.predict_proba_image(img).array, forest.predict_proba_image(img).array)


@pytest.mark.parametrize("windows", [(1, 2), ((2, 1),), ((0, np.inf),), "bone"])
def test_bad_windows_are_refused(windows):
    img, truth = _bone_and_air(0)
    pts = _points(1)
    with pytest.raises(InvalidInputError, match=r"image_windows|image window"):
        EntangledForest(image_windows=windows, **SETTINGS).fit([img], pts, truth[pts[:, 1], pts[:, 2]])
