"""Consistent regression forests (Denil et al. 2014; Biau et al. 2008; Biau 2012): how each variant splits, which
points fit the leaves, determinism, model files and bad parameters."""

from __future__ import annotations

import numpy as np
import pytest

from imageforest import RegressionForest
from imageforest.exceptions import InvalidInputError
from imageforest.forest.consistent import ConsistentSettings, grow_consistent


def friedman(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.random((n, 5)).astype(np.float32)
    y = 10 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20 * (X[:, 2] - 0.5) ** 2 + 10 * X[:, 3] + 5 * X[:, 4]
    return X, y + rng.normal(0, 1, n)


def grow(X, y, **kw):
    settings = ConsistentSettings(**{"n_trees": 3, "n_candidates": 2, "min_samples_leaf": 5, **kw})
    return grow_consistent(np.ascontiguousarray(X.T), y[:, None], np.ones(len(X)), settings,
                           np.random.default_rng(0))


def tree_leaf_points(grown, tree: int) -> list[np.ndarray]:
    f = grown.forest
    leaves = np.flatnonzero(f.leaf_tree == tree)
    return [grown.order[grown.leaf_start[leaf]:grown.leaf_end[leaf]] for leaf in leaves]


@pytest.mark.parametrize("split", ["tree", "forest"])
def test_denil_leaves_hold_only_estimation_points_and_at_least_k(split):
    X, y = friedman(600)
    grown = grow(X, y, variant="denil", data_split=split, min_samples_leaf=7)
    per_tree = []
    for t in range(3):
        members = tree_leaf_points(grown, t)
        assert min(len(m) for m in members) >= 7
        flat = np.concatenate(members)
        assert np.unique(flat).size == flat.size  # leaves of one tree are disjoint
        assert 0.35 * len(X) < flat.size < 0.65 * len(X)  # about half the points estimate, the rest structure
        per_tree.append(np.sort(flat))
    same = all(np.array_equal(per_tree[0], p) for p in per_tree[1:])
    assert same == (split == "forest")


def test_without_data_split_every_point_fits_the_leaves():
    X, y = friedman(300)
    grown = grow(X, y, variant="denil", data_split=None)
    for t in range(3):
        assert np.array_equal(np.sort(np.concatenate(tree_leaf_points(grown, t))), np.arange(300))


@pytest.mark.parametrize("variant", ["biau08", "biau12"])
def test_biau_forests_grow_to_n_over_k_leaves(variant):
    X, y = friedman(400)
    grown = grow(X, y, variant=variant, data_split=None, min_samples_leaf=8)
    assert np.array_equal(np.bincount(grown.forest.leaf_tree), [50, 50, 50])


def test_biau12_cuts_cells_at_their_midpoints():
    X, y = friedman(400)
    grown = grow(X, y, variant="biau12", data_split=None, n_trees=1)
    f = grown.forest
    root = int(f.tree_root[0])
    d = int(f.params[root, 0])
    assert f.thr_hi[root] == np.float32((float(X[:, d].min()) + float(X[:, d].max())) / 2)
    left = int(f.child[root])
    if f.child[left] >= 0 and int(f.params[left, 0]) == d:  # the left cell is [min, midpoint] along d
        assert f.thr_hi[left] == np.float32((float(X[:, d].min()) + float(f.thr_hi[root])) / 2)


def test_denil_searches_only_inside_the_range_of_m_points():
    X, y = friedman(300)
    grown = grow(X, y, variant="denil", data_split=None, range_points=1)  # one point spans no range
    assert grown.forest.n_nodes == 3 and np.all(grown.forest.child < 0)


def test_empty_cells_predict_from_an_ancestor():
    rng = np.random.default_rng(1)
    X = rng.random((60, 2)).astype(np.float32)
    y = 10.0 + rng.random(60)
    for variant in ("biau08", "biau12"):
        model = RegressionForest(20, variant=variant, min_samples_leaf=1, leaf_model="constant",
                                 random_state=0).fit(X, y)
        pred = model.predict(rng.random((500, 2)))
        assert pred.min() >= 10.0 and pred.max() <= 11.0


@pytest.mark.parametrize("variant", ["denil", "biau08", "biau12"])
def test_variants_learn_and_are_deterministic_whatever_the_threads(variant, tmp_path):
    X, y = friedman(1500)
    Xt, yt = friedman(500, seed=1)
    one = RegressionForest(8, variant=variant, n_candidates=1 / 3, min_samples_leaf=5, random_state=3,
                           n_jobs=1).fit(X, y)
    two = RegressionForest(8, variant=variant, n_candidates=1 / 3, min_samples_leaf=5, random_state=3,
                           n_jobs=2).fit(X, y)
    one.save(tmp_path / "one.npz")
    two.save(tmp_path / "two.npz")
    assert (tmp_path / "one.npz").read_bytes() == (tmp_path / "two.npz").read_bytes()
    loaded = RegressionForest.load(tmp_path / "one.npz")
    assert np.array_equal(loaded.predict(Xt), one.predict(Xt))
    assert loaded.variant == variant
    assert one.score(Xt, yt) > 0.4  # far better than the mean (R^2 0)


def test_honest_forest_beats_biau_and_gets_better_with_more_data():
    X, y = friedman(4000)
    Xt, yt = friedman(1000, seed=1)
    scores = {}
    for variant in ("denil", "biau08"):
        scores[variant] = RegressionForest(20, variant=variant, n_candidates=2, min_samples_leaf=5,
                                           random_state=0).fit(X, y).score(Xt, yt)
    small = RegressionForest(20, variant="denil", n_candidates=2, min_samples_leaf=5,
                             random_state=0).fit(X[:400], y[:400]).score(Xt, yt)
    assert scores["denil"] > scores["biau08"]
    assert scores["denil"] > small + 0.05


@pytest.mark.parametrize(("kw", "message"), [
    ({"data_split": "tree"}, "data_split needs variant"),
    ({"variant": "denil", "bootstrap": True}, "bootstrap=False"),
    ({"variant": "denil", "weak_learner": "oblique"}, "weak_learner='axis'"),
    ({"variant": "biau12", "max_samples": 0.5}, "max_samples=None"),
    ({"variant": "honest"}, "variant must be one of"),
    ({"variant": "denil", "data_split": "half"}, "data_split must be"),
    ({"variant": "denil", "range_points": 0}, "range_points must be"),
])
def test_bad_parameters_are_named(kw, message):
    X, y = friedman(100)
    with pytest.raises(InvalidInputError, match=message):
        RegressionForest(2, **kw).fit(X, y)


def test_a_data_split_needs_enough_points_for_both_halves():
    X, y = friedman(30)
    with pytest.raises(InvalidInputError, match="structure and estimation"):
        RegressionForest(2, variant="denil", min_samples_leaf=10).fit(X, y)
    RegressionForest(2, variant="denil", data_split=None, min_samples_leaf=10).fit(X, y)
