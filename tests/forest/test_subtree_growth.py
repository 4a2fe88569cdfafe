"""Small nodes grown depth-first to their leaves must make the forests level-wise growth makes, in distribution:
the same stopping rules, tests that route the training points as grown, and the same accuracy."""

from collections import Counter

import numpy as np
import pytest

from imageforest import ClassificationForest, RegressionForest
from imageforest.forest import subtree_growth, trainer

RNG = np.random.default_rng(5)
X = RNG.standard_normal((3000, 10)).astype(np.float32)
Y3 = (X[:, 0] + 0.5 * X[:, 1] ** 2 + 0.4 * RNG.standard_normal(3000) > 0.5).astype(int) + (X[:, 2] > 0.8)
Y_REG = np.sin(2 * X[:, 0]) + X[:, 1] * X[:, 2] + 0.1 * RNG.standard_normal(3000)
TRAIN, TEST = slice(0, 2000), slice(2000, None)

SETTINGS = [
    dict(n_thresholds=1, n_candidates="sqrt"),
    dict(n_thresholds=1, n_candidates=3, criterion="gini"),
    dict(n_thresholds=6, n_candidates=4, two_sided=True),
    dict(n_thresholds=4, n_candidates=3, max_samples=1500),  # subsampled, unit weights
    dict(n_thresholds=1, n_candidates=12),  # more candidates than features: features repeat
]


@pytest.fixture(autouse=True)
def small_matrices_too(monkeypatch):
    """The matrices here are small enough for level-wise growth to keep in cache: take subtrees anyway."""
    monkeypatch.setattr(subtree_growth, "SUBTREE_MIN_BYTES", 0)


def _fit(cls, y, depth_first, monkeypatch, sample_weight=None, **settings):
    monkeypatch.setattr(subtree_growth, "SUBTREE_POINTS", 64 if depth_first else 0)
    return cls(n_trees=10, random_state=3, **settings).fit(X[TRAIN], y[TRAIN], sample_weight=sample_weight)


def _assert_split_weights_add_up(forest):
    """A split node weighs what its two children weigh together."""
    split = np.flatnonzero(forest.child >= 0)
    left = forest.child[split]
    assert np.allclose(forest.weight[split], forest.weight[left] + forest.weight[left + 1])


@pytest.mark.parametrize("settings", SETTINGS)
def test_class_subtrees_grow_forests_as_good_as_level_wise_ones(settings, monkeypatch):
    binary = (Y3 > 0).astype(int)
    for y in (Y3, binary):
        deep = _fit(ClassificationForest, y, True, monkeypatch, **settings)
        level = _fit(ClassificationForest, y, False, monkeypatch, **settings)
        deep.forest_.validate()
        assert not np.array_equal(deep.forest_.child, level.forest_.child)  # the subtrees were grown here
        if "max_samples" not in settings:  # grown to pure leaves: the tests route the points as they were split
            assert np.mean(deep.predict(X[TRAIN]) == y[TRAIN]) == 1.0
        acc_deep = np.mean(deep.predict(X[TEST]) == y[TEST])
        acc_level = np.mean(level.predict(X[TEST]) == y[TEST])
        assert abs(acc_deep - acc_level) < 0.03


@pytest.mark.parametrize("criterion, n_thresholds", [("squared_error", 1), ("gaussian", 1), ("squared_error", 5)])
def test_one_target_subtrees_grow_forests_as_good_as_level_wise_ones(criterion, n_thresholds, monkeypatch):
    kw = dict(criterion=criterion, n_thresholds=n_thresholds, n_candidates=1.0, leaf_model="constant")
    deep = _fit(RegressionForest, Y_REG, True, monkeypatch, **kw)
    level = _fit(RegressionForest, Y_REG, False, monkeypatch, **kw)
    deep.forest_.validate()
    assert not np.array_equal(deep.forest_.child, level.forest_.child)
    if criterion == "squared_error":  # leaves of one point (or of equal targets) reproduce the training targets
        assert np.allclose(deep.predict(X[TRAIN]), Y_REG[TRAIN])
    mse_deep = np.mean((deep.predict(X[TEST]) - Y_REG[TEST]) ** 2)
    mse_level = np.mean((level.predict(X[TEST]) - Y_REG[TEST]) ** 2)
    assert mse_deep < 1.1 * mse_level


def test_subtrees_keep_the_stopping_rules(monkeypatch):
    """Depth limit, minimum leaf and minimum split size hold below a subtree's root as above it."""
    forest = _fit(ClassificationForest, Y3, True, monkeypatch, n_thresholds=1, n_candidates="sqrt", max_depth=9,
                  min_samples_leaf=4, min_samples_split=12).forest_
    leaf = forest.child < 0
    assert forest.depth.max() <= 9
    assert forest.weight[leaf].min() >= 4  # unit weights: a node's weight is its point count
    assert np.all(forest.weight[~leaf] >= 12)
    deep = _fit(ClassificationForest, Y3, True, monkeypatch, n_thresholds=1, n_candidates="sqrt").forest_
    assert deep.depth.max() > 9


def test_subtrees_depend_on_the_seed_only(monkeypatch):
    monkeypatch.setattr(subtree_growth, "SUBTREE_POINTS", 64)
    _assert_the_seed_alone_fixes_the_forest({}, monkeypatch)


def test_small_matrices_grow_level_by_level(monkeypatch):
    """With K thresholds, subtrees take matrices beyond the cache or forests of many positions."""
    monkeypatch.setattr(subtree_growth, "SUBTREE_MIN_BYTES", X[TRAIN].nbytes + 1)
    monkeypatch.setattr(subtree_growth, "SUBTREE_MIN_POSITIONS", 1 << 40)
    a = _fit(ClassificationForest, Y3, True, monkeypatch, n_thresholds=1).forest_
    b = _fit(ClassificationForest, Y3, False, monkeypatch, n_thresholds=1).forest_
    assert np.array_equal(a.child, b.child) and np.array_equal(a.thr_hi, b.thr_hi)


@pytest.mark.parametrize(("criterion", "settings"), [("squared_error", dict(bootstrap=True)),
                                                     ("squared_error", dict(weighted=True, n_thresholds=4)),
                                                     ("gaussian", dict(weighted=True))])
def test_weighted_one_target_subtrees_grow_forests_as_good_as_level_wise_ones(criterion, settings, monkeypatch):
    settings = {"n_thresholds": 1, **settings}
    weights = RNG.uniform(0.5, 2.0, 2000) if settings.pop("weighted", False) else None
    kw = dict(criterion=criterion, n_candidates=1.0, leaf_model="constant", **settings)
    deep, level = [_fit(RegressionForest, Y_REG, depth_first, monkeypatch, weights, **kw)
                   for depth_first in (True, False)]
    deep.forest_.validate()
    assert not np.array_equal(deep.forest_.child, level.forest_.child)
    _assert_split_weights_add_up(deep.forest_)
    if criterion == "squared_error" and weights is not None:  # one-point leaves give the training targets back
        assert np.allclose(deep.predict(X[TRAIN]), Y_REG[TRAIN])
    mse_deep = np.mean((deep.predict(X[TEST]) - Y_REG[TEST]) ** 2)
    mse_level = np.mean((level.predict(X[TEST]) - Y_REG[TEST]) ** 2)
    assert mse_deep < 1.1 * mse_level


@pytest.mark.parametrize("settings", [dict(bootstrap=True), dict(bootstrap=True, criterion="gini", n_thresholds=4),
                                      dict(weighted=True), dict(weighted=True, two_sided=True, n_thresholds=3)])
def test_weighted_class_subtrees_grow_forests_as_good_as_level_wise_ones(settings, monkeypatch):
    """Bagging's counts and sample weights: K thresholds, weighted class sums, the same stopping rules."""
    settings = {"n_thresholds": 1, **settings}
    weights = RNG.uniform(0.5, 2.0, 2000) if settings.pop("weighted", False) else None
    deep, level = [_fit(ClassificationForest, Y3, depth_first, monkeypatch, weights, **settings)
                   for depth_first in (True, False)]
    deep.forest_.validate()
    assert not np.array_equal(deep.forest_.child, level.forest_.child)  # the subtrees were grown here
    if weights is not None:  # every point in every tree, grown to pure leaves
        assert np.mean(deep.predict(X[TRAIN]) == Y3[TRAIN]) == 1.0
    acc_deep = np.mean(deep.predict(X[TEST]) == Y3[TEST])
    acc_level = np.mean(level.predict(X[TEST]) == Y3[TEST])
    assert abs(acc_deep - acc_level) < 0.03
    # a node weighs its points: a root the forest's total per tree, a split node its children together
    total = weights.sum() if weights is not None else 2000.0
    assert np.allclose(deep.forest_.weight[deep.forest_.tree_root], total)
    _assert_split_weights_add_up(deep.forest_)


def test_weighted_class_subtrees_keep_the_stopping_rules_and_depend_on_the_seed_only(monkeypatch):
    monkeypatch.setattr(subtree_growth, "SUBTREE_POINTS", 64)
    forest = ClassificationForest(n_trees=10, n_thresholds=1, bootstrap=True, max_depth=9, min_samples_leaf=4,
                                  min_samples_split=12, random_state=3).fit(X[TRAIN], Y3[TRAIN]).forest_
    leaf = forest.child < 0
    assert forest.depth.max() <= 9 and forest.weight[leaf].min() >= 4

    _assert_the_seed_alone_fixes_the_forest(dict(n_thresholds=1, bootstrap=True), monkeypatch)



@pytest.mark.parametrize(("n_trees", "expected"), [(60, False), (70, True)])
def test_a_small_matrix_takes_subtrees_when_the_forest_holds_many_positions(n_trees, expected, monkeypatch):
    """2,000 x 10 float32 is far below the bytes floor; 70 trees of its points pass the positions floor (2^17),
    60 do not (a first default fit, 1,000 points and 100 trees, must not compile the subtree kernels)."""
    monkeypatch.setattr(subtree_growth, "SUBTREE_MIN_BYTES", 1 << 30)
    calls = []
    grow = trainer.grow_subtrees
    monkeypatch.setattr(trainer, "grow_subtrees", lambda *a, **k: calls.append(1) or grow(*a, **k))
    ClassificationForest(n_trees=n_trees, n_thresholds=1, max_depth=12, random_state=0).fit(X[TRAIN], Y3[TRAIN])
    assert bool(calls) is expected


def _fit_sorted(cls, y, depth_first, monkeypatch, sample_weight=None, **settings):
    monkeypatch.setattr(subtree_growth, "SORTED_SUBTREE_POINTS", 400 if depth_first else 0)
    return cls(n_trees=8, random_state=3, n_thresholds=None, n_candidates=1.0, **settings).fit(
        X[TRAIN], y[TRAIN], sample_weight=sample_weight)


def _large_nodes(forest, least):
    """(depth, feature, threshold, weight) of every split node of at least `least` weight, sorted."""
    keep = (forest.child >= 0) & (forest.weight >= least)
    rows = np.stack([forest.depth[keep], forest.params[keep, 0], forest.thr_hi[keep], forest.weight[keep]], axis=1)
    return rows[np.lexsort(rows.T[::-1])]


SORTED_CASES = [
    (ClassificationForest, dict(bootstrap=True)),
    (ClassificationForest, dict(criterion="gini")),
    (ClassificationForest, dict(weighted=True)),
    (RegressionForest, dict(bootstrap=True, criterion="squared_error", leaf_model="constant")),
]


@pytest.mark.parametrize(("cls", "settings"), SORTED_CASES)
def test_sorted_subtrees_choose_the_splits_level_wise_growth_chooses(cls, settings, monkeypatch):
    """With every feature a candidate and every threshold searched, a node's best split is the same whichever way
    the tree grows, ties aside (class counts make them even at nodes of a hundred points, and a tie broken the other
    way changes the nodes below it): nearly every node of 50 points or more must match exactly, and the forests
    must predict alike."""
    settings = dict(settings)
    weights = RNG.uniform(0.5, 2.0, 2000) if settings.pop("weighted", False) else None
    y = Y3 if cls is ClassificationForest else Y_REG
    deep = _fit_sorted(cls, y, True, monkeypatch, weights, **settings)
    level = _fit_sorted(cls, y, False, monkeypatch, weights, **settings)
    deep.forest_.validate()
    assert not np.array_equal(deep.forest_.child, level.forest_.child)  # the subtrees were grown here
    a, b = _large_nodes(deep.forest_, 50), _large_nodes(level.forest_, 50)
    same = sum((Counter(map(tuple, a)) & Counter(map(tuple, b))).values())
    assert b.shape[0] > 8 * 10 and same >= 0.95 * max(a.shape[0], b.shape[0])
    if cls is ClassificationForest:
        assert np.mean(deep.predict(X[TEST]) == level.predict(X[TEST])) > 0.95
        if not settings.get("bootstrap"):  # every point in every tree, grown to pure leaves
            assert np.mean(deep.predict(X[TRAIN]) == y[TRAIN]) == 1.0
    else:
        mse_deep = np.mean((deep.predict(X[TEST]) - y[TEST]) ** 2)
        mse_level = np.mean((level.predict(X[TEST]) - y[TEST]) ** 2)
        assert mse_deep < 1.1 * mse_level


def test_sorted_subtrees_keep_the_stopping_rules_and_depend_on_the_seed_only(monkeypatch):
    kw = dict(bootstrap=True, max_depth=9, min_samples_leaf=4, min_samples_split=12)
    forest = _fit_sorted(ClassificationForest, Y3, True, monkeypatch, **kw).forest_
    leaf = forest.child < 0
    assert forest.depth.max() <= 9
    assert forest.weight[leaf].min() >= 4  # bootstrap counts: a node weighs at least its point count
    unlimited = _fit_sorted(ClassificationForest, Y3, True, monkeypatch, bootstrap=True).forest_
    assert forest.depth.max() < unlimited.depth.max()

    _assert_the_seed_alone_fixes_the_forest(dict(n_thresholds=None, bootstrap=True), monkeypatch)


@pytest.mark.parametrize("criterion", ["entropy", "gini"])
def test_weighted_class_subtrees_with_equal_weights_choose_the_unit_kernels_splits(criterion, monkeypatch):
    """Every point weighing 2 scales every class sum, impurity and node weight by 2 and leaves the gains as they
    are: the weighted kernel must grow the trees the unit-weight one grows from the same seed."""
    monkeypatch.setattr(subtree_growth, "SUBTREE_POINTS", 64)
    kw = dict(n_trees=5, n_thresholds=3, criterion=criterion, random_state=2)
    unit = ClassificationForest(**kw).fit(X[TRAIN], Y3[TRAIN]).forest_
    doubled = ClassificationForest(**kw).fit(X[TRAIN], Y3[TRAIN], sample_weight=np.full(2000, 2.0)).forest_
    assert np.array_equal(unit.child, doubled.child) and np.array_equal(unit.params, doubled.params)
    assert np.array_equal(unit.thr_lo, doubled.thr_lo) and np.array_equal(unit.thr_hi, doubled.thr_hi)
    assert np.allclose(doubled.weight, 2.0 * unit.weight)


@pytest.mark.parametrize("criterion", ["squared_error", "gaussian"])
def test_weighted_one_target_subtrees_with_equal_weights_choose_the_unit_kernels_splits(criterion, monkeypatch):
    monkeypatch.setattr(subtree_growth, "SUBTREE_POINTS", 64)
    kw = dict(n_trees=5, n_thresholds=3, n_candidates=1.0, criterion=criterion, leaf_model="constant",
              random_state=2)
    unit = RegressionForest(**kw).fit(X[TRAIN], Y_REG[TRAIN]).forest_
    doubled = RegressionForest(**kw).fit(X[TRAIN], Y_REG[TRAIN], sample_weight=np.full(2000, 2.0)).forest_
    assert np.array_equal(unit.child, doubled.child) and np.array_equal(unit.params, doubled.params)
    assert np.array_equal(unit.thr_hi, doubled.thr_hi) and np.allclose(doubled.weight, 2.0 * unit.weight)


@pytest.mark.parametrize(("cls", "criterion"), [(ClassificationForest, "entropy"), (ClassificationForest, "gini"),
                                                (RegressionForest, "squared_error")])
def test_a_weight_of_two_grows_what_a_copy_of_the_point_grows(cls, criterion, monkeypatch):
    """Whole trees grown depth-first from the same seed: a point of weight 2 (the weighted kernel) and the same
    point given twice (the unit one) make the same class sums, the same thresholds and the same trees."""
    monkeypatch.setattr(subtree_growth, "SUBTREE_POINTS", 4000)
    twice = np.arange(0, 2000, 4)
    y = Y3 if cls is ClassificationForest else Y_REG
    kw = dict(n_trees=4, n_thresholds=2, n_candidates=4, criterion=criterion, random_state=5)
    if cls is RegressionForest:
        kw["leaf_model"] = "constant"
    weights = np.ones(2000)
    weights[twice] = 2.0
    weighted = cls(**kw).fit(X[TRAIN], y[TRAIN], sample_weight=weights).forest_
    copied = cls(**kw).fit(np.concatenate([X[TRAIN], X[twice]]), np.concatenate([y[TRAIN], y[twice]])).forest_
    assert np.array_equal(weighted.child, copied.child) and np.array_equal(weighted.params, copied.params)
    assert np.array_equal(weighted.thr_hi, copied.thr_hi) and np.allclose(weighted.weight, copied.weight)


def _assert_the_seed_alone_fixes_the_forest(settings, monkeypatch):
    """Whatever the threads, the order they take ranges of roots in, or how many roots one call grows."""

    def make(jobs):
        return ClassificationForest(n_trees=6, random_state=1, n_jobs=jobs, **settings).fit(X, Y3).forest_

    a, b = make(1), make(2)
    monkeypatch.setattr(subtree_growth, "CHUNKS_PER_THREAD", 1)
    monkeypatch.setattr(trainer, "SUBTREE_POSITIONS", 50)  # a level's subtrees grown a few roots at a time
    c = make(2)
    for x, y in ((a, b), (a, c)):
        assert np.array_equal(x.child, y.child) and np.array_equal(x.params, y.params)
        assert np.array_equal(x.thr_hi, y.thr_hi) and np.array_equal(x.gain, y.gain)
