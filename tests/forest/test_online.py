"""Online forests: `partial_fit` grows trees from a stream, and the result predicts, saves and loads like any forest."""

from __future__ import annotations

import numpy as np
import pytest

from imageforest import ClassificationForest, RegressionForest
from imageforest.exceptions import InvalidInputError
from imageforest.toy_data import spirals


def stream(X, y, size):
    for a in range(0, len(X), size):
        yield X[a:a + size], y[a:a + size]


@pytest.fixture(scope="module")
def spiral():
    X, y = spirals(1000, seed=0)
    Xt, yt = spirals(250, seed=1)
    order = np.random.default_rng(0).permutation(len(X))  # a stream mixes the classes
    return X[order].astype(np.float32), y[order], Xt.astype(np.float32), yt


def test_online_classification_learns_from_a_stream(spiral):
    X, y, Xt, yt = spiral
    online = ClassificationForest(10, online_min_samples=2, random_state=0)
    scores = []
    for Xc, yc in stream(X, y, 500):
        online.partial_fit(Xc, yc, classes=np.unique(y))
        scores.append(online.score(Xt, yt))
    batch = ClassificationForest(10, random_state=0).fit(X, y).score(Xt, yt)
    assert scores[-1] > scores[0] + 0.05  # more points, better trees
    assert scores[-1] > batch - 0.08
    assert online.forest_.max_depth > 5
    proba = online.predict_proba(Xt)
    assert np.allclose(proba.sum(axis=1), 1.0, atol=1e-5)


def test_online_forest_saves_loads_and_predicts_like_any_other(spiral, tmp_path):
    X, y, Xt, _ = spiral
    online = ClassificationForest(5, random_state=0).partial_fit(X[:1000], y[:1000], classes=[0, 1, 2, 3])
    online.partial_fit(X[1000:2000], y[1000:2000])
    online.save(tmp_path / "online.npz")
    loaded = ClassificationForest.load(tmp_path / "online.npz")
    assert np.array_equal(loaded.predict_proba(Xt), online.predict_proba(Xt))
    with pytest.raises(InvalidInputError, match="grown by fit or loaded"):
        loaded.partial_fit(X[:10], y[:10])


def test_online_bytes_depend_on_the_seed_not_the_threads(spiral, tmp_path):
    X, y, _, _ = spiral
    paths = []
    for jobs in (1, 2):
        model = ClassificationForest(6, bootstrap=True, random_state=4, n_jobs=jobs)
        for Xc, yc in stream(X, y, 700):
            model.partial_fit(Xc, yc, classes=[0, 1, 2, 3])
        paths.append(tmp_path / f"{jobs}.npz")
        model.save(paths[-1])
    assert paths[0].read_bytes() == paths[1].read_bytes()


def test_leaves_count_every_point_once_per_tree(spiral):
    X, y, _, _ = spiral
    model = ClassificationForest(3, online_min_samples=5, random_state=0)
    for Xc, yc in stream(X, y, 300):
        model.partial_fit(Xc, yc, classes=[0, 1, 2, 3])
    state = model._online
    leaves = state.child[:state.n_nodes] < 0
    per_tree = np.stack([state.stats[:state.n_nodes][leaves & (state.node_tree[:state.n_nodes] == t)].sum(axis=0)
                         for t in range(3)])
    assert np.allclose(per_tree, np.bincount(y, minlength=4)[None, :], rtol=1e-5)


def test_fit_after_partial_fit_starts_afresh(spiral):
    X, y, _, _ = spiral
    model = ClassificationForest(5, random_state=0).partial_fit(X[:500], y[:500], classes=[0, 1, 2, 3])
    model.fit(X, y)
    assert "_online" not in model.__dict__
    with pytest.raises(InvalidInputError, match="grown by fit"):
        model.partial_fit(X[:10], y[:10])


def test_online_regression_tracks_the_function():
    rng = np.random.default_rng(0)
    X = rng.random((4000, 3)).astype(np.float32)
    y = np.stack([np.sin(6 * X[:, 0]) + X[:, 1], 100.0 + 5 * X[:, 2]], axis=1) + rng.normal(0, 0.05, (4000, 2))
    model = RegressionForest(10, online_min_samples=5, random_state=0)
    for Xc, yc in stream(X, y, 500):
        model.partial_fit(Xc, yc)
    Xt = rng.random((1000, 3)).astype(np.float32)
    yt = np.stack([np.sin(6 * Xt[:, 0]) + Xt[:, 1], 100.0 + 5 * Xt[:, 2]], axis=1)
    assert model.score(Xt, yt) > 0.8
    dist = model.predict_distribution(Xt[:5])
    assert dist.mean().shape == (5, 2) and np.all(dist.std() > 0)


@pytest.mark.parametrize(("make", "call", "message"), [
    (lambda: ClassificationForest(2), lambda m, X, y: m.partial_fit(X, y), "needs classes="),
    (lambda: ClassificationForest(2), lambda m, X, y: m.partial_fit(X, y, classes=[0, 1]), "not given"),
    (lambda: ClassificationForest(2, weak_learner="oblique"),
     lambda m, X, y: m.partial_fit(X, y, classes=[0, 1, 2, 3]), "weak_learner='axis'"),
    (lambda: ClassificationForest(2, class_weight="balanced"),
     lambda m, X, y: m.partial_fit(X, y, classes=[0, 1, 2, 3]), "class_weight"),
    (lambda: RegressionForest(2, leaf_model="linear"), lambda m, X, y: m.partial_fit(X, y), "leaf model"),
    (lambda: RegressionForest(2), lambda m, X, y: m.partial_fit(X, y, classes=[0, 1]), "takes no classes"),
])
def test_bad_online_calls_are_named(spiral, make, call, message):
    X, y, _, _ = spiral
    with pytest.raises(InvalidInputError, match=message):
        call(make(), X[:50], y[:50])


def test_later_calls_must_keep_classes_and_features(spiral):
    X, y, _, _ = spiral
    model = ClassificationForest(2, random_state=0).partial_fit(X[:100], y[:100], classes=[0, 1, 2, 3])
    with pytest.raises(InvalidInputError, match="classes differ"):
        model.partial_fit(X[:10], y[:10], classes=[0, 1, 2, 3, 4])
    with pytest.raises(InvalidInputError, match="features"):
        model.partial_fit(X[:10, :1], y[:10])
    with pytest.raises(InvalidInputError, match="not given"):
        model.partial_fit(X[:2], np.array([0, 7]))
