"""Every estimator follows the same conventions: declared, checked hyper-parameters; scikit-learn's clone and
GridSearchCV; NotFittedError before fit; equal predictions after save and load; the same bytes on 1 or 2 threads."""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import pytest

from imageforest import (
    ClassificationForest,
    DensityForest,
    InvalidInputError,
    ManifoldForest,
    NotFittedError,
    RegressionForest,
    SemiSupervisedForest,
)
from imageforest.apps.bodyparts.model import BodyPartsForest
from imageforest.imaging import BoxFeatures, ImageClassificationForest, ImageRegressionForest

sklearn = pytest.importorskip("sklearn")
from sklearn.base import clone  # noqa: E402
from sklearn.model_selection import GridSearchCV  # noqa: E402

rng = np.random.default_rng(0)
X = rng.normal(size=(160, 4))
Y_CLASS = (X[:, 0] + 0.3 * X[:, 1] > 0).astype(int)
Y_REG = X[:, 0] * 2.0 + np.sin(X[:, 1])
Y_SEMI = np.where(rng.random(160) < 0.2, Y_CLASS, -1)
Y_SEMI[:2] = [0, 1]

SMALL = {"n_trees": 5, "max_depth": 4, "random_state": 0}


# (estimator class, fit args, a prediction that must survive save/load, GridSearchCV parameter grid or None)
CASES = {
    "classification": (ClassificationForest, (X, Y_CLASS), lambda e: e.predict_proba(X), {"max_depth": [2, 4]}),
    "regression": (RegressionForest, (X, Y_REG), lambda e: e.predict(X), {"max_depth": [2, 4]}),
    "density": (DensityForest, (X,), lambda e: e.score_samples(X), {"max_depth": [2, 3]}),
    "manifold": (ManifoldForest, (X,), lambda e: e.transform(X[:20]), None),
    "semi-supervised": (SemiSupervisedForest, (X, Y_SEMI), lambda e: e.predict_proba(X), None),
}


def fitted(name):
    cls, args, _, _ = CASES[name]
    return cls(**SMALL).fit(*args)


ALL_CLASSES = [c[0] for c in CASES.values()] + [ImageClassificationForest, ImageRegressionForest, BodyPartsForest]


@pytest.mark.parametrize("cls", ALL_CLASSES, ids=lambda c: c.__name__)
def test_every_parameter_is_declared_and_keyword_only_after_the_first(cls):
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    assert set(cls.parameter_constraints) >= {p.name for p in params}
    assert params[0].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params[1:])
    with pytest.raises(TypeError):
        cls(None, 3)  # a second positional argument


@pytest.mark.parametrize("cls", ALL_CLASSES, ids=lambda c: c.__name__)
def test_get_set_params_round_trip_and_clone(cls):
    est = cls(n_trees=7, random_state=3)
    params = est.get_params()
    assert params["n_trees"] == 7 and params["random_state"] == 3
    other = cls().set_params(**params)
    assert other.get_params() == params
    copy = clone(est)
    assert copy is not est and copy.get_params() == params
    with pytest.raises(ValueError):
        est.set_params(no_such_parameter=1)


@pytest.mark.parametrize("name", list(CASES))
def test_a_bad_value_names_the_class_the_parameter_and_the_rule(name):
    cls, args, _, _ = CASES[name]
    for bad in ({"n_trees": 0}, {"max_depth": -1}, {"n_candidates": "most"}, {"random_state": -2},
                {"n_jobs": 0}, {"n_trees": 2.5}):
        with pytest.raises(InvalidInputError, match=f"{cls.__name__}: {next(iter(bad))} must be"):
            cls(**{**SMALL, **bad}).fit(*args)


@pytest.mark.parametrize("name", list(CASES))
def test_not_fitted_before_fit(name):
    cls, _, predict, _ = CASES[name]
    with pytest.raises(NotFittedError):
        predict(cls(**SMALL))
    with pytest.raises(NotFittedError):
        cls(**SMALL).apply(X)


@pytest.mark.parametrize("name", list(CASES))
def test_save_and_load_give_equal_predictions(name, tmp_path: Path):
    cls, _, predict, _ = CASES[name]
    est = fitted(name)
    est.save(tmp_path / "m.npz")
    loaded = cls.load(tmp_path / "m.npz")
    assert np.allclose(predict(est), predict(loaded))
    assert np.array_equal(est.apply(X), loaded.apply(X))


@pytest.mark.parametrize("name", list(CASES))
def test_one_and_two_threads_give_the_same_bytes(name, tmp_path: Path):
    cls, args, _, _ = CASES[name]
    files = []
    for threads in (1, 2):
        cls(**SMALL, n_jobs=threads).fit(*args).save(tmp_path / f"m{threads}.npz")
        files.append((tmp_path / f"m{threads}.npz").read_bytes())
    assert files[0] == files[1]


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c[3] is not None])
def test_grid_search(name):
    """GridSearchCV picks a depth by the estimator's own score (accuracy, R^2, mean log-likelihood)."""
    cls, args, _, grid = CASES[name]
    search = GridSearchCV(cls(n_trees=5, random_state=0, n_jobs=1), grid, cv=3).fit(*args)
    assert search.best_params_["max_depth"] in grid["max_depth"]
    assert np.isfinite(search.best_score_)


def test_image_forest_saves_and_loads(tmp_path: Path):
    img = np.zeros((30, 30), np.float32)
    img[10:20, 10:20] = 100.0
    pts = np.array([[0, y, x] for y in range(0, 30, 3) for x in range(0, 30, 3)], dtype=np.int32)
    labels = (img[pts[:, 1], pts[:, 2]] > 0).astype(int)
    est = ImageClassificationForest(BoxFeatures(max_offset_mm=5, box_size_mm=(1, 3)), **SMALL).fit([img], pts, labels)
    est.save(tmp_path / "m.npz")
    loaded = ImageClassificationForest.load(tmp_path / "m.npz")
    assert np.allclose(est.predict_proba([img], pts), loaded.predict_proba([img], pts))
    with pytest.raises(NotFittedError):
        ImageClassificationForest().predict_proba([img], pts)
