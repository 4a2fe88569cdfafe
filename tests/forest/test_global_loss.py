"""Alternating decision forests: loss gradients, forest margins, and growth re-weighted level by level."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from imageforest import ClassificationForest
from imageforest.forest.losses import LOSSES, forest_margins, loss_gradient
from imageforest.forest.objectives import Objective
from imageforest.forest.weak_learners import VectorFeatures


@pytest.mark.parametrize("name", [n for n in LOSSES if n != "hinge"])
def test_gradients_match_the_losses(name):
    losses = {"logit": lambda m: np.log1p(np.exp(-m)), "exponential": lambda m: np.exp(-m),
              "savage": lambda m: 1.0 / (1.0 + np.exp(2 * m)) ** 2,
              "tangent": lambda m: (2 * np.arctan(m) - 1) ** 2}
    m = np.linspace(-1, 1, 41)
    h = 1e-6
    numeric = np.abs((losses[name](m + h) - losses[name](m - h)) / (2 * h))
    assert np.allclose(loss_gradient(name, m), numeric, atol=1e-6)
    with pytest.raises(ValueError, match="loss must be"):
        loss_gradient("square", m)


def test_margins_average_the_trees_posteriors():
    # two trees over 4 points; tree 0 puts points 0-1 and 2-3 together, tree 1 all four
    order = np.array([0, 1, 2, 3, 0, 1, 2, 3])
    labels = np.array([0, 0, 1, 0])
    m = forest_margins(order, np.ones(8), np.array([0, 2, 4]), np.array([2, 4, 8]), labels, 2, 4)
    # tree 0: p(0) = 1 for points 0-1, 0.5 for points 2-3; tree 1: p(0) = 0.75 for all
    p0 = np.array([(1 + 0.75) / 2, (1 + 0.75) / 2, (0.5 + 0.75) / 2, (0.5 + 0.75) / 2])
    expected = np.where(labels == 0, p0 - (1 - p0), (1 - p0) - p0)
    assert np.allclose(m, expected)


def test_growing_margins_add_finished_leaves_once_and_match_a_full_recount():
    """Level by level, leaves finish and the frontier shrinks: the margins kept incrementally equal a recount."""
    from imageforest.forest.losses import GrowingMargins

    rng = np.random.default_rng(4)
    n, T = 60, 3
    labels = rng.integers(0, 3, n)
    labels[5] = -1  # unlabelled: no histogram entry, margin 0
    order = np.concatenate([rng.permutation(n) for _ in range(T)])
    point_weight = rng.random(n) + 0.5
    growing = GrowingMargins(labels, 3, n, T)
    # three levels: segment ends per level (every tree's 60 positions cut finer); leaves finish as they go
    cuts = [[0, 60, 120, 180], [0, 30, 60, 90, 120, 150, 180], [0, 10, 30, 45, 60, 75, 90, 100, 120, 140, 150, 180]]
    finished: list[tuple[int, int]] = []
    for level, bounds in enumerate(cuts):
        segments = [(a, b) for a, b in itertools.pairwise(bounds)
                    if not any(a >= s and b <= e for s, e in finished)]
        if level:  # the first segment of every tree finishes at each level after the first
            finished += [seg for seg in segments if seg[0] % 60 == 0]
        front = [seg for seg in segments if seg not in finished]
        leaves = np.array(finished, dtype=np.int64).reshape(-1, 2)
        fronts = np.array(front, dtype=np.int64).reshape(-1, 2)
        got = growing.margins(order, point_weight, leaves[:, 0], leaves[:, 1], fronts[:, 0], fronts[:, 1],
                              fronts[:, 0] // n)
        both = np.r_[fronts, leaves]
        full = forest_margins(order, point_weight[order], both[:, 0], both[:, 1], labels, 3, n)
        assert np.allclose(got, full, atol=1e-12)
        assert got[5] == 0.0


class Alternating(ClassificationForest):
    def global_loss(self):
        return "exponential"


def noisy_problem():
    rng = np.random.default_rng(0)
    X = rng.random((600, 2)).astype(np.float32)
    y = (X[:, 0] + 0.3 * X[:, 1] > 0.6).astype(np.int32)
    flip = rng.random(600) < 0.1
    return X, np.where(flip, 1 - y, y)


def test_loss_weights_change_the_growth_deterministically():
    X, y = noisy_problem()
    obj = Objective.classification(y, 2)

    def grow(cls, jobs=None):
        est = cls(n_trees=4, max_depth=6, n_candidates=2, random_state=3, n_jobs=jobs)
        return est.grow(VectorFeatures("axis", 2), X, X.shape[0], obj)

    plain, alt, alt1 = grow(ClassificationForest), grow(Alternating), grow(Alternating, 1)
    assert not np.array_equal(plain.forest.params, alt.forest.params)
    assert all(np.array_equal(a, b) for a, b in zip(alt.forest.to_arrays().values(),
                                                     alt1.forest.to_arrays().values(), strict=True))
    # leaf models read the points' own weights, not the last level's loss weights
    assert np.all(alt.wts == 1.0)


def test_a_loss_needs_labels_and_no_bootstrap():
    X, y = noisy_problem()
    reg = Objective.regression(X[:, :1].astype(np.float64))
    with pytest.raises(ValueError, match="classification objective"):
        Alternating(n_trees=2, max_depth=3).grow(VectorFeatures("axis", 2), X, X.shape[0], reg)
    with pytest.raises(ValueError, match="bootstrap"):
        Alternating(n_trees=2, max_depth=3, bootstrap=True).grow(VectorFeatures("axis", 2), X, X.shape[0],
                                                                Objective.classification(y, 2))


def test_classification_forest_grows_alternating_on_request():
    X, y = noisy_problem()
    kw = {"n_trees": 10, "max_depth": 8, "n_candidates": 1, "random_state": 0}
    plain = ClassificationForest(**kw).fit(X, y)
    alt = ClassificationForest(**kw, growth="alternating", loss="tangent").fit(X, y)
    assert not np.array_equal(plain.forest_.params, alt.forest_.params)
    assert alt.score(X, y) > 0.8
    from imageforest.exceptions import InvalidInputError

    with pytest.raises(InvalidInputError, match="bootstrap"):
        ClassificationForest(**kw, growth="alternating", bootstrap=True).fit(X, y)
    with pytest.raises(InvalidInputError, match="loss"):
        ClassificationForest(**kw, growth="alternating", loss="square").fit(X, y)
