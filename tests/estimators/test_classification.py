"""ClassificationForest against the monograph's claims (Criminisi et al. 2012, ch. 3)."""

import numpy as np
import pytest

from imageforest import ClassificationForest
from imageforest.toy_data import four_clusters, separable_clusters, spirals


def test_max_margin_ramp_across_gap():
    """Sec. 3.4: axis stumps with uniformly drawn thresholds give a posterior that ramps linearly across the gap
    and crosses 0.5 in its middle."""
    gap = (-0.25, 0.25)
    X, y = separable_clusters(100, gap, seed=1)
    forest = ClassificationForest(n_trees=600, max_depth=1, n_candidates=50, n_thresholds=4,
                                  random_state=0).fit(X, y)
    xs = np.linspace(gap[0], gap[1], 41)
    grid = np.c_[xs, np.zeros_like(xs)]
    p1 = forest.predict_proba(grid)[:, 1]
    ramp = (xs - gap[0]) / (gap[1] - gap[0])
    assert np.max(np.abs(p1 - ramp)) < 0.1, "posterior is not a linear ramp across the gap"
    crossing = np.interp(0.5, p1, xs)
    width = gap[1] - gap[0]
    assert abs(crossing - 0.5 * (gap[0] + gap[1])) <= 0.05 * width
    # Outside the gap the stumps agree.
    outside = forest.predict_proba(np.array([[-0.6, 0.0], [0.6, 0.0]]))
    assert outside[0, 0] > 0.99 and outside[1, 1] > 0.99


@pytest.mark.parametrize("weak_learner", ["oblique", "conic"])
def test_uncertainty_grows_away_from_data(weak_learner):
    """Sec. 3.3.4 / Fig. 3.6: with oblique and conic learners, entropy rises with distance from the data."""
    X, y = four_clusters(50, seed=2)
    forest = ClassificationForest(n_trees=200, max_depth=3, weak_learner=weak_learner, n_candidates=50,
                                  random_state=0).fit(X, y)
    near = forest.predict_entropy(X).mean()
    angles = np.linspace(0, 2 * np.pi, 64, endpoint=False) + np.pi / 8
    ring = lambda r: np.c_[r * np.cos(angles), r * np.sin(angles)]  # noqa: E731
    mid = forest.predict_entropy(ring(2.0)).mean()
    far = forest.predict_entropy(ring(5.0)).mean()
    assert near < mid < far, (near, mid, far)
    assert far > near + 0.3


def test_axis_learner_is_overconfident_far_away():
    """Fig. 3.6(b): the axis-aligned forest stays confident in the corners, unlike the conic one."""
    X, y = four_clusters(50, seed=2)
    kw = dict(n_trees=200, max_depth=3, n_candidates=50, random_state=0)
    corner = np.array([[4.0, 4.0], [-4.0, 4.0], [4.0, -4.0], [-4.0, -4.0]])
    axis = ClassificationForest(weak_learner="axis", **kw).fit(X, y).predict_entropy(corner).mean()
    conic = ClassificationForest(weak_learner="conic", **kw).fit(X, y).predict_entropy(corner).mean()
    assert conic > axis


@pytest.mark.parametrize("weak_learner", ["axis", "oblique", "conic"])
def test_four_class_spiral_accuracy(weak_learner):
    X, y = spirals(150, 4, noise=0.03, seed=3)
    Xt, yt = spirals(150, 4, noise=0.03, seed=4)
    forest = ClassificationForest(n_trees=100, weak_learner=weak_learner, n_candidates=10,
                                  random_state=0).fit(X, y)
    assert forest.score(Xt, yt) > 0.9


def test_product_posterior_is_sharper_than_average():
    X, y = spirals(100, 2, noise=0.05, seed=5)
    avg = ClassificationForest(n_trees=30, max_depth=6, random_state=0).fit(X, y)
    prod = ClassificationForest(n_trees=30, max_depth=6, posterior="product", random_state=0).fit(X, y)
    pa, pp = avg.predict_proba(X), prod.predict_proba(X)
    assert np.allclose(pp.sum(axis=1), 1.0)
    assert np.mean(pp.max(axis=1)) > np.mean(pa.max(axis=1))
    # Same trees (same seed): the product only re-weights, the ensemble decision mostly agrees.
    assert np.mean(pp.argmax(1) == pa.argmax(1)) > 0.9


@pytest.mark.parametrize("settings", [
    dict(n_candidates=1, n_thresholds=1),              # extremely randomized (rho = 1)
    dict(structure="fern", max_depth=10),              # random ferns
    dict(bootstrap=True),                              # bagging
    dict(n_thresholds=None),                           # exhaustive thresholds
    dict(two_sided=True, n_thresholds=8),              # two-sided tests
    dict(criterion="gini"),
    dict(bootstrap=True, max_samples=0.5),
])
def test_variants_learn(settings):
    X, y = spirals(150, 2, noise=0.03, seed=6)
    Xt, yt = spirals(150, 2, noise=0.03, seed=7)
    forest = ClassificationForest(n_trees=60, weak_learner="conic", random_state=0, **settings).fit(X, y)
    assert forest.score(Xt, yt) > 0.85


def test_ferns_share_one_test_per_level():
    X, y = spirals(100, 2, seed=8)
    forest = ClassificationForest(n_trees=3, structure="fern", max_depth=4, random_state=0).fit(X, y)
    f = forest.forest_
    tree = f.node_tree()
    split = f.child >= 0
    for t in range(3):
        for d in range(4):
            sel = split & (tree == t) & (f.depth == d)
            if sel.sum() > 1:
                assert np.unique(f.params[sel], axis=0).shape[0] == 1
                assert np.unique(f.thr_hi[sel]).size == 1


def test_class_weight_balanced_rebalances_priors():
    rng = np.random.default_rng(0)
    X = np.r_[rng.normal(0, 1, (950, 2)), rng.normal(1.0, 1, (50, 2))]
    y = np.r_[np.zeros(950, int), np.ones(50, int)]
    plain = ClassificationForest(n_trees=50, max_depth=3, random_state=0).fit(X, y)
    balanced = ClassificationForest(n_trees=50, max_depth=3, class_weight="balanced", random_state=0).fit(X, y)
    assert balanced.predict_proba(X)[:, 1].mean() > 2 * plain.predict_proba(X)[:, 1].mean()
    assert (balanced.predict(X) == 1).sum() > (plain.predict(X) == 1).sum()


def test_string_labels_and_sklearn_conventions():
    X, y = four_clusters(30, seed=0)
    names = np.array(["a", "b", "c", "d"])[y]
    forest = ClassificationForest(n_trees=10, random_state=0).fit(X, names)
    assert list(forest.classes_) == ["a", "b", "c", "d"]
    assert forest.n_features_in_ == 2
    assert set(forest.predict(X)) <= set(names)
    assert forest.apply(X).shape == (X.shape[0], 10)
    assert forest.get_params()["n_trees"] == 10
    forest.set_params(n_trees=5)
    assert forest.n_trees == 5
    imp = forest.feature_importances_
    assert imp.shape == (2,) and np.isclose(imp.sum(), 1.0)
    assert "n_trees=5" in repr(forest)


def test_feature_importances_find_the_informative_feature():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1000, 6))
    y = (X[:, 2] > 0).astype(int)
    imp = ClassificationForest(n_trees=30, random_state=0).fit(X, y).feature_importances_
    assert np.argmax(imp) == 2 and imp[2] > 0.5


def test_sample_weight_zero_removes_points():
    X, y = separable_clusters(50, seed=0)
    y_noisy = y.copy()
    y_noisy[:10] = 1  # mislabelled points ...
    w = np.ones(len(y))
    w[:10] = 0.0      # ... that carry no weight
    forest = ClassificationForest(n_trees=20, random_state=0).fit(X, y_noisy, sample_weight=w)
    assert forest.score(X[10:], y[10:]) == 1.0
