"""Bad input gets a specific exception with a clear message, as scikit-learn users expect."""

import numpy as np
import pytest

from imageforest import ClassificationForest, InvalidInputError, NotFittedError, RegressionForest


@pytest.fixture
def xy():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 3))
    return X, (X[:, 0] > 0).astype(int)


@pytest.mark.parametrize("bad, match", [
    (lambda X: np.where(np.arange(X.size).reshape(X.shape) == 4, np.nan, X), "NaN"),
    (lambda X: np.where(np.arange(X.size).reshape(X.shape) == 4, np.inf, X), "infinity"),
    (lambda X: X[:, 0], "2-D"),
    (lambda X: X[:0], "no samples"),
    (lambda X: X[:, :0], "no features"),
    (lambda X: X[None], "2-D"),
    (lambda X: np.full(X.shape, "a"), "numeric"),
    (lambda X: X * 1e300, "float32"),
])
def test_bad_X(xy, bad, match):
    X, y = xy
    with pytest.raises(InvalidInputError, match=match):
        ClassificationForest(n_trees=2).fit(bad(X), y)


def test_single_class(xy):
    X, _ = xy
    with pytest.raises(InvalidInputError, match="single class"):
        ClassificationForest(n_trees=2).fit(X, np.zeros(len(X)))


def test_length_mismatch(xy):
    X, y = xy
    with pytest.raises(InvalidInputError, match="samples"):
        ClassificationForest(n_trees=2).fit(X, y[:-1])
    with pytest.raises(InvalidInputError, match="samples"):
        RegressionForest(n_trees=2).fit(X, y[:-1].astype(float))


def test_nan_targets(xy):
    X, y = xy
    with pytest.raises(InvalidInputError, match="NaN"):
        RegressionForest(n_trees=2).fit(X, np.where(y > 0, np.nan, 1.0))


def test_predict_before_fit(xy):
    X, _ = xy
    for est in (ClassificationForest(), RegressionForest()):
        with pytest.raises(NotFittedError, match="not fitted"):
            est.predict(X)
    with pytest.raises(NotFittedError):
        ClassificationForest().apply(X)
    with pytest.raises(NotFittedError):
        ClassificationForest().save("x.npz")


def test_feature_count_mismatch(xy):
    X, y = xy
    forest = ClassificationForest(n_trees=2, random_state=0).fit(X, y)
    with pytest.raises(InvalidInputError, match="trained on 3"):
        forest.predict(X[:, :2])


@pytest.mark.parametrize("params, match", [
    (dict(n_trees=0), "n_trees"),
    (dict(weak_learner="spline"), "weak_learner"),
    (dict(n_candidates=0), "n_candidates"),
    (dict(n_candidates="most"), "n_candidates"),
    (dict(n_candidates=1.5), "n_candidates"),
    (dict(n_thresholds=0), "n_thresholds"),
    (dict(structure="fern", n_thresholds=None), "n_thresholds"),
    (dict(min_samples_leaf=0), "min_samples_leaf"),
    (dict(criterion="mse"), "criterion"),
    (dict(posterior="max"), "posterior"),
    (dict(class_weight="often"), "class_weight"),
    (dict(max_samples=-1), "max_samples"),
])
def test_bad_hyper_parameters(xy, params, match):
    X, y = xy
    with pytest.raises(InvalidInputError, match=match):
        ClassificationForest(**{"n_trees": 2, **params}).fit(X, y)


def test_bad_sample_weight(xy):
    X, y = xy
    with pytest.raises(InvalidInputError, match="sample_weight"):
        ClassificationForest(n_trees=2).fit(X, y, sample_weight=-np.ones(len(y)))
    with pytest.raises(InvalidInputError, match="sample_weight"):
        ClassificationForest(n_trees=2).fit(X, y, sample_weight=np.ones(3))


def test_oblique_needs_two_features(xy):
    X, y = xy
    with pytest.raises(InvalidInputError, match="at least 2 features"):
        ClassificationForest(n_trees=2, weak_learner="conic").fit(X[:, :1], y)
