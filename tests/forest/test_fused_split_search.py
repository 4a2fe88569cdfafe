"""The fused split search for axis-aligned learners must grow exactly the trees of the generic path."""

import numpy as np
import pytest

from imageforest import ClassificationForest, RegressionForest
from imageforest.forest import subtree_growth, trainer
from imageforest.forest.weak_learners import VectorFeatures

RNG = np.random.default_rng(3)
X = RNG.standard_normal((1500, 12)).astype(np.float32)
Y_CLASS = (X[:, 0] + 0.5 * X[:, 3] ** 2 + 0.3 * RNG.standard_normal(1500) > 0.4).astype(int) + (X[:, 5] > 1)
# twelve classes: the generic path bins and scores each node over the classes it holds, the fused one over all
Y_MANY = np.digitize(X[:, 0] + 0.5 * X[:, 1] + 0.2 * RNG.standard_normal(1500), np.linspace(-2.0, 2.0, 11))
Y_REG = np.stack([np.sin(X[:, 0]) + X[:, 1], X[:, 2] * X[:, 3]], axis=1)


@pytest.fixture(autouse=True)
def level_wise_to_the_leaves(monkeypatch):
    """These tests compare level-wise paths: no node is handed to depth-first subtree growth (whose own random
    draws make other trees)."""
    monkeypatch.setattr(subtree_growth, "SUBTREE_POINTS", 0)


CASES = [
    (ClassificationForest, Y_CLASS, dict(n_thresholds=1, n_candidates="sqrt")),
    # two classes, one threshold: extremely randomized trees take the register-count scan
    (ClassificationForest, (Y_CLASS > 0).astype(int), dict(n_thresholds=1, n_candidates="sqrt")),
    (ClassificationForest, (Y_CLASS > 0).astype(int), dict(n_thresholds=1, n_candidates=3, criterion="gini")),
    (ClassificationForest, Y_CLASS, dict(n_thresholds=8, n_candidates=4, min_samples_leaf=5, criterion="gini")),
    (ClassificationForest, Y_CLASS, dict(n_thresholds=4, n_candidates=3, bootstrap=True, max_depth=6)),
    (ClassificationForest, Y_CLASS, dict(n_thresholds=3, n_candidates=2, two_sided=True)),
    (ClassificationForest, Y_MANY, dict(n_thresholds=8, n_candidates=4)),
    (ClassificationForest, Y_MANY, dict(n_thresholds=6, n_candidates=3, criterion="gini", two_sided=True)),
    (RegressionForest, Y_REG[:, 0], dict(n_thresholds=1, n_candidates=1.0, criterion="squared_error",
                                         leaf_model="constant")),
    (RegressionForest, Y_REG[:, 1], dict(n_thresholds=6, n_candidates=4, min_samples_leaf=3)),  # Gaussian
    (RegressionForest, Y_REG, dict(n_thresholds=5, n_candidates=4)),
]


@pytest.mark.parametrize("weighted", [True, False])
@pytest.mark.parametrize("cls, y, settings", CASES)
def test_fused_path_grows_the_generic_paths_trees(cls, y, settings, weighted, monkeypatch):
    weights = RNG.random(X.shape[0]) + 0.5 if weighted else None
    calls = []
    search = trainer.row_gain_table
    monkeypatch.setattr(trainer, "row_gain_table", lambda *a: calls.append(1) or search(*a))
    fused = cls(n_trees=4, random_state=7, **settings).fit(X, y, sample_weight=weights)
    assert calls, "the axis family should take the fused path"
    monkeypatch.setattr(VectorFeatures, "response_matrix", lambda self, data: None)
    generic = cls(n_trees=4, random_state=7, **settings).fit(X, y, sample_weight=weights)
    a, b = fused.forest_, generic.forest_
    assert np.array_equal(a.params, b.params)
    assert np.array_equal(a.thr_lo, b.thr_lo) and np.array_equal(a.thr_hi, b.thr_hi)
    assert np.array_equal(a.child, b.child)
    assert np.allclose(a.gain, b.gain, rtol=1e-6)
    out_a = fused.predict_proba(X) if cls is ClassificationForest else fused.predict(X)
    out_b = generic.predict_proba(X) if cls is ClassificationForest else generic.predict(X)
    assert np.array_equal(out_a, out_b)


@pytest.mark.parametrize("two_sided", [False, True])
def test_compact_axis_table_walks_like_the_generic_table(two_sided):
    from imageforest.forest.weak_learners import _apply_kernel

    forest = ClassificationForest(n_trees=6, n_thresholds=4, n_candidates=3, two_sided=two_sided,
                                  random_state=2).fit(X, Y_CLASS)
    fam, arrays = forest.family_, forest.forest_
    table, roots = arrays.packed()
    generic = _apply_kernel(fam.code, X, fam.mean, fam.inv_std, table, roots)
    assert np.array_equal(forest.apply(X), generic)
    if two_sided:
        assert np.isfinite(arrays.thr_lo).any() and np.isfinite(arrays.thr_hi[np.isfinite(arrays.thr_lo)]).any()


def test_interleaved_walk_handles_every_block_and_lane_remainder():
    """Points descend in blocks of WALK_BLOCK, WALK_LANES at a time: counts that leave lanes or blocks part-filled
    must reach the same leaves and averages as the one-point-at-a-time generic walk."""
    from imageforest.forest.leaf_models import tree_average
    from imageforest.forest.weak_learners import WALK_BLOCK, WALK_LANES, _apply_kernel

    forest = ClassificationForest(n_trees=4, n_thresholds=2, n_candidates=3, random_state=5).fit(X, Y_CLASS)
    fam, arrays = forest.family_, forest.forest_
    table, roots = arrays.packed()
    big = np.concatenate([X, X[::-1]])[: 2 * WALK_BLOCK + 3]
    for n in (1, WALK_LANES - 1, WALK_LANES + 1, WALK_BLOCK, WALK_BLOCK + 1, 2 * WALK_BLOCK + 3):
        pts = np.ascontiguousarray(big[:n])
        leaves = forest.apply(pts)
        assert np.array_equal(leaves, _apply_kernel(fam.code, pts, fam.mean, fam.inv_std, table, roots))
        assert np.array_equal(forest.predict_proba(pts), tree_average(leaves, forest.leaf_posterior_))


def _structure(est):
    f = est.forest_
    return f.params, f.thr_lo, f.thr_hi, f.child


def test_fused_path_grows_the_generic_trees_for_density_and_semi_supervised(monkeypatch):
    from imageforest import DensityForest, SemiSupervisedForest

    y_partial = np.where(RNG.random(X.shape[0]) < 0.05, Y_CLASS, -1)
    fits = [lambda: DensityForest(n_trees=3, max_depth=5, random_state=4).fit(X[:, :3]),
            lambda: SemiSupervisedForest(n_trees=3, max_depth=6, random_state=4).fit(X[:, :4], y_partial)]
    fused = [_structure(fit()) for fit in fits]
    monkeypatch.setattr(VectorFeatures, "response_matrix", lambda self, data: None)
    generic = [_structure(fit()) for fit in fits]
    for a, b in zip(fused, generic, strict=True):
        for x, y in zip(a, b, strict=True):
            assert np.array_equal(x, y)


def test_tie_broken_argmax_picks_uniformly_among_ties():
    from imageforest.forest.trainer import _tie_broken_argmax

    rng = np.random.default_rng(0)
    table = np.round(rng.random((4000, 6)) * 2) / 2
    table[rng.random(table.shape) < 0.2] = -np.inf
    table[::40] = -np.inf
    u = rng.random(4000)
    best = table.max(axis=1)
    tied = (table >= (best - 1e-9 * np.abs(best))[:, None]) & np.isfinite(table)
    n_tied = tied.sum(axis=1)
    k = np.minimum((u * n_tied).astype(np.int64), np.maximum(n_tied - 1, 0))
    expected = np.argmax(np.cumsum(tied, axis=1) > k[:, None], axis=1)
    assert np.array_equal(_tie_broken_argmax(table, u), expected)
    picks = _tie_broken_argmax(np.zeros((6000, 3)), rng.random(6000))
    assert np.all(np.abs(np.bincount(picks, minlength=3) / 6000 - 1 / 3) < 0.03)


def test_fused_leaf_average_equals_apply_then_average():
    from imageforest.forest.leaf_models import tree_average

    clf = ClassificationForest(n_trees=5, n_thresholds=3, random_state=1).fit(X, Y_CLASS)
    assert np.array_equal(clf.predict_proba(X), tree_average(clf.apply(X), clf.leaf_posterior_))
    reg = RegressionForest(n_trees=5, n_thresholds=3, leaf_model="constant", random_state=1).fit(X, Y_REG)
    assert np.array_equal(reg.predict(X), tree_average(reg.apply(X), reg.leaf_mean_))


def test_node_tables_grow_past_their_bound_and_keep_rows():
    from imageforest.forest.trainer import _Tables

    t = _Tables(2, a=np.int32, b=(np.float64, 2))
    t.put(0, a=np.array([1, 2, 3]), b=np.ones((3, 2)))
    t.put(3, a=np.array([4]), b=7.0)
    head = t.head(4)
    assert head["a"].tolist() == [1, 2, 3, 4] and head["a"].dtype == np.int32
    assert head["b"].tolist() == [[1, 1], [1, 1], [1, 1], [7, 7]]


def test_level_rows_drawn_in_pieces_are_the_single_call():
    """A large level draws its candidates and thresholds chunk by chunk: the same numbers, and the generator left
    where one call would leave it."""
    from imageforest.forest.trainer import LevelRows

    def draw(g, n):
        return g.random((n, 3, 2))

    whole_rng, lazy_rng = np.random.default_rng(11), np.random.default_rng(11)
    whole = draw(whole_rng, 40)
    after = whole_rng.random(5)
    rows = LevelRows(lazy_rng, 40, draw, 6)
    assert np.array_equal(lazy_rng.random(5), after)
    for sets in (np.arange(0, 7), np.arange(5, 12), np.array([12, 12, 30]), np.arange(31, 40)):
        assert np.array_equal(rows.rows(sets), whole[sets])
    with pytest.raises(RuntimeError):
        rows.rows(np.arange(0, 3))
    assert np.array_equal(LevelRows(np.random.default_rng(11), 40, draw, None).rows(np.arange(3, 9)), whole[3:9])
    philox = np.random.Generator(np.random.Philox(11))  # jumps in blocks of four draws: drawn whole
    other = np.random.Generator(np.random.Philox(11))
    assert np.array_equal(LevelRows(philox, 40, draw, 6).rows(np.arange(2, 5)), draw(other, 40)[2:5])


@pytest.mark.parametrize("case", [0, 1, 6, 8, 10])
def test_fused_search_in_small_pieces_grows_the_same_trees(case, monkeypatch):
    """A deep level is searched a bounded number of pairs at a time, its candidates and thresholds drawn piece by
    piece: the trees must be those of one piece per level."""
    cls, y, settings = CASES[case]
    whole = cls(n_trees=3, random_state=11, **settings).fit(X, y)
    monkeypatch.setattr(trainer, "FUSED_PAIRS", 7)
    pieces = cls(n_trees=3, random_state=11, **settings).fit(X, y)
    for a, b in zip(_structure(whole), _structure(pieces), strict=True):
        assert np.array_equal(a, b)
