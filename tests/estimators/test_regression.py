"""RegressionForest against the monograph's claims (Criminisi et al. 2012, ch. 4, App. A)."""

import numpy as np
import pytest

from imageforest import RegressionForest
from imageforest.toy_data import ambiguous_gap_regression, gap_regression


@pytest.fixture(scope="module")
def gap_forest():
    X, y = gap_regression(120, gap=(0.4, 0.6), seed=0)
    forest = RegressionForest(n_trees=200, max_depth=3, leaf_model="linear", n_thresholds=8,
                              random_state=0).fit(X, y)
    return forest, X, y


def test_mean_interpolates_gap_smoothly(gap_forest):
    forest = gap_forest[0]
    xs = np.linspace(0.4, 0.6, 81)[:, None]
    mean = forest.predict(xs)
    left = forest.predict(np.array([[0.4]]))[0]
    right = forest.predict(np.array([[0.6]]))[0]
    lo, hi = min(left, right), max(left, right)
    assert np.all((mean > lo - 0.1) & (mean < hi + 0.1)), "the mean leaves the band spanned by the gap edges"
    # Smooth: no jump between neighbouring grid points larger than a few times the average slope.
    steps = np.abs(np.diff(mean))
    assert steps.max() < 5 * abs(right - left) / 80 + 0.01


def test_variance_grows_away_from_data(gap_forest):
    forest = gap_forest[0]
    std = forest.predict_distribution(np.array([[0.2], [0.5], [1.5], [3.0]])).std()[:, 0]
    assert std[0] < std[1], "uncertainty in the gap should exceed that on the data"
    assert std[0] < std[2] < std[3], "uncertainty should grow with extrapolation distance"


def test_bimodal_posterior_in_ambiguous_gap():
    """Fig. 4.9 (b, c): in a gap between two different levels the forest posterior has two modes."""
    X, y = ambiguous_gap_regression(120, seed=1)
    forest = RegressionForest(n_trees=200, max_depth=4, leaf_model="linear", n_thresholds=8,
                              random_state=0).fit(X, y)
    dist = forest.predict_distribution(np.array([[0.5]]))
    grid = np.linspace(-0.2, 1.2, 1401)
    pdf = dist.pdf(grid)[0]
    peaks = np.flatnonzero((pdf[1:-1] > pdf[:-2]) & (pdf[1:-1] >= pdf[2:])) + 1
    big = peaks[pdf[peaks] > 0.2 * pdf.max()]
    assert big.size >= 2, "expected a bimodal posterior in the gap"
    assert grid[big].min() < 0.4 and grid[big].max() > 0.6
    # The mean sits between the modes where there is little mass, unlike the mode.
    mean = dist.mean()[0, 0]
    assert pdf[np.argmin(np.abs(grid - mean))] < pdf.max()
    on_data = forest.predict_distribution(np.array([[0.1]]))
    p = on_data.pdf(grid)[0]
    peaks = np.flatnonzero((p[1:-1] > p[:-2]) & (p[1:-1] >= p[2:])) + 1
    assert (p[peaks] > 0.2 * p.max()).sum() == 1


@pytest.mark.parametrize("leaf_model", ["constant", "gaussian", "linear"])
@pytest.mark.parametrize("criterion", ["gaussian", "squared_error"])
def test_fits_friedman(leaf_model, criterion):
    from sklearn.datasets import make_friedman1
    X, y = make_friedman1(1500, noise=0.5, random_state=0)
    forest = RegressionForest(n_trees=40, leaf_model=leaf_model, criterion=criterion, min_samples_leaf=5,
                              random_state=0).fit(X[:1000], y[:1000])
    assert forest.score(X[1000:], y[1000:]) > 0.75


def test_multivariate_targets_and_distribution_summaries():
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (800, 2))
    Y = np.c_[X[:, 0] + 0.05 * rng.normal(size=800), X[:, 0] * X[:, 1] + 0.05 * rng.normal(size=800)]
    forest = RegressionForest(n_trees=50, min_samples_leaf=5, random_state=0).fit(X, Y)
    pred = forest.predict(X[:10])
    assert pred.shape == (10, 2)
    dist = forest.predict_distribution(X[:10])
    assert np.allclose(dist.mean(), pred)
    assert dist.cov().shape == (10, 2, 2)
    assert np.all(dist.std() > 0)
    mode = dist.mode()
    assert mode.shape == (10, 2)
    assert np.all(dist.logpdf(mode) >= dist.logpdf(dist.mean()) - 1e-9)
    q = dist.quantile([0.05, 0.5, 0.95], dim=1)
    assert q.shape == (10, 3) and np.all(np.diff(q, axis=1) > 0)
    assert np.allclose(dist.cdf(q[:, 1], dim=1), 0.5, atol=1e-6)


def test_quantiles_cover_the_noise():
    rng = np.random.default_rng(1)
    X = rng.uniform(0, 1, (3000, 1))
    y = X[:, 0] + rng.normal(0, 0.1, 3000)
    forest = RegressionForest(n_trees=50, min_samples_leaf=30, random_state=0).fit(X[:2000], y[:2000])
    q = forest.predict_distribution(X[2000:]).quantile([0.1, 0.9])
    inside = np.mean((y[2000:] > q[:, 0]) & (y[2000:] < q[:, 1]))
    assert 0.7 < inside < 0.9


def test_distribution_needs_a_probabilistic_leaf_model():
    from imageforest import InvalidInputError
    X, y = gap_regression(50)
    forest = RegressionForest(n_trees=3, leaf_model="constant", random_state=0).fit(X, y)
    with pytest.raises(InvalidInputError, match="constant"):
        forest.predict_distribution(X)
