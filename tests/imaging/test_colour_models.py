"""Per-class colour mixtures: fitted to known Gaussians, and the class posterior they give a segmentation."""

from __future__ import annotations

import numpy as np
import pytest

from imageforest.exceptions import InvalidInputError
from imageforest.imaging.colour_models import class_colour_posterior, fit_mixture


def test_one_gaussian_is_recovered_and_its_density_is_the_normal_one():
    rng = np.random.default_rng(0)
    cov = np.array([[4.0, 1.0, 0.0], [1.0, 2.0, 0.5], [0.0, 0.5, 1.0]])
    x = rng.multivariate_normal([10.0, -5.0, 3.0], cov, size=20000)
    model = fit_mixture(x, k=1)
    assert np.allclose(model.means[0], [10.0, -5.0, 3.0], atol=0.05)
    assert np.allclose(model.covariances[0], cov, atol=0.1)
    from scipy.stats import multivariate_normal

    probe = x[:50]
    expected = multivariate_normal(model.means[0], model.covariances[0]).logpdf(probe)
    assert np.allclose(model.log_density(probe), expected, atol=1e-9)


def test_a_mixture_finds_separate_clusters_and_is_the_same_every_run():
    rng = np.random.default_rng(1)
    centres = np.array([[0.0, 0.0], [30.0, 0.0], [0.0, 40.0]])
    x = np.concatenate([rng.normal(c, 1.0, size=(3000, 2)) for c in centres])
    model = fit_mixture(x, k=3)
    found = model.means[np.argsort(model.means[:, 0] + 10 * model.means[:, 1])]
    assert np.allclose(found, centres[np.argsort(centres[:, 0] + 10 * centres[:, 1])], atol=0.1)
    assert np.allclose(model.weights, 1 / 3, atol=0.01)
    again = fit_mixture(x, k=3)
    assert np.array_equal(again.means, model.means)


def test_fewer_points_than_components_and_identical_points():
    model = fit_mixture(np.array([[1.0, 2.0], [1.0, 2.0], [1.0, 2.0]]), k=5)
    assert len(model.weights) == 1 and np.all(np.isfinite(model.log_density(np.zeros((2, 2)))))
    with pytest.raises(InvalidInputError, match="points"):
        fit_mixture(np.zeros((0, 3)))


def test_class_posterior_of_a_segmentation():
    rng = np.random.default_rng(2)
    colours = np.concatenate([rng.normal(20, 3, size=(5000, 3)), rng.normal(70, 3, size=(5000, 3))])
    truth = np.repeat([0, 1], 5000)
    wrong = truth.copy()
    wrong[:500] = 1  # a tenth of class 0 mislabelled: the colour models still side with the majority
    p = class_colour_posterior(colours, wrong, 3)
    assert p.shape == (10000, 3) and p.dtype == np.float32
    assert np.allclose(p.sum(axis=1), 1.0, atol=1e-5) and np.all(p[:, 2] == 0)  # class 2 has no pixels
    assert np.mean(np.argmax(p, axis=1) == truth) > 0.99


def test_a_class_of_one_colour_with_a_few_strays_fits_without_failing():
    rng = np.random.default_rng(3)
    x = np.concatenate([np.full((995, 3), 50.0), rng.normal(0, 30, size=(5, 3))])
    for seed in range(5):
        model = fit_mixture(x, k=5, seed=seed)
        assert np.all(np.isfinite(model.log_density(x))) and np.isclose(model.weights.sum(), 1.0)
