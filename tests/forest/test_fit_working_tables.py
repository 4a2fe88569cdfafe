"""The fit's working tables: no table of unit weights where no kernel reads one, leaves renumbered in place, the
apply table built on first use. Each must leave the forest and its leaf models exactly as a full table would."""

import copy

import numpy as np
import pytest

import imageforest.estimators.base as base
from imageforest import ClassificationForest, DensityForest, RegressionForest
from imageforest.forest import subtree_growth, trainer
from imageforest.forest.leaf_models import class_histograms, gaussian_leaves
from imageforest.forest.objectives import Objective
from imageforest.forest.weak_learners import VectorFeatures

RNG = np.random.default_rng(11)
X = RNG.standard_normal((1500, 6)).astype(np.float32)
Y = (X[:, 0] + 0.3 * RNG.standard_normal(1500) > 0).astype(int) + (X[:, 1] > 0.7)
Y_REG = np.sin(X[:, 0]) + X[:, 1] * X[:, 2]


def _grown(monkeypatch, est, X, y, sample_weight=None):
    """The GrownForest behind est.fit(X, y) (the estimator is fitted as usual)."""
    seen = []

    def keep(*args, grow=trainer.grow_forest, **kwargs):
        seen.append(grow(*args, **kwargs))
        return seen[-1]

    monkeypatch.setattr(base, "grow_forest", keep)
    est.fit(X, y, sample_weight=sample_weight)
    return seen[0]


@pytest.mark.parametrize("make, y", [
    (lambda: ClassificationForest(n_trees=4, n_thresholds=1, random_state=0), Y),
    (lambda: ClassificationForest(n_trees=4, n_thresholds=5, criterion="gini", random_state=0), Y),
    (lambda: RegressionForest(n_trees=4, n_thresholds=1, criterion="squared_error", random_state=0), Y_REG),
    (lambda: RegressionForest(n_trees=4, n_thresholds=3, random_state=0), Y_REG),
])
def test_unit_weights_hold_no_table_and_read_as_ones(make, y, monkeypatch):
    grown = _grown(monkeypatch, make(), X, y)
    assert grown.position_weights is None
    assert grown.wts.shape == grown.order.shape and np.all(grown.wts == 1.0)
    assert grown.wts is grown.wts  # made once


@pytest.mark.parametrize("kwargs, weights", [
    (dict(bootstrap=True), None),
    (dict(), np.arange(1500) % 3 + 1.0),
    (dict(growth="alternating", loss="tangent", max_depth=5), None),
])
def test_bagging_sample_weights_and_global_losses_keep_their_weights(kwargs, weights, monkeypatch):
    grown = _grown(monkeypatch, ClassificationForest(n_trees=3, random_state=0, **kwargs), X, Y, weights)
    assert grown.position_weights is not None and grown.position_weights.shape == grown.order.shape


def test_bootstrap_counts_are_held_as_bytes_and_read_as_float64(monkeypatch):
    grown = _grown(monkeypatch, ClassificationForest(n_trees=3, n_thresholds=None, bootstrap=True, random_state=0),
                   X, Y)
    counts = grown.position_weights
    assert counts.dtype == np.uint8 and counts.min() >= 1
    assert grown.wts.dtype == np.float64 and np.array_equal(grown.wts, counts) and grown.wts is grown.wts
    weighted = _grown(monkeypatch, ClassificationForest(n_trees=3, bootstrap=True, random_state=0), X, Y,
                      np.arange(1500) % 3 + 0.5)
    assert weighted.position_weights.dtype == np.float64  # sample weights times counts are not integers


def test_counts_beyond_a_byte_turn_the_table_to_float32():
    """Many more draws than points (300 per point here) give counts a byte cannot hold."""
    settings = trainer.GrowthSettings(n_trees=3, n_candidates=1, n_thresholds=None, bootstrap=True,
                                      max_samples=300 * 50)
    order, wts, bounds = trainer._initial_samples(50, np.ones(50), settings, np.random.default_rng(0))
    assert wts.dtype == np.float32 and wts.max() > 255 and wts.sum() == 3 * 300 * 50
    assert np.array_equal(bounds, [0, 50, 100, 150]) and np.array_equal(np.sort(order[:50]), np.arange(50))


def test_bootstrap_forests_grow_the_same_from_byte_and_float64_counts(monkeypatch):
    """Kernels sum the counts in float64: the byte table grows the bytes a float64 one would."""
    # one configuration: each compiles its kernels' float64-count variants, seconds apiece on a fresh install
    makes = ((lambda: ClassificationForest(n_trees=2, n_thresholds=None, bootstrap=True, random_state=4), Y),)
    fitted = [make().fit(X, y) for make, y in makes]

    def float64_counts(*args, draw=trainer._initial_samples):
        order, wts, bounds = draw(*args)
        return order, wts.astype(np.float64), bounds

    monkeypatch.setattr(trainer, "_initial_samples", float64_counts)
    for (make, y), a in zip(makes, fitted, strict=True):
        b = make().fit(X, y)
        for name in ("child", "thr_hi", "params", "weight"):
            np.testing.assert_array_equal(getattr(a.forest_, name), getattr(b.forest_, name))
        table = "leaf_posterior_" if hasattr(a, "leaf_posterior_") else "leaf_mean_"
        np.testing.assert_array_equal(getattr(a, table), getattr(b, table))


def test_fits_that_read_features_only_hold_one_copy_of_the_data(monkeypatch):
    """Every-threshold fits take X feature-major at once: the trainer's feature-major matrix is then that copy."""
    shared = []

    def spy(self, data, read=VectorFeatures.training_data):
        out = read(self, data)
        shared.append(np.shares_memory(out, data))
        return out

    monkeypatch.setattr(VectorFeatures, "training_data", spy)
    X64 = X.astype(np.float64)
    a = ClassificationForest(n_trees=2, n_thresholds=None, bootstrap=True, random_state=0).fit(X64, Y)
    ClassificationForest(n_trees=2, n_thresholds=4, random_state=0).fit(X64, Y)  # the fused search reads both
    RegressionForest(n_trees=2, n_thresholds=None, leaf_model="linear", random_state=0).fit(X64, Y_REG)  # rows
    assert shared == [True, False, False]
    b = ClassificationForest(n_trees=2, n_thresholds=None, bootstrap=True, random_state=0).fit(
        np.ascontiguousarray(X), Y)
    np.testing.assert_array_equal(a.predict_proba(X), b.predict_proba(X))


def test_forests_without_a_weight_table_equal_forests_with_unit_sample_weights():
    """All-one sample weights given as weights (a table) and as nothing (no table) grow the same bytes."""
    for make, y in ((lambda: ClassificationForest(n_trees=4, n_thresholds=1, random_state=2), Y),
                    (lambda: RegressionForest(n_trees=4, criterion="squared_error", random_state=2), Y_REG)):
        a, b = make().fit(X, y), make().fit(X, y, sample_weight=np.ones(X.shape[0]))
        for name in ("child", "thr_hi", "params", "weight"):
            np.testing.assert_array_equal(getattr(a.forest_, name), getattr(b.forest_, name))
        table = "leaf_posterior_" if hasattr(a, "leaf_posterior_") else "leaf_mean_"
        np.testing.assert_array_equal(getattr(a, table), getattr(b, table))


def test_leaf_models_read_no_table_as_unit_weights():
    order = RNG.permutation(200).astype(np.int32)
    start = np.array([0, 30, 31, 120], dtype=np.int64)
    end = np.array([30, 31, 120, 200], dtype=np.int64)
    labels = RNG.integers(0, 3, 200)
    np.testing.assert_array_equal(class_histograms(order, None, labels, start, end, 3),
                                  class_histograms(order, np.ones(200), labels, start, end, 3))
    targets = RNG.standard_normal((200, 2))
    for got, want in zip(gaussian_leaves(order, None, targets, start, end, np.full(2, 1e-3)),
                         gaussian_leaves(order, np.ones(200), targets, start, end, np.full(2, 1e-3)), strict=True):
        np.testing.assert_array_equal(got, want)


def test_density_forest_shares_follow_leaf_sizes_without_a_table():
    d = DensityForest(n_trees=3, max_depth=4, random_state=0).fit(X[:, :2])
    weighted = DensityForest(n_trees=3, max_depth=4, random_state=0).fit(X[:, :2], sample_weight=np.ones(1500))
    np.testing.assert_allclose(d.leaf_share_, weighted.leaf_share_)


@pytest.mark.parametrize("make, y", [
    (lambda: ClassificationForest(n_trees=4, n_thresholds=1, random_state=0), Y),  # with subtrees
    (lambda: ClassificationForest(n_trees=4, n_thresholds=None, bootstrap=True, random_state=0), Y),
    (lambda: ClassificationForest(n_trees=4, structure="fern", max_depth=6, random_state=0), Y),
    (lambda: RegressionForest(n_trees=4, n_thresholds=1, criterion="squared_error", random_state=0), Y_REG),
    (lambda: RegressionForest(n_trees=3, max_samples=700, min_samples_leaf=5, random_state=0), Y_REG),
])
def test_leaves_renumbered_without_copies_match_the_gathered_renumbering(make, y, monkeypatch):
    """The trainer's leaves tile its order, so their depth-first ranges follow from their starts alone."""
    monkeypatch.setattr(subtree_growth, "SUBTREE_MIN_BYTES", 0)
    real, pairs = trainer._leaves_in_tree_order, []

    def both(grown, tiled=False):
        gathered = real(trainer.GrownForest(copy.deepcopy(grown.forest), grown.order, grown.position_weights,
                                            grown.leaf_start.copy(), grown.leaf_end.copy()))
        pairs.append((gathered, real(grown, tiled)))
        return pairs[-1][1]

    monkeypatch.setattr(trainer, "_leaves_in_tree_order", both)
    make().fit(X, y)
    (gathered, tiled), = pairs
    np.testing.assert_array_equal(tiled.leaf_start, gathered.leaf_start)
    np.testing.assert_array_equal(tiled.leaf_end, gathered.leaf_end)
    np.testing.assert_array_equal(tiled.forest.child, gathered.forest.child)


def test_estimators_build_the_apply_table_at_the_end_of_their_fit():
    """After the leaf models, once the working tables are gone; the depth-first walk it came from is dropped."""
    for est, y in ((ClassificationForest(n_trees=3, random_state=0), Y), (RegressionForest(n_trees=3), Y_REG)):
        forest = est.fit(X, y).forest_
        assert "_packed_axis" in forest.__dict__ and "_preorder" not in forest.__dict__
        table = forest.__dict__["_packed_axis"]
        est.predict(X[:50])
        assert forest.__dict__["_packed_axis"] is table  # the first predict built nothing


def test_the_public_grow_leaves_the_apply_table_to_the_first_apply():
    est = ClassificationForest(n_trees=3, random_state=0)
    grown = est.grow(VectorFeatures.for_data("axis", X), X, X.shape[0], Objective.classification(Y, 3))
    assert "_packed_axis" not in grown.forest.__dict__
    leaves = est.family_.apply(X[:50], est.forest_)
    table = est.forest_.__dict__["_packed_axis"]
    np.testing.assert_array_equal(est.family_.apply(X[:50], est.forest_), leaves)
    assert est.forest_.__dict__["_packed_axis"] is table
