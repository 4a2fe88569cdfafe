"""ManifoldForest: Laplacian eigenmaps on forest affinities, Criminisi et al. 2012, ch. 6, on the shared engine.

Trees are grown with the unsupervised Gaussian gain (eq. 6.1, the density forest's). Two training points are
neighbours in tree t when they share a leaf; their affinity is exp(-D^t) with the binary, Gaussian or Mahalanobis
distance of eq. 6.3-6.5, and W is the mean over trees (eq. 6.6), built as a sparse matrix leaf by leaf (never an
n x n dense array). The embedding uses the bottom eigenvectors of L = I - T^-1/2 W T^-1/2 (eq. 6.7) from scipy's
sparse eigensolver, scaled by T^-1/2 (random-walk normalisation), skipping the constant one. Unseen points are
mapped by the interpolation of sec. 6.2: per tree, the affinity-weighted mean embedding of the training points in
the leaf they reach, averaged over trees.

`embedding="geodesic"` answers ch. 6's problem statement (an embedding preserving geodesic distances) directly, with
the forest defining the neighbourhoods as sec. 6.1 argues: each point is linked to its `n_neighbours` nearest
points among those that share a leaf with it in some tree (the nonzeros of W), edges weigh their input-space
length, geodesic distances are shortest paths on that graph (scipy.sparse.csgraph, from `n_landmarks`
farthest-point landmarks) and landmark multidimensional scaling (de Silva & Tenenbaum) places every point. Laplacian
eigenmaps need the right pair of eigenvectors (on a swiss roll the second is a harmonic of the first); geodesic
scaling has no such choice to make.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components, dijkstra
from scipy.sparse.linalg import eigsh
from scipy.spatial import cKDTree

from imageforest.estimators.base import UnsupervisedForestBase, numba_threads
from imageforest.estimators.params import GROWTH, Integer, Options, Real, Rule, check_params
from imageforest.exceptions import InvalidInputError, ModelFormatError
from imageforest.forest.objectives import Objective
from imageforest.forest.threads import run_ranges
from imageforest.kernels import njit

AFFINITIES = ("binary", "gaussian", "mahalanobis")
EMBEDDINGS = ("laplacian", "geodesic")
BINARY, GAUSSIAN, MAHALANOBIS = 0, 1, 2


@njit(cache=True, inline="always")
def _pair_distance(model, X, i, j, Y, prec, leaf, inv_eps2):  # pragma: no cover - numba
    """D^t between row i of X and row j of Y within one leaf (eq. 6.3-6.5)."""
    if model == BINARY:
        return 0.0
    d = X.shape[1]
    acc = 0.0
    if model == GAUSSIAN:
        for a in range(d):
            diff = X[i, a] - Y[j, a]
            acc += diff * diff
        return acc * inv_eps2
    for a in range(d):
        da = X[i, a] - Y[j, a]
        for b in range(d):
            acc += da * prec[leaf, a, b] * (X[i, b] - Y[j, b])
    return acc


def _leaf_pairs(order, leaf_start, leaf_end, X, model, prec, inv_eps2):
    """All same-leaf pairs with their affinity exp(-D): rows, cols, values (sum over leaves of n_l^2 entries)."""
    sizes = (leaf_end - leaf_start).astype(np.int64)
    offset = np.zeros(leaf_start.shape[0] + 1, dtype=np.int64)
    np.cumsum(sizes * sizes, out=offset[1:])
    rows = np.empty(offset[-1], dtype=np.int32)
    cols = np.empty(offset[-1], dtype=np.int32)
    vals = np.empty(offset[-1])
    run_ranges(_leaf_pairs_range, leaf_start.shape[0], order, leaf_start, leaf_end, offset, X, model, prec,
               float(inv_eps2), rows, cols, vals)
    return rows, cols, vals


@njit(cache=True, nogil=True)
def _leaf_pairs_range(l0, l1, order, leaf_start, leaf_end, offset, X, model, prec, inv_eps2, rows, cols,
                      vals):  # pragma: no cover - numba
    for leaf in range(l0, l1):
        k = offset[leaf]
        for a in range(leaf_start[leaf], leaf_end[leaf]):
            for b in range(leaf_start[leaf], leaf_end[leaf]):
                i = order[a]
                j = order[b]
                rows[k] = i
                cols[k] = j
                vals[k] = np.exp(-_pair_distance(model, X, i, j, X, prec, leaf, inv_eps2))
                k += 1


def _interpolate(leaf_ids, Xq, X_train, order, leaf_start, leaf_end, embedding, model, prec, inv_eps2):
    """Sec. 6.2: per tree, the affinity-weighted mean embedding of the reached leaf's training points, averaged
    over the trees: (n, k) for leaf_ids (n, T)."""
    out = np.zeros((leaf_ids.shape[0], embedding.shape[1]))
    run_ranges(_interpolate_range, leaf_ids.shape[0], leaf_ids, Xq, X_train, order, leaf_start, leaf_end, embedding,
               model, prec, float(inv_eps2), out)
    return out


@njit(cache=True, nogil=True)
def _interpolate_range(i0, i1, leaf_ids, Xq, X_train, order, leaf_start, leaf_end, embedding, model, prec, inv_eps2,
                       out):  # pragma: no cover - numba
    n_trees = leaf_ids.shape[1]
    k = embedding.shape[1]
    acc = np.empty(k)
    for i in range(i0, i1):
        for t in range(n_trees):
            leaf = leaf_ids[i, t]
            eta = 0.0
            acc[:] = 0.0
            for m in range(leaf_start[leaf], leaf_end[leaf]):
                j = order[m]
                w = np.exp(-_pair_distance(model, Xq, i, j, X_train, prec, leaf, inv_eps2))
                eta += w
                for c in range(k):
                    acc[c] += w * embedding[j, c]
            if eta > 0.0:
                for c in range(k):
                    out[i, c] += acc[c] / eta
        for c in range(k):
            out[i, c] /= n_trees


def _nearest_leaf_mates(indptr, indices, X, k):
    """Per point, its k nearest (Euclidean) points among its nonzeros of W, (n, k) columns and lengths (-1 / inf
    where a point has fewer mates). Ties keep the lower column, so the graph does not depend on threads."""
    n = X.shape[0]
    cols = np.full((n, k), -1, dtype=np.int64)
    dist = np.full((n, k), np.inf)
    run_ranges(_nearest_leaf_mates_range, n, indptr, indices, X, cols, dist)
    return cols, dist


@njit(cache=True, nogil=True)
def _nearest_leaf_mates_range(i0, i1, indptr, indices, X, cols, dist):  # pragma: no cover - numba
    d = X.shape[1]
    k = cols.shape[1]
    for i in range(i0, i1):
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            if j == i:
                continue
            acc = 0.0
            for a in range(d):
                diff = X[i, a] - X[j, a]
                acc += diff * diff
            r = math.sqrt(acc)
            if r < dist[i, k - 1] or (r == dist[i, k - 1] and j < cols[i, k - 1]):
                slot = k - 1  # insertion into the sorted list of the k best so far
                while slot > 0 and (r < dist[i, slot - 1] or (r == dist[i, slot - 1] and j < cols[i, slot - 1])):
                    dist[i, slot] = dist[i, slot - 1]
                    cols[i, slot] = cols[i, slot - 1]
                    slot -= 1
                dist[i, slot] = r
                cols[i, slot] = j


def neighbourhood_graph(W: sp.csr_matrix, X: np.ndarray, k: int) -> sp.csr_matrix:
    """Symmetric graph linking each point to its k nearest leaf-mates (W's nonzeros), edges weighted by length.

    Separate pieces (clusters no leaf spans) are joined by their closest pair of points, so every geodesic is
    finite, as scikit-learn's Isomap does for a disconnected k-nearest-neighbour graph.
    """
    W = W.tocsr()
    cols, dist = _nearest_leaf_mates(W.indptr.astype(np.int64), W.indices.astype(np.int64), X, int(k))
    n = X.shape[0]
    ok = cols >= 0
    rows = np.repeat(np.arange(n), k)[ok.ravel()]
    G = sp.coo_matrix((np.maximum(dist[ok], 1e-12), (rows, cols[ok])), shape=(n, n)).tocsr()
    G = G.maximum(G.T)
    n_parts, part = connected_components(G, directed=False)
    while n_parts > 1:  # each pass joins every piece to its nearest other piece
        extra_r, extra_c, extra_d = [], [], []
        for c in range(n_parts):
            inside = np.flatnonzero(part == c)
            outside = np.flatnonzero(part != c)
            d_out, nearest = cKDTree(X[outside]).query(X[inside])
            best = int(np.argmin(d_out))
            extra_r.append(inside[best])
            extra_c.append(outside[nearest[best]])
            extra_d.append(max(float(d_out[best]), 1e-12))
        E = sp.coo_matrix((extra_d, (extra_r, extra_c)), shape=(n, n)).tocsr()
        G = G.maximum(E).maximum(E.T)
        n_parts, part = connected_components(G, directed=False)
    return G


def landmark_mds(G: sp.csr_matrix, n_components: int, n_landmarks: int,
                 n_eigenvalues: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """Landmark multidimensional scaling of the shortest-path distances of graph G.

    Landmarks are picked farthest-first from point 0 (deterministic, spread over the manifold); classical scaling
    of the landmarks' distances gives the axes, and every point is placed by distance-based triangulation.

    Returns
    -------
    (n, n_components) coordinates (0 along axes the distances do not span), and the Gram matrix's
    `n_eigenvalues` largest eigenvalues (descending)
    """
    n = G.shape[0]
    n_landmarks = max(min(int(n_landmarks), n), n_components + 1)
    land = np.empty(n_landmarks, dtype=np.int64)
    D = np.empty((n_landmarks, n))
    land[0] = 0
    D[0] = dijkstra(G, directed=False, indices=0)
    nearest = D[0].copy()
    for m in range(1, n_landmarks):  # farthest-point sampling: one shortest-path search per landmark
        land[m] = int(np.argmax(nearest))
        D[m] = dijkstra(G, directed=False, indices=land[m])
        np.minimum(nearest, D[m], out=nearest)
    D2 = D * D
    Dl = D2[:, land]
    J = np.eye(n_landmarks) - 1.0 / n_landmarks
    vals, vecs = np.linalg.eigh(-0.5 * J @ Dl @ J)
    top = np.argsort(vals)[::-1]
    vals, vecs = vals[top], vecs[:, top]
    if not vals[0] > 0:
        raise InvalidInputError("the points have no spread: every geodesic distance is zero")
    # Axes the distances do not span (1-D data asked for 2 components) carry no variance: coordinate 0, not noise
    # divided by a vanishing eigenvalue.
    spanned = vals[:n_components] > 1e-10 * vals[0]
    axes = np.where(spanned, vecs[:, :n_components] / np.sqrt(np.where(spanned, vals[:n_components], 1.0)), 0.0)
    coords = -0.5 * (D2 - Dl.mean(axis=1)[:, None]).T @ axes
    return coords, np.clip(vals[:max(int(n_eigenvalues), n_components)], 0.0, None)


class ManifoldForest(UnsupervisedForestBase):
    """A manifold forest (Criminisi et al. 2012, ch. 6): a scikit-learn-style transformer.

    Parameters
    ----------
    n_components : int
        Target dimensionality d'.
    affinity : {"binary", "gaussian", "mahalanobis"}
        Per-tree affinity model (eq. 6.5, 6.4, 6.3); "binary" needs no length scale.
    epsilon : float or None
        Length scale of the Gaussian model; None uses the RMS distance between same-leaf training points.
    n_eigenvalues : int
        How many of the Laplacian's smallest eigenvalues `eigenvalues_` reports, to choose d' by the spectral gap.
    embedding : {"laplacian", "geodesic"}
        Laplacian eigenmaps of W (eq. 6.7), or geodesic scaling on the forest's neighbourhood graph (see the module
        docstring). The geodesic mode reads only which points share a leaf (W's nonzeros), so `affinity` and
        `epsilon` do not change it.
    n_neighbours : int
        Geodesic mode: each point's links, its nearest leaf-mates.
    n_landmarks : int
        Geodesic mode: shortest-path sources for landmark scaling (cost grows linearly with it).
    n_trees, max_depth, weak_learner, n_candidates, n_thresholds, bootstrap, max_samples, min_samples_split,
    min_samples_leaf, random_state, n_jobs
        As for `DensityForest`; leaves of a few points give a sparse, local affinity graph.

    Attributes
    ----------
    embedding_ : (n_samples, n_components)
    eigenvalues_ : laplacian: (n_eigenvalues,) ascending eigenvalues of L (the first is ~0); geodesic: the
        n_eigenvalues largest eigenvalues of the landmarks' Gram matrix, descending (the variance along each axis)
    affinity_matrix_ : scipy.sparse.csr_matrix (n_samples, n_samples), eq. 6.6
    """

    task = "manifold"
    parameter_constraints: ClassVar[dict[str, Rule]] = {
        **GROWTH, "n_components": Integer(1), "affinity": Options(choices=AFFINITIES),
        "epsilon": Real(0.0, low_open=True, allow_none=True), "n_eigenvalues": Integer(1),
        "embedding": Options(choices=EMBEDDINGS), "n_neighbours": Integer(1), "n_landmarks": Integer(1)}

    def __init__(self, n_components: int = 2, *, affinity: str = "binary", epsilon: float | None = None,
                 n_eigenvalues: int = 10, embedding: str = "laplacian", n_neighbours: int = 8,
                 n_landmarks: int = 300, n_trees: int = 50, max_depth: int | None = None,
                 weak_learner: str = "axis", n_candidates="all", n_thresholds: int | None = 16,
                 bootstrap: bool = False, max_samples=None, min_samples_split: int = 10, min_samples_leaf: int = 5,
                 random_state=None, n_jobs: int | None = None) -> None:
        self.n_components = n_components
        self.affinity = affinity
        self.epsilon = epsilon
        self.n_eigenvalues = n_eigenvalues
        self.embedding = embedding
        self.n_neighbours = n_neighbours
        self.n_landmarks = n_landmarks
        self.n_trees = n_trees
        self.max_depth = max_depth
        self.weak_learner = weak_learner
        self.n_candidates = n_candidates
        self.n_thresholds = n_thresholds
        self.bootstrap = bootstrap
        self.max_samples = max_samples
        self.min_samples_split = min_samples_split
        self.min_samples_leaf = min_samples_leaf
        self.random_state = random_state
        self.n_jobs = n_jobs

    min_gain = 0.0  # not exposed: a split is kept whenever it helps

    def fit(self, X, y=None, sample_weight=None) -> ManifoldForest:
        """Grow the forest on X (n_samples, n_features), build W and embed the training points."""
        X, sw = self._prepare_fit(X, sample_weight)
        check_params(self)
        if not self.n_components < X.shape[0] - 1:
            raise InvalidInputError(f"n_components must be an integer in [1, n_samples - 2], got {self.n_components}")
        X64 = X.astype(np.float64)
        objective = Objective.regression(X64, "gaussian")
        grown = self._grow(X, objective, sw)
        model = AFFINITIES.index(self.affinity)
        _, cov = self._input_gaussians(grown, X64, objective)
        prec = np.linalg.inv(cov) if model == MAHALANOBIS else np.zeros((1, 1, 1))
        self._membership = (grown.order.astype(np.int32), grown.leaf_start, grown.leaf_end)
        self._X = X64
        self._prec = prec
        self._inv_eps2 = self._length_scale(grown, X64) if model == GAUSSIAN else 0.0
        with numba_threads(self.n_jobs):
            rows, cols, vals = _leaf_pairs(grown.order, grown.leaf_start, grown.leaf_end, X64, model, prec,
                                           self._inv_eps2)
        n = X.shape[0]
        W = sp.coo_matrix((vals / self.forest_.n_trees, (rows, cols)), shape=(n, n)).tocsr()  # sums duplicates
        self.affinity_matrix_ = W
        if self.embedding == "geodesic":
            if not np.ptp(X64, axis=0).max() > 0:
                raise InvalidInputError("the points have no spread: every geodesic distance is zero")
            G = neighbourhood_graph(W, X64, int(self.n_neighbours))
            emb, self.eigenvalues_ = landmark_mds(G, int(self.n_components), int(self.n_landmarks),
                                                  int(self.n_eigenvalues))
            self.embedding_ = _fixed_signs(emb)
        else:
            self.embedding_, self.eigenvalues_ = self._spectral(W)
        return self

    def _length_scale(self, grown, X: np.ndarray) -> float:
        """1 / eps^2 with eps the RMS distance between a point and its leaf mean (x sqrt 2: pairwise scale)."""
        counts = grown.leaf_end - grown.leaf_start
        leaf_of = np.repeat(np.arange(grown.leaf_start.size), counts)
        pos = np.concatenate([np.arange(a, b) for a, b in zip(grown.leaf_start, grown.leaf_end, strict=True)])
        pts = X[grown.order[pos]]
        means = np.zeros((grown.leaf_start.size, X.shape[1]))
        np.add.at(means, leaf_of, pts)
        means /= np.maximum(counts, 1)[:, None]
        ms = 2.0 * np.mean(np.sum((pts - means[leaf_of]) ** 2, axis=1))
        eps2 = self.epsilon ** 2 if self.epsilon is not None else ms
        if not eps2 > 0:
            raise InvalidInputError("epsilon must be positive")
        return 1.0 / eps2

    def _spectral(self, W: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray]:
        n = W.shape[0]
        deg = np.asarray(W.sum(axis=1)).ravel()
        if np.any(deg <= 0):
            raise InvalidInputError("a training point has no affinity to any other (is a leaf empty?)")
        d_inv_sqrt = 1.0 / np.sqrt(deg)
        S = sp.diags(d_inv_sqrt) @ W @ sp.diags(d_inv_sqrt)
        k = min(max(self.n_components + 1, int(self.n_eigenvalues)), n - 1)
        # The largest eigenvalues of S are 1 minus the smallest of L; a fixed start vector keeps this deterministic.
        vals, vecs = eigsh(S, k=k, which="LA", v0=np.sqrt(deg) / np.linalg.norm(np.sqrt(deg)), tol=1e-8)
        order = np.argsort(-vals)
        vals, vecs = vals[order], vecs[:, order]
        emb = vecs[:, 1:self.n_components + 1] * d_inv_sqrt[:, None]
        emb /= np.linalg.norm(emb, axis=0, keepdims=True)
        return _fixed_signs(emb) * np.sqrt(n), np.clip(1.0 - vals, 0.0, None)

    def fit_transform(self, X, y=None, sample_weight=None) -> np.ndarray:
        """Fit and return the training embedding (n_samples, n_components)."""
        return self.fit(X, y, sample_weight).embedding_

    def transform(self, X) -> np.ndarray:
        """Map unseen points with the interpolation of sec. 6.2, (n_samples, n_components)."""
        X = self._checked_input(X)
        if not hasattr(self, "_membership"):
            raise ModelFormatError("this manifold forest was loaded without its training points")
        leaves = self._apply_checked(X)
        order, start, end = self._membership
        with numba_threads(self.n_jobs):
            # C-ordered float64 whatever the caller or the eigensolver gave: one compiled kernel serves every call
            return _interpolate(leaves, np.ascontiguousarray(X, dtype=np.float64), np.ascontiguousarray(self._X),
                                order, start, end, np.ascontiguousarray(self.embedding_),
                                AFFINITIES.index(self.affinity), self._prec, self._inv_eps2)

    # -- model files: the embedding is defined by its training points, so they are saved with it -------------
    def leaf_arrays(self) -> dict[str, np.ndarray]:
        order, start, end = self._membership
        return {"train.X": self._X, "train.order": order, "leaf.start": start, "leaf.end": end,
                "leaf.precision": self._prec,
                # C order, as a loaded model holds it: the eigensolver's Fortran-ordered result would give a file of
                # other bytes than the same model saved again after loading
                "train.embedding": np.ascontiguousarray(self.embedding_), "eigenvalues": self.eigenvalues_,
                "inv_eps2": np.array([self._inv_eps2])}

    def restore_leaves(self, meta: dict, arrays: dict[str, np.ndarray]) -> None:
        try:
            X = np.ascontiguousarray(arrays["train.X"], np.float64)
            order = np.ascontiguousarray(arrays["train.order"], np.int32)
            start = arrays["leaf.start"].astype(np.int64)
            end = arrays["leaf.end"].astype(np.int64)
            emb = np.ascontiguousarray(arrays["train.embedding"], np.float64)
        except KeyError as exc:
            raise ModelFormatError(f"manifold model lacks {exc}") from None
        L = self.forest_.n_leaves
        if (start.shape != (L,) or end.shape != (L,) or np.any(start < 0) or np.any(end > order.size)
                or np.any(end < start) or np.any(order < 0) or np.any(order >= X.shape[0])
                or emb.shape[0] != X.shape[0] or X.shape[1] != self.n_features_in_):
            raise ModelFormatError("manifold model's training tables are inconsistent")
        self._X, self._membership, self.embedding_ = X, (order, start, end), emb
        self._prec = np.ascontiguousarray(arrays["leaf.precision"], np.float64)
        self.eigenvalues_ = arrays["eigenvalues"]
        self._inv_eps2 = float(arrays["inv_eps2"][0])


def _fixed_signs(emb: np.ndarray) -> np.ndarray:
    """Flip each axis so that its largest-magnitude coordinate is positive (eigenvectors have no sign)."""
    return emb * np.sign(emb[np.argmax(np.abs(emb), axis=0), np.arange(emb.shape[1])])
