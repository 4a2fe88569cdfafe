"""The filter bank: values against direct computations, shapes, and use as channels and vectors."""

import numpy as np
import pytest
from scipy import ndimage

from imageforest import ClassificationForest
from imageforest.imaging import BoxFeatures, FilterBank, ImageClassificationForest
from imageforest.imaging.io import Image


@pytest.mark.parametrize("shape", [(20, 24), (10, 12, 14)])
def test_channels_names_and_values(shape):
    rng = np.random.default_rng(0)
    arr = rng.normal(size=shape).astype(np.float32)
    bank = FilterBank(scales=(0.7, 1.6))
    chans = bank(arr)
    names = bank.channel_names(len(shape))
    assert len(chans) == len(names) == 2 * (4 + 2 * len(shape))
    assert all(c.shape == shape and c.dtype == np.float32 for c in chans)
    by_name = dict(zip(names, chans, strict=True))
    assert np.allclose(by_name["gaussian@1.6"], ndimage.gaussian_filter(arr, 1.6), atol=1e-5)
    assert np.allclose(by_name["laplacian_of_gaussian@0.7"], ndimage.gaussian_laplace(arr, 0.7), atol=1e-5)
    assert np.allclose(by_name["difference_of_gaussians@1.6"],
                       ndimage.gaussian_filter(arr, 1.6) - ndimage.gaussian_filter(arr, 0.66 * 1.6), atol=1e-5)
    # Hessian eigenvalues: descending, and summing to the Laplacian of Gaussian (the trace).
    hess = [by_name[f"hessian_eigenvalues[{k}]@1.6"] for k in range(len(shape))]
    assert all(np.all(hess[k] >= hess[k + 1] - 1e-6) for k in range(len(shape) - 1))
    assert np.allclose(sum(hess), by_name["laplacian_of_gaussian@1.6"], atol=1e-4)
    st = [by_name[f"structure_tensor_eigenvalues[{k}]@0.7"] for k in range(len(shape))]
    assert np.all(st[-1] >= -1e-6)  # positive semi-definite


def test_bank_as_box_channels_survives_a_model_file(tmp_path):
    rng = np.random.default_rng(1)
    img = np.zeros((40, 40), np.float32)
    img[:, 20:] = rng.normal(size=(40, 20))  # texture on the right, flat on the left: same mean
    img += 5
    pts = np.c_[np.zeros(400, int), rng.integers(0, 40, 400), rng.integers(0, 40, 400)]
    labels = (pts[:, 2] >= 20).astype(int)
    feats = BoxFeatures(3.0, (1.0, 3.0), planar=True, filter_bank=FilterBank(("gradient_magnitude",), (1.0,)))
    assert feats.n_channels == 1
    forest = ImageClassificationForest(feats, n_trees=5, max_depth=6, n_candidates=20, random_state=0)
    forest.fit(Image(img, np.ones(2), np.zeros(2), np.eye(2)), pts, labels)
    assert np.mean(forest.predict(img, pts) == labels) > 0.9
    forest.save(tmp_path / "m.npz")
    loaded = ImageClassificationForest.load(tmp_path / "m.npz")
    assert loaded.family_.filter_bank == feats.filter_bank
    assert np.array_equal(loaded.predict_proba(img, pts), forest.predict_proba(img, pts))


def test_bank_vectors_feed_the_vector_forest():
    rng = np.random.default_rng(2)
    img = rng.normal(size=(30, 30)).astype(np.float32)
    img[:, :15] = ndimage.gaussian_filter(img[:, :15], 2)  # smooth left half, rough right half
    bank = FilterBank(("gaussian", "gradient_magnitude", "hessian_eigenvalues"), (0.7, 1.6))
    pts = np.c_[rng.integers(2, 28, 300), rng.integers(2, 28, 300)]
    X = bank.features_at(img, pts)
    assert X.shape == (300, len(bank.channel_names(2)))
    y = (pts[:, 1] >= 15).astype(int)
    forest = ClassificationForest(n_trees=30, random_state=0).fit(X[:200], y[:200])
    assert forest.score(X[200:], y[200:]) > 0.85


@pytest.mark.parametrize("spacing", [None, (3.0, 1.5, 1.0)])
def test_shared_derivatives_give_scipys_values_whatever_the_threads(spacing):
    import numba

    arr = np.random.default_rng(3).normal(size=(12, 14, 16)).astype(np.float32)
    bank = FilterBank(("gradient_magnitude", "structure_tensor_eigenvalues", "gaussian"), (1.0, 2.0, 4.0))
    chans = dict(zip(bank.channel_names(3), bank(arr, spacing), strict=True))
    per_mm = 1.0 if spacing is None else 1.0 / np.asarray(spacing)
    for scale in (1.0, 2.0, 4.0):  # the gradient magnitude at s and the tensor's inner scale at 2 s share theirs
        sigma = scale * per_mm
        assert np.allclose(chans[f"gradient_magnitude@{scale:g}"],
                           ndimage.gaussian_gradient_magnitude(arr, tuple(np.broadcast_to(sigma, 3))), atol=1e-5)
    st = [chans[f"structure_tensor_eigenvalues[{k}]@4"] for k in range(3)]
    assert np.all(st[0] >= st[1]) and np.all(st[1] >= st[2])
    previous = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        alone = bank(arr, spacing)
    finally:
        numba.set_num_threads(previous)
    assert all(np.array_equal(a, b) for a, b in zip(alone, chans.values(), strict=True))
