"""DensityForest against the monograph's claims (Criminisi et al. 2012, ch. 5)."""

import numpy as np
import pytest
from scipy import stats

from imageforest import DensityForest, ModelFormatError


def mixture(n, seed):
    rng = np.random.default_rng(seed)
    c = rng.integers(0, 3, n)
    centres = np.array([[-1.0, 0.0], [1.0, 0.5], [0.0, -1.0]])
    return centres[c] + rng.normal(0, 0.3, (n, 2))


@pytest.fixture(scope="module")
def data():
    return mixture(1500, 0), mixture(1500, 1)


@pytest.mark.parametrize("support", ["cell", "space"])
@pytest.mark.parametrize("weak_learner", ["axis", "oblique", "conic"])
def test_density_integrates_to_one(data, weak_learner, support):
    X, _ = data
    forest = DensityForest(n_trees=10, max_depth=4, weak_learner=weak_learner, leaf_support=support,
                           random_state=0).fit(X)
    g = np.linspace(-4.5, 4.5, 241)
    xx, yy = np.meshgrid(g, g)
    p = np.exp(forest.score_samples(np.c_[xx.ravel(), yy.ravel()]))
    assert p.sum() * (g[1] - g[0]) ** 2 == pytest.approx(1.0, abs=0.01)
    if support == "space":
        assert np.all(forest.partition_ == 1.0) and np.all(forest.partition_error_ == 0.0)
    elif weak_learner == "axis":
        assert forest.partition_error_.max() < 1e-3  # box masses: exact or a lattice rule's small error
    else:
        assert 0 < forest.partition_error_.max() < 0.01  # Monte Carlo estimate with its stated error


def test_space_leaves_score_every_leaf_of_every_tree(data):
    """The kernel leaves out leaves more than e^-40 below the best: the result is the full mixture's."""
    from scipy.special import logsumexp

    X, held_out = data
    forest = DensityForest(n_trees=6, max_depth=5, variance_floor=1e-4, leaf_support="space", random_state=0).fit(X)
    pts = np.r_[held_out[:200], [[8.0, -8.0], [0.0, 30.0]]]  # far points: no leaf is close
    pts = pts.astype(np.float32).astype(np.float64)  # the forest reads float32 inputs
    cov, mean, share, tree = forest.leaf_cov_, forest.leaf_mean_, forest.leaf_share_, forest.forest_.leaf_tree
    per_leaf = np.stack([stats.multivariate_normal(mean[k], cov[k]).logpdf(pts) + np.log(share[k])
                         for k in range(mean.shape[0])], axis=1)
    per_tree = np.stack([logsumexp(per_leaf[:, tree == t], axis=1) for t in range(forest.forest_.n_trees)], axis=1)
    assert np.allclose(forest.score_samples(pts), logsumexp(per_tree, axis=1) - np.log(per_tree.shape[1]),
                       rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("support", ["cell", "space"])
def test_samples_follow_the_density(data, support):
    X, held_out = data
    forest = DensityForest(n_trees=30, max_depth=4, leaf_support=support, random_state=0).fit(X)
    S = forest.sample(1500, random_state=3)
    assert S.shape == (1500, 2)
    # Two-sample tests on the marginals and on random projections: samples look like held-out data ...
    rng = np.random.default_rng(0)
    for w in [np.array([1.0, 0.0]), np.array([0.0, 1.0]), *rng.normal(size=(4, 2))]:
        assert stats.ks_2samp(S @ w, held_out @ w).pvalue > 0.01
    # ... and unlike a single Gaussian with the same mean and covariance (the test has power).
    gauss = rng.multivariate_normal(X.mean(0), np.cov(X.T), 1500)
    assert min(stats.ks_2samp(gauss @ w, held_out @ w).pvalue for w in rng.normal(size=(6, 2))) < 0.01
    # Samples sit where the forest puts density.
    assert forest.score(S) > forest.score(gauss)


def test_held_out_likelihood_beats_a_single_gaussian(data):
    X, held_out = data
    forest = DensityForest(n_trees=30, max_depth=4, random_state=0).fit(X)
    single = stats.multivariate_normal(X.mean(0), np.cov(X.T)).logpdf(held_out).mean()
    assert forest.score(held_out) > single + 0.3


def test_round_trip_and_determinism(tmp_path, data):
    X, held_out = data
    a = DensityForest(n_trees=5, max_depth=3, random_state=1, n_jobs=1).fit(X)
    b = DensityForest(n_trees=5, max_depth=3, random_state=1, n_jobs=2).fit(X)
    a.save(tmp_path / "a.npz")
    b.save(tmp_path / "b.npz")
    assert (tmp_path / "a.npz").read_bytes() == (tmp_path / "b.npz").read_bytes()
    loaded = DensityForest.load(tmp_path / "a.npz")
    assert np.array_equal(loaded.score_samples(held_out), a.score_samples(held_out))
    assert np.array_equal(loaded.sample(10, random_state=0), a.sample(10, random_state=0))
    from imageforest import ClassificationForest
    with pytest.raises(ModelFormatError):
        ClassificationForest.load(tmp_path / "a.npz")


def test_bad_sample_count(data):
    from imageforest import InvalidInputError
    forest = DensityForest(n_trees=2, max_depth=2, random_state=0).fit(data[0])
    with pytest.raises(InvalidInputError):
        forest.sample(0)


def _modes(pdf, grid, rel=0.15):
    peaks = np.flatnonzero((pdf[1:-1] > pdf[:-2]) & (pdf[1:-1] >= pdf[2:])) + 1
    return grid[peaks[pdf[peaks] > rel * pdf.max()]]


def test_conditional_of_the_s_is_multimodal_where_the_curve_folds():
    """Fig. 5.14: p(y | x) of the "S" has three modes near x = 0 and one near its ends."""
    from imageforest.toy_data import s_shape

    X = s_shape(3000, seed=0)
    forest = DensityForest(n_trees=100, max_depth=6, random_state=0).fit(X)
    grid = np.linspace(-1.5, 1.5, 601)
    pdf = forest.conditional_pdf([[0.0], [0.45]], grid, y_dim=1)
    assert np.allclose(pdf.sum(axis=1) * (grid[1] - grid[0]), 1.0, atol=0.02)
    middle = _modes(pdf[0], grid)
    assert len(middle) >= 3 and middle.min() < -0.5 and middle.max() > 0.5 and np.any(np.abs(middle) < 0.2)
    # Samples from Alg. 5.3 reproduce the conditional: the same three branches, in proportion.
    samples = forest.sample_conditional([[0.0]], 6000, y_dim=1, random_state=0)[0]
    hist, edges = np.histogram(samples, bins=grid[::10], density=True)
    centres = 0.5 * (edges[1:] + edges[:-1])
    assert np.abs(hist - np.interp(centres, grid, pdf[0])).mean() < 0.15 * pdf[0].max()


@pytest.mark.parametrize(("weak_learner", "support"), [("axis", "cell"), ("axis", "space"), ("oblique", "space")])
def test_conditional_is_the_joint_along_the_line(data, weak_learner, support):
    """p(y | x*) is p(x*, y) normalised over y, on either support (eq. 5.10)."""
    forest = DensityForest(n_trees=8, max_depth=4, variance_floor=1e-3, weak_learner=weak_learner,
                           leaf_support=support, random_state=0).fit(data[0])
    grid = np.linspace(-4.0, 4.0, 2001)
    for x in (-0.8, 0.3):
        pdf = forest.conditional_pdf([[x]], grid, y_dim=1)[0]
        joint = np.exp(forest.score_samples(np.c_[np.full_like(grid, x), grid]))
        assert pdf.sum() * (grid[1] - grid[0]) == pytest.approx(1.0, abs=0.01)
        assert np.allclose(pdf, joint / (joint.sum() * (grid[1] - grid[0])), rtol=0.02, atol=1e-3 * pdf.max())


def test_conditionals_need_axis_cells(data):
    from imageforest import InvalidInputError
    forest = DensityForest(n_trees=2, max_depth=2, weak_learner="oblique", leaf_support="cell",
                           random_state=0).fit(data[0])
    with pytest.raises(InvalidInputError, match="axis"):
        forest.conditional_pdf([[0.0]], np.linspace(0, 1, 5))


def test_depth_and_floor_are_chosen_from_the_training_data_and_saved(tmp_path, data):
    from imageforest.forest.serialization import load_model, save_model

    X, held_out = data
    forest = DensityForest(30, random_state=0).fit(X)
    depth = int(forest.depths_[0])
    assert forest.depths_.shape == (30,) and np.all(forest.depths_ == depth)
    tried = forest.selection_["depth"]
    stage = max(tried, key=tried.get)
    assert len(tried) >= stage + 1  # two worse depths past the best
    # both leaf supports were scored on the same small forests; the better one is used
    by_support = {k: max(forest.selection_[f"depth:{k}"].values()) for k in ("cell", "space")}
    assert forest.leaf_support_ == max(by_support, key=by_support.get)
    assert tried == forest.selection_[f"depth:{forest.leaf_support_}"]
    # when the floor moved, the depths one either side were scored again at the new floor
    again = forest.selection_.get("depth_at_floor")
    assert (forest.variance_floor_ != 1e-3) == (again is not None)
    expected = stage if again is None else max(again, key=again.get)
    # on whole-space leaves, EM steps were scored at that depth, and with some chosen the depth once more
    by_steps = forest.selection_.get("mixture_steps")
    assert (by_steps is not None) == (forest.leaf_support_ == "space")
    if by_steps is not None:
        assert set(by_steps) == {0, 1, 2, 4, 8} and forest.mixture_steps_ == max(by_steps, key=by_steps.get)
        mixed = forest.selection_.get("depth_with_mixture")
        assert (mixed is not None) == (forest.mixture_steps_ > 0)
        if mixed is not None:
            assert set(mixed) == {expected - 1, expected, expected + 1} - {0}
            expected = max(mixed, key=mixed.get)
    assert depth == expected
    assert forest.variance_floor_ == max(forest.selection_["floor"], key=forest.selection_["floor"].get)
    assert forest.forest_.depth.max() <= depth
    # the chosen depth does at least as well on held-out points as depths an order away
    scores = {d: DensityForest(30, max_depth=d, variance_floor=forest.variance_floor_, random_state=0).fit(X)
              .score(held_out) for d in (1, 2, depth, 12)}
    assert scores[depth] >= max(scores.values()) - 0.02, scores
    forest.save(tmp_path / "auto.npz")
    loaded = DensityForest.load(tmp_path / "auto.npz")
    assert np.array_equal(loaded.depths_, forest.depths_) and loaded.variance_floor_ == forest.variance_floor_
    assert loaded.leaf_support_ == forest.leaf_support_ and loaded.mixture_steps_ == forest.mixture_steps_
    assert loaded.selection_ == {k: {float(kk): v for kk, v in s.items()} for k, s in forest.selection_.items()}
    assert np.allclose(loaded.score_samples(held_out[:50]), forest.score_samples(held_out[:50]))
    # a file of the older layout (no chosen depths, floor, support or scores) still loads: each tree's depth as
    # grown, its leaves in their cells
    cells = DensityForest(30, leaf_support="cell", random_state=0).fit(X)
    cells.save(tmp_path / "cells.npz")
    meta, arrays = load_model(tmp_path / "cells.npz")
    del arrays["tree.chosen_depth"]
    for key in ("variance_floor", "selection", "leaf_support", "mixture_steps"):
        meta.pop(key)
    save_model(tmp_path / "old.npz", meta, arrays)
    old = DensityForest.load(tmp_path / "old.npz")
    assert old.leaf_support_ == "cell" and old.mixture_steps_ == 0 and "depth:space" not in cells.selection_
    assert np.all(old.depths_ <= cells.depths_[0]) and old.depths_.max() == cells.forest_.depth.max()
    assert np.allclose(old.score_samples(held_out[:50]), cells.score_samples(held_out[:50]))
    meta["leaf_support"] = "space"  # a support the arrays do not match
    save_model(tmp_path / "bad.npz", meta, arrays)
    with pytest.raises(ModelFormatError, match="unit masses"):
        DensityForest.load(tmp_path / "bad.npz")
    fixed = DensityForest(10, max_depth=3, variance_floor=0.01, leaf_support="space", mixture_steps=2,
                          random_state=0).fit(X)
    assert np.all(fixed.depths_ == 3) and fixed.variance_floor_ == 0.01 and fixed.selection_ == {}
    assert fixed.leaf_support_ == "space" and fixed.mixture_steps_ == 2
    given = DensityForest(10, max_depth=3, variance_floor=0.01, mixture_steps=0, random_state=0).fit(X)
    assert set(given.selection_) == {"depth:cell", "depth:space"} and np.all(given.depths_ == 3)  # the support
    from imageforest import InvalidInputError
    with pytest.raises(InvalidInputError, match="leaf_support"):
        DensityForest(5, max_depth=3, leaf_support="cell", mixture_steps=3).fit(X)
    # values on a 0.1 grid reward spiky leaves: the floor falls, and the depth is chosen again at the new floor
    grid = DensityForest(30, random_state=0).fit(np.round(X, 1))
    again = grid.selection_["depth_at_floor"]
    assert grid.variance_floor_ < 1e-5 and grid.depths_[0] == max(again, key=again.get)
    assert set(again) == {max(grid.selection_["depth"], key=grid.selection_["depth"].get) + k for k in (-1, 0, 1)}
    with pytest.raises(Exception, match="max_depth"):
        DensityForest(5, max_depth="deep").fit(X)
    with pytest.raises(Exception, match="more than"):
        DensityForest(5).fit(X[:8])


def test_oblique_cells_normalise_tree_by_tree_within_bounded_memory():
    import tracemalloc

    from imageforest import DensityForest

    rng = np.random.default_rng(0)
    X = np.r_[rng.normal(0, 1, (1000, 2)), rng.normal(4, 0.5, (1000, 2))]
    tracemalloc.start()
    model = DensityForest(40, max_depth=6, variance_floor=1e-3, weak_learner="oblique", random_state=0).fit(X)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    # every draw through every tree would hold n_leaves x 4000 x 40 leaf ids (over 1 GB here)
    assert peak < 300 * 2**20, peak / 2**20
    assert np.all((model.partition_ > 0) & (model.partition_ <= 1 + 1e-9))
    one = model.family_.apply(X.astype(np.float32), model.forest_, trees=np.array([3]))
    assert np.array_equal(one[:, 0], model.apply(X)[:, 3])


def test_em_steps_refit_each_tree_as_one_mixture(data):
    """One EM step of the kernel against the textbook step (responsibilities over all the tree's leaves, weighted
    sums, the floor on the diagonal), and the refitted forest still a normalised density that fits better."""
    from scipy.special import logsumexp

    from imageforest.estimators.leaf_mixtures import refit_leaf_mixtures

    X, held_out = data
    forest = DensityForest(4, max_depth=3, variance_floor=1e-3, leaf_support="space", mixture_steps=0,
                           random_state=0).fit(X)
    X64 = X.astype(np.float32).astype(np.float64)
    w = np.random.default_rng(0).uniform(0.5, 1.5, X.shape[0])
    mean, cov, share = forest.leaf_mean_.copy(), forest.leaf_cov_.copy(), forest.leaf_share_.copy()
    tree = forest.forest_.leaf_tree
    start = np.searchsorted(tree, np.arange(5)).astype(np.int64)
    refit_leaf_mixtures(X64, w, forest.apply(X), mean, cov, share, start, forest._floor, 1)
    for t in range(4):
        own = np.flatnonzero(tree == t)
        lp = np.stack([stats.multivariate_normal(forest.leaf_mean_[k], forest.leaf_cov_[k]).logpdf(X64)
                       + np.log(forest.leaf_share_[k]) for k in own], axis=1)
        r = w[:, None] * np.exp(lp - logsumexp(lp, axis=1, keepdims=True))
        nk = r.sum(0)
        mu = r.T @ X64 / nk[:, None]
        c = np.einsum("nl,nla,nlb->lab", r, X64[:, None] - mu[None], X64[:, None] - mu[None]) / nk[:, None, None]
        assert np.allclose(share[own], nk / w.sum(), rtol=1e-9, atol=1e-12)
        assert np.allclose(mean[own], mu, rtol=1e-9, atol=1e-9)
        assert np.allclose(cov[own], c + forest._floor * np.eye(2), rtol=1e-8, atol=1e-10)

    refitted = DensityForest(20, max_depth=3, variance_floor=1e-3, leaf_support="space", mixture_steps=4,
                             random_state=0).fit(X)
    plain = DensityForest(20, max_depth=3, variance_floor=1e-3, leaf_support="space", mixture_steps=0,
                          random_state=0).fit(X)
    assert np.allclose(np.bincount(refitted.forest_.leaf_tree, weights=refitted.leaf_share_), 1.0)
    g = np.linspace(-4.5, 4.5, 241)
    xx, yy = np.meshgrid(g, g)
    p = np.exp(refitted.score_samples(np.c_[xx.ravel(), yy.ravel()]))
    assert p.sum() * (g[1] - g[0]) ** 2 == pytest.approx(1.0, abs=0.01)
    assert refitted.score(X) > plain.score(X) and refitted.score(held_out) > plain.score(held_out)
    S = refitted.sample(2000, random_state=1)
    for v in (np.array([1.0, 0.0]), np.array([0.0, 1.0]), np.array([0.6, -0.8])):
        assert stats.ks_2samp(S @ v, held_out @ v).pvalue > 0.01


@pytest.mark.parametrize("support", ["cell", "space"])
def test_marginals_integrate_the_joint_over_the_other_features(data, support):
    """p(v_0) from `score_marginal` against the joint integrated over v_1 on a fine grid; a 3-D forest's 2-D
    marginal integrates to one; all features is the joint itself."""
    X, _ = data
    forest = DensityForest(10, max_depth=4, variance_floor=1e-3, leaf_support=support, random_state=0).fit(X)
    grid = np.linspace(-5.0, 5.0, 4001)
    step = grid[1] - grid[0]
    for x0 in (-1.2, 0.1, 0.9):
        joint = np.exp(forest.score_samples(np.c_[np.full_like(grid, x0), grid])).sum() * step
        assert np.exp(forest.score_marginal([[x0]], dims=[0]))[0] == pytest.approx(joint, rel=2e-3)
    for y1 in (-0.8, 0.4):
        joint = np.exp(forest.score_samples(np.c_[grid, np.full_like(grid, y1)])).sum() * step
        assert np.exp(forest.score_marginal([[y1]], dims=[1]))[0] == pytest.approx(joint, rel=2e-3)
    swapped = forest.score_marginal(X[:20, ::-1], dims=[1, 0])
    assert np.allclose(swapped, forest.score_samples(X[:20]))

    rng = np.random.default_rng(0)
    X3 = np.c_[X, X[:, 0] - X[:, 1] + rng.normal(0, 0.3, X.shape[0])]
    three = DensityForest(10, max_depth=4, variance_floor=1e-3, leaf_support=support, random_state=0).fit(X3)
    g = np.linspace(-5.0, 5.0, 201)
    xx, yy = np.meshgrid(g, g)
    p = np.exp(three.score_marginal(np.c_[xx.ravel(), yy.ravel()], dims=[2, 0]))
    assert p.sum() * (g[1] - g[0]) ** 2 == pytest.approx(1.0, abs=0.01)

    from imageforest import InvalidInputError
    for bad in ([], [0, 0], [2], [0.5]):
        with pytest.raises(InvalidInputError, match="dims"):
            forest.score_marginal([[0.0]], dims=bad)
    with pytest.raises(InvalidInputError):
        forest.score_marginal([[0.0, 1.0]], dims=[0])


def test_marginals_need_axis_cells_or_whole_space_leaves(data):
    from imageforest import InvalidInputError
    forest = DensityForest(n_trees=2, max_depth=2, weak_learner="oblique", leaf_support="cell",
                           random_state=0).fit(data[0])
    with pytest.raises(InvalidInputError, match="axis"):
        forest.score_marginal([[0.0]], dims=[0])
    space = DensityForest(n_trees=2, max_depth=2, weak_learner="oblique", leaf_support="space",
                          random_state=0).fit(data[0])
    assert np.isfinite(space.score_marginal([[0.0]], dims=[0])).all()
