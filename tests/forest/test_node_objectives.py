"""Objectives chosen per node: a node optimises the objective it is given, purity needs every objective, and the
growth stays a function of the seed."""

from __future__ import annotations

import numpy as np
import pytest

from imageforest import ClassificationForest
from imageforest.forest.objectives import NodeObjectives, Objective
from imageforest.forest.weak_learners import VectorFeatures


def problem():
    """Classes split along x0, regression targets (fore-ground only, NaN elsewhere) along x1."""
    rng = np.random.default_rng(0)
    X = rng.random((400, 2)).astype(np.float32)
    labels = (X[:, 0] > 0.5).astype(np.int32)
    targets = np.where(X[:, 1:2] > 0.5, 10.0, -10.0) + rng.normal(0, 0.1, (400, 1))
    targets[labels == 0] = np.nan  # background points vote for no offset, as in a Hough forest
    return X, labels, targets


def grow(objective, seed=0, depth=3):
    X, _, _ = problem()
    est = ClassificationForest(n_trees=4, max_depth=depth, n_candidates=2, n_thresholds=None, random_state=seed)
    return est.grow(VectorFeatures("axis", 2), X, X.shape[0], objective).forest


def arrays(forest):
    return {k: v for k, v in forest.to_arrays().items()}


def test_one_objective_for_every_node_is_the_plain_growth():
    _X, labels, targets = problem()
    clf = Objective.classification(labels, 2)
    reg = Objective.regression(targets)
    plain = arrays(grow(clf))
    chosen = arrays(grow(NodeObjectives.by_depth([clf], lambda d: 0)))
    assert plain.keys() == chosen.keys() and all(np.array_equal(plain[k], chosen[k]) for k in plain)
    # with a second objective on offer, a node pure in class turns to offsets instead of stopping
    both = grow(NodeObjectives.by_depth([clf, reg], lambda d: 0), depth=6)
    assert both.child.size > grow(clf, depth=6).child.size


def test_the_root_splits_on_what_its_objective_sees():
    _X, labels, targets = problem()
    clf, reg = Objective.classification(labels, 2), Objective.regression(targets)
    for k, feature in ((0, 0), (1, 1)):
        f = grow(NodeObjectives.by_depth([clf, reg], lambda d, k=k: k), depth=1)
        roots = f.tree_root
        assert np.all(f.params[roots, 0] == feature)


def test_random_choice_mixes_objectives_and_is_deterministic():
    _X, labels, targets = problem()
    clf, reg = Objective.classification(labels, 2), Objective.regression(targets)
    mixed = NodeObjectives.random([clf, reg])
    a, b = arrays(grow(mixed, seed=3, depth=6)), arrays(grow(mixed, seed=3, depth=6))
    assert all(np.array_equal(a[k], b[k]) for k in a)
    f = grow(mixed, seed=3, depth=6)
    split = f.child >= 0
    assert set(np.unique(f.params[split, 0]).astype(int)) == {0, 1}  # both objectives' features are used


def test_a_node_pure_in_class_splits_on_offsets():
    """Only foreground points: class-pure from the root, yet the offset objective keeps splitting."""
    _X, labels, targets = problem()
    fg = np.ones_like(labels)
    clf, reg = Objective.classification(fg, 2), Objective.regression(np.where(np.isnan(targets), 0.0, targets))
    f = grow(NodeObjectives.by_depth([clf, reg], lambda d: 1), depth=2)
    assert np.sum(f.child >= 0) > 0
    only_class = grow(clf, depth=2)
    assert np.sum(only_class.child >= 0) == 0


def test_bad_choices_are_refused():
    X, labels, _targets = problem()
    clf = Objective.classification(labels, 2)
    with pytest.raises(ValueError, match="one objective index per node"):
        grow(NodeObjectives([clf], lambda d, n, rng: np.full(n, 3)))
    est = ClassificationForest(n_trees=2, max_depth=2, structure="fern", random_state=0)
    with pytest.raises(ValueError, match="fern"):
        est.grow(VectorFeatures("axis", 2), X, X.shape[0], NodeObjectives.by_depth([clf], lambda d: 0))
