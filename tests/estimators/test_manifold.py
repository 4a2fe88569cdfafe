"""ManifoldForest against the monograph's claims (Criminisi et al. 2012, ch. 6)."""

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import make_swiss_roll
from sklearn.manifold import SpectralEmbedding, trustworthiness

from imageforest import InvalidInputError, ManifoldForest


@pytest.fixture(scope="module")
def roll():
    X, t = make_swiss_roll(1200, noise=0.05, random_state=0)
    Xn, tn = make_swiss_roll(200, noise=0.05, random_state=1)
    return X, t, Xn, tn


@pytest.mark.parametrize("affinity", ["binary", "gaussian", "mahalanobis"])
def test_swiss_roll_neighbourhoods_are_preserved(roll, affinity):
    X, t, _, _ = roll
    forest = ManifoldForest(2, affinity=affinity, n_trees=30, random_state=0)
    E = forest.fit_transform(X)
    peer = trustworthiness(X, SpectralEmbedding(2, random_state=0).fit_transform(X), n_neighbors=10)
    assert trustworthiness(X, E, n_neighbors=10) > peer - 0.02
    # The embedding unrolls the roll: one coordinate follows the intrinsic position along it.
    assert max(abs(np.corrcoef(E[:, k], t)[0, 1]) for k in range(2)) > 0.85


def test_affinity_matrix_and_spectrum(roll):
    X = roll[0]
    forest = ManifoldForest(2, n_trees=10, random_state=0).fit(X)
    W = forest.affinity_matrix_
    assert sp.issparse(W) and W.shape == (len(X), len(X))
    assert W.nnz < 0.1 * len(X) ** 2, "W must stay sparse"
    assert abs(W - W.T).max() < 1e-12
    assert np.allclose(W.diagonal(), 1.0)  # each point shares its own leaf in every tree
    ev = forest.eigenvalues_
    assert ev.shape == (10,) and abs(ev[0]) < 1e-6 and np.all(np.diff(ev) >= -1e-9)


def test_unseen_points_land_near_their_neighbours(roll):
    X, t, Xn, tn = roll
    forest = ManifoldForest(2, n_trees=30, random_state=0).fit(X)
    En = forest.transform(Xn)
    k = int(np.argmax([abs(np.corrcoef(forest.embedding_[:, c], t)[0, 1]) for c in range(2)]))
    assert abs(np.corrcoef(En[:, k], tn)[0, 1]) > 0.85
    # A training point mapped as if unseen lands close to its own embedding.
    back = forest.transform(X[:50])
    spread = forest.embedding_.std(axis=0)
    assert np.median(np.linalg.norm((back - forest.embedding_[:50]) / spread, axis=1)) < 0.2


def test_round_trip(tmp_path, roll):
    X, _, Xn, _ = roll
    forest = ManifoldForest(2, affinity="gaussian", n_trees=5, random_state=0).fit(X)
    forest.save(tmp_path / "m.npz")
    loaded = ManifoldForest.load(tmp_path / "m.npz")
    assert np.array_equal(loaded.transform(Xn), forest.transform(Xn))
    assert np.array_equal(loaded.embedding_, forest.embedding_)


def test_bad_parameters(roll):
    X = roll[0]
    with pytest.raises(InvalidInputError, match="affinity"):
        ManifoldForest(affinity="cosine").fit(X)
    with pytest.raises(InvalidInputError, match="n_components"):
        ManifoldForest(n_components=0).fit(X)


def test_geodesic_embedding_unrolls_the_roll_as_isomap_does(roll):
    from sklearn.manifold import Isomap

    X, t, Xn, tn = roll
    forest = ManifoldForest(2, embedding="geodesic", n_trees=30, random_state=0)
    E = forest.fit_transform(X)
    ours = trustworthiness(X, E, n_neighbors=10)
    laplacian = trustworthiness(X, ManifoldForest(2, n_trees=30, random_state=0).fit_transform(X), n_neighbors=10)
    isomap = trustworthiness(X, Isomap(n_neighbors=8, n_components=2).fit_transform(X), n_neighbors=10)
    assert ours > 0.99 and ours > isomap - 0.01 and ours > laplacian
    # The long axis is the position along the roll, the short one its height.
    assert abs(np.corrcoef(E[:, 0], t)[0, 1]) > 0.95
    assert abs(np.corrcoef(E[:, 1], X[:, 1])[0, 1]) > 0.75
    ev = forest.eigenvalues_
    assert ev[0] > ev[1] > 2 * ev[2] > 0  # two dimensions carry most of the variance
    assert abs(np.corrcoef(forest.transform(Xn)[:, 0], tn)[0, 1]) > 0.95
    again = ManifoldForest(2, embedding="geodesic", n_trees=30, random_state=0).fit_transform(X)
    assert np.array_equal(again, E)


def test_geodesic_embedding_joins_separate_clusters():
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(0, 0.3, (150, 3)), rng.normal(8, 0.3, (150, 3))])
    E = ManifoldForest(2, embedding="geodesic", n_trees=10, random_state=0).fit_transform(X)
    assert np.all(np.isfinite(E))
    # The two clusters stay apart along the first axis.
    assert abs(E[:150, 0].mean() - E[150:, 0].mean()) > 5 * max(E[:150, 0].std(), E[150:, 0].std())


def test_geodesic_round_trip(tmp_path, roll):
    X, _, Xn, _ = roll
    forest = ManifoldForest(2, embedding="geodesic", n_neighbours=6, n_trees=5, random_state=0).fit(X)
    forest.save(tmp_path / "g.npz")
    loaded = ManifoldForest.load(tmp_path / "g.npz")
    assert loaded.embedding == "geodesic" and loaded.n_neighbours == 6
    assert np.array_equal(loaded.embedding_, forest.embedding_)
    assert np.array_equal(loaded.transform(Xn), forest.transform(Xn))


def test_bad_geodesic_parameters(roll):
    X = roll[0][:200]
    with pytest.raises(InvalidInputError, match="embedding"):
        ManifoldForest(embedding="tsne").fit(X)
    with pytest.raises(InvalidInputError, match="n_neighbours"):
        ManifoldForest(embedding="geodesic", n_neighbours=0).fit(X)
    with pytest.raises(InvalidInputError, match="n_landmarks"):
        ManifoldForest(embedding="geodesic", n_landmarks=1.5).fit(X)


def test_geodesic_embedding_of_a_line_leaves_the_unspanned_axis_at_zero():
    X = np.c_[np.linspace(0, 1, 200), np.zeros(200), np.zeros(200)]
    E = ManifoldForest(2, embedding="geodesic", n_trees=5, random_state=0).fit_transform(X)
    assert abs(abs(np.corrcoef(E[:, 0], X[:, 0])[0, 1]) - 1) < 1e-6
    assert np.all(E[:, 1] == 0)
    with pytest.raises(InvalidInputError, match="no spread"):
        ManifoldForest(2, embedding="geodesic", n_trees=3, random_state=0).fit(np.ones((50, 3)))
