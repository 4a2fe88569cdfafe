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
    online = ClassificationForest(10, online_min_samples=2, online_memory=0, random_state=0)
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


@pytest.mark.parametrize("memory", [0, 16])
def test_online_bytes_depend_on_the_seed_not_the_threads(spiral, tmp_path, memory):
    X, y, _, _ = spiral
    paths = []
    for jobs in (1, 2):
        model = ClassificationForest(6, bootstrap=True, online_memory=memory, random_state=4, n_jobs=jobs)
        for Xc, yc in stream(X, y, 700):
            model.partial_fit(Xc, yc, classes=[0, 1, 2, 3])
        paths.append(tmp_path / f"{jobs}.npz")
        model.save(paths[-1])
    assert paths[0].read_bytes() == paths[1].read_bytes()


@pytest.mark.parametrize("memory", [0, 3, 12])
def test_leaves_count_every_point_once_per_tree(spiral, memory):
    X, y, _, _ = spiral
    model = ClassificationForest(3, online_min_samples=5, online_memory=memory, random_state=0)
    for Xc, yc in stream(X, y, 300):
        model.partial_fit(Xc, yc, classes=[0, 1, 2, 3])
    state = model._online
    leaves = state.child[:state.n_nodes] < 0
    per_tree = np.stack([state.stats[:state.n_nodes][leaves & (state.node_tree[:state.n_nodes] == t)].sum(axis=0)
                         for t in range(3)])
    assert np.allclose(per_tree, np.bincount(y, minlength=4)[None, :], rtol=1e-5)
    # The exported forest, completed below the growing leaves when they keep points, counts them all too.
    forest, stats = state.export()
    exported = np.stack([stats[forest.leaf_tree == t].sum(axis=0) for t in range(3)])
    assert np.allclose(exported, per_tree, rtol=1e-5)


def test_kept_points_are_held_once_and_forgotten_when_no_leaf_keeps_them(spiral):
    X, y, _, _ = spiral
    model = ClassificationForest(4, online_min_samples=8, online_memory=8, max_depth=9, bootstrap=True,
                                 random_state=1)
    for Xc, yc in stream(X, y, 250):
        model.partial_fit(Xc, yc, classes=[0, 1, 2, 3])
    state, store = model._online, model._online.store
    growing = np.flatnonzero((state.child[:state.n_nodes] < 0) & (state.slot[:state.n_nodes] >= 0))
    slots = state.slot[growing]
    held = np.concatenate([state.kept[s, :state.n_kept[s]] for s in slots])
    assert held.size and np.all(state.n_kept[slots] <= 8)
    refs = np.bincount(held, minlength=store.n_used)
    assert np.array_equal(refs, store.refs[:store.n_used])  # every hold counted once, nothing dangling
    assert store.n_held == np.count_nonzero(refs)
    assert np.all(store.refs[store.free] == 0) and np.unique(store.free).size == store.free.size
    assert store.n_held < 4 * len(X)  # leaves at the depth limit and full leaves let points go
    # A kept point is the point that arrived: its inputs and label are in the store.
    pos = np.flatnonzero(np.all(X == store.x[held[0]], axis=1))
    assert pos.size and np.argmax(store.row[held[0]]) == y[pos[0]]


def test_memory_brings_the_online_forest_to_the_batch_forest(spiral):
    X, y, Xt, yt = spiral
    scores = {}
    for memory in (0, 32):
        model = ClassificationForest(10, online_min_samples=32, online_memory=memory, random_state=0)
        for Xc, yc in stream(X, y, 250):
            model.partial_fit(Xc, yc, classes=[0, 1, 2, 3])
        scores[memory] = (model.score(X, y), model.score(Xt, yt))
    batch = ClassificationForest(10, random_state=0).fit(X, y)
    assert scores[32][0] > 0.99  # grown down to pure leaves, as the batch forest is
    assert scores[0][0] < 0.95  # leaves of up to 31 points do not fit the training set
    assert scores[32][1] > scores[0][1] + 0.02
    assert scores[32][1] > batch.score(Xt, yt) - 0.03


def test_the_forest_is_exported_when_first_read(spiral):
    X, y, Xt, _ = spiral
    model = ClassificationForest(4, random_state=0).partial_fit(X[:500], y[:500], classes=[0, 1, 2, 3])
    assert "forest_" not in model.__dict__ and "leaf_posterior_" not in model.__dict__
    first = model.predict_proba(Xt)
    assert "forest_" in model.__dict__
    model.partial_fit(X[500:1000], y[500:1000])
    assert "forest_" not in model.__dict__  # the export of the last call is dropped, not served stale
    second = model.predict_proba(Xt)
    assert not np.array_equal(first, second)
    unread = ClassificationForest(4, random_state=0).partial_fit(X[:500], y[:500], classes=[0, 1, 2, 3])
    unread.partial_fit(X[500:1000], y[500:1000])
    assert np.array_equal(unread.predict_proba(Xt), second)  # reading in between changes nothing
    with pytest.raises(AttributeError, match="no_such_thing"):
        _ = model.no_such_thing
    assert not hasattr(RegressionForest(2, leaf_model="constant").partial_fit(X[:300], y[:300]), "leaf_cov_")


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
    Xt = rng.random((1000, 3)).astype(np.float32)
    yt = np.stack([np.sin(6 * Xt[:, 0]) + Xt[:, 1], 100.0 + 5 * Xt[:, 2]], axis=1)
    scores = []
    for memory in (0, 24):
        model = RegressionForest(10, online_min_samples=12, online_memory=memory, random_state=0)
        for Xc, yc in stream(X, y, 500):
            model.partial_fit(Xc, yc)
        scores.append(model.score(Xt, yt))
        dist = model.predict_distribution(Xt[:5])
        assert dist.mean().shape == (5, 2) and np.all(dist.std() > 0)
    assert scores[0] > 0.8
    assert scores[1] > scores[0]


@pytest.mark.parametrize(("make", "call", "message"), [
    (lambda: ClassificationForest(2), lambda m, X, y: m.partial_fit(X, y), "needs classes="),
    (lambda: ClassificationForest(2), lambda m, X, y: m.partial_fit(X, y, classes=[0, 1]), "not given"),
    (lambda: ClassificationForest(2, weak_learner="oblique"),
     lambda m, X, y: m.partial_fit(X, y, classes=[0, 1, 2, 3]), "weak_learner='axis'"),
    (lambda: ClassificationForest(2, class_weight="balanced"),
     lambda m, X, y: m.partial_fit(X, y, classes=[0, 1, 2, 3]), "class_weight"),
    (lambda: RegressionForest(2, leaf_model="linear"), lambda m, X, y: m.partial_fit(X, y), "leaf model"),
    (lambda: RegressionForest(2), lambda m, X, y: m.partial_fit(X, y, classes=[0, 1]), "takes no classes"),
    (lambda: ClassificationForest(2, online_memory=-1),
     lambda m, X, y: m.partial_fit(X, y, classes=[0, 1, 2, 3]), "online_memory must be an integer >= 0"),
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
