"""SemiSupervisedForest: transductive and inductive learning, active learning (Criminisi et al. 2012, ch. 7).

Trees are grown with the mixed gain I = I_u + alpha I_s (eq. 7.1-7.3): the unsupervised Gaussian gain over all
points keeps splits in low-density gaps, the entropy gain over the labelled points (y = -1: unlabelled, the
scikit-learn convention) separates the classes.

Transduction (sec. 7.3) runs at the level of leaf clusters, so it scales with leaves rather than points: within each
tree every leaf is linked to its nearest leaves by the symmetric Mahalanobis distance between the leaves' Gaussians
(eq. 7.4), and geodesic distances D to the labelled leaves follow from shortest paths (scipy.sparse.csgraph). Eq. 7.4
gives each leaf the class of the geodesically nearest labelled leaf (`bandwidth=0`); by default each labelled leaf
of the tree instead votes with weight exp(-(D - D_nearest) / h), averaged per class, a soft version of that rule
that averages over several labelled points where classes overlap and still follows the nearest one across
low-density gaps. The average of the leaves' distributions over trees gives `label_distributions_`.
Induction (sec. 7.4): leaves hold histograms of the transduced label distributions, so `predict_proba` works for
unseen points. Active learning (sec. 7.5): `suggest_queries` picks high-entropy points that share few leaves.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import dijkstra

from imageforest.estimators.base import UnsupervisedForestBase, numba_threads
from imageforest.estimators.params import GROWTH, Integer, Real, Rule, check_params
from imageforest.exceptions import InvalidInputError, ModelFormatError
from imageforest.forest.leaf_models import tree_average
from imageforest.forest.objectives import Objective
from imageforest.forest.threads import run_ranges
from imageforest.kernels import njit


def _leaf_neighbours(means, precs, tree_first, tree_last, leaf_tree, k):
    """For every leaf, its k nearest leaves of the same tree by symmetric Mahalanobis distance between means:
    rows, cols, distances (n_leaves * k entries; -1 columns where a tree has fewer leaves)."""
    n_leaves = means.shape[0]
    rows = np.full(n_leaves * k, -1, dtype=np.int64)
    cols = np.full(n_leaves * k, -1, dtype=np.int64)
    dist = np.zeros(n_leaves * k)
    run_ranges(_leaf_neighbours_range, n_leaves, means, precs, tree_first, tree_last, leaf_tree, int(k), rows, cols,
               dist)
    return rows, cols, dist


@njit(cache=True, nogil=True)
def _leaf_neighbours_range(a0, a1, means, precs, tree_first, tree_last, leaf_tree, k, rows, cols,
                           dist):  # pragma: no cover - numba
    d = means.shape[1]
    for a in range(a0, a1):
        t = leaf_tree[a]
        lo = tree_first[t]
        hi = tree_last[t]
        cand = np.empty(hi - lo)
        for b in range(lo, hi):
            q = 0.0
            for i in range(d):
                di = means[a, i] - means[b, i]
                for j in range(d):
                    q += di * 0.5 * (precs[a, i, j] + precs[b, i, j]) * (means[a, j] - means[b, j])
            cand[b - lo] = np.sqrt(max(q, 0.0)) if b != a else np.inf
        idx = np.argsort(cand)
        for r in range(min(k, hi - lo - 1)):
            rows[a * k + r] = a
            cols[a * k + r] = lo + idx[r]
            dist[a * k + r] = cand[idx[r]]


class SemiSupervisedForest(UnsupervisedForestBase):
    """A semi-supervised forest (Criminisi et al. 2012, ch. 7).

    Parameters
    ----------
    alpha : float
        Weight of the supervised gain in I = I_u + alpha I_s.
    n_neighbours : int
        Leaves each leaf links to in the transduction graph. Few links keep geodesics from cutting across gaps:
        3 (with single-point leaves allowed) against 4 (with two-point leaves) is better on 6 of the benchmark's
        9 settings and within 0.2 points on the others (four spirals with 2 labels per class: 0.665 -> 0.823).
    bandwidth : float
        Width h of the soft transduction in units of the median geodesic distance from a leaf to its nearest
        labelled leaf; 0 gives eq. 7.4's hard nearest-labelled rule. 5 (with oblique weak learners) is at least
        LabelSpreading's accuracy on all 9 settings of `benchmarks/engine/unsupervised_vs_sklearn.py`; 3 is behind on
        half-moons with 10 labels per class, 8 is within 0.01 of 5 everywhere.
    weak_learner : str
        "oblique" by default: lines of any direction follow the oblique class boundaries of 2-D problems
        (four Gaussians with 10 labels per class: 0.954 -> 0.962 against axis-aligned splits).
    n_trees, max_depth, n_candidates, n_thresholds, bootstrap, max_samples, min_samples_split, min_samples_leaf,
    random_state, n_jobs
        As for `ClassificationForest`.

    Attributes
    ----------
    classes_ : labelled classes
    transduction_ : (n_samples,) label of every training point (labelled points keep theirs)
    label_distributions_ : (n_samples, n_classes) the leaves' transduced class distributions averaged over trees
    """

    task = "semi-supervised"
    _estimator_kind = "classifier"
    parameter_constraints: ClassVar[dict[str, Rule]] = {**GROWTH, "alpha": Real(0.0), "n_neighbours": Integer(1),
                                                         "bandwidth": Real(0.0)}

    def __init__(self, alpha: float = 1.0, *, n_neighbours: int = 3, bandwidth: float = 5.0, n_trees: int = 100,
                 max_depth: int | None = None, weak_learner: str = "oblique", n_candidates="all",
                 n_thresholds: int | None = 16, bootstrap: bool = False, max_samples=None, min_samples_split: int = 4,
                 min_samples_leaf: int = 1, random_state=None, n_jobs: int | None = None) -> None:
        self.alpha = alpha
        self.n_neighbours = n_neighbours
        self.bandwidth = bandwidth
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

    def fit(self, X, y, sample_weight=None) -> SemiSupervisedForest:
        """Grow on all of X (n_samples, n_features); y (n_samples,) holds class labels, -1 for unlabelled."""
        X, sw = self._prepare_fit(X, sample_weight)
        y = np.asarray(y)
        if y.shape != (X.shape[0],):
            raise InvalidInputError(f"y must have shape ({X.shape[0]},), got {y.shape}")
        labelled = y != -1
        classes, enc = np.unique(y[labelled], return_inverse=True)
        if classes.size < 2:
            raise InvalidInputError("at least two labelled classes are needed (y = -1 marks unlabelled points)")
        check_params(self)
        labels = np.full(X.shape[0], -1, dtype=np.int32)
        labels[labelled] = enc
        X64 = X.astype(np.float64)
        objective = Objective.semi_supervised(labels, classes.size, X64, float(self.alpha))
        grown = self._grow(X, objective, sw)
        means, covs = self._input_gaussians(grown, X64, objective)
        self.classes_ = classes
        leaf_ids = self._apply_checked(X)
        leaf_dist = self._transduce_leaves(means, np.linalg.inv(covs), leaf_ids, labels)
        dist = leaf_dist[leaf_ids].mean(axis=1)  # (n, C): average over the T trees
        dist[labelled] = np.eye(classes.size)[enc]
        self.label_distributions_ = dist
        self.transduction_ = classes[np.argmax(dist, axis=1)]
        # Induction: every leaf's histogram of the transduced distributions of the points that reach it.
        post = np.zeros((self.forest_.n_leaves, classes.size))
        np.add.at(post, leaf_ids.ravel(), np.repeat(dist, leaf_ids.shape[1], axis=0))
        self.leaf_posterior_ = post / np.maximum(post.sum(axis=1, keepdims=True), 1e-300)
        return self

    def _transduce_leaves(self, means, precs, leaf_ids, labels) -> np.ndarray:
        """Class distribution (n_leaves, n_classes) of every leaf from geodesic distances to labelled leaves."""
        f = self.forest_
        C = self.classes_.size
        tree_first = np.searchsorted(f.leaf_tree, np.arange(f.n_trees))
        tree_last = np.append(tree_first[1:], f.n_leaves)
        rows, cols, dist = _leaf_neighbours(means, precs, tree_first, tree_last, f.leaf_tree,
                                            int(self.n_neighbours))
        ok = rows >= 0
        n = f.n_leaves
        graph = sp.coo_matrix((np.maximum(dist[ok], 1e-12), (rows[ok], cols[ok])), shape=(n, n)).tocsr()
        graph = graph.maximum(graph.T)  # symmetric: a link either way
        # Labelled counts per (leaf, class): sources of the shortest-path searches; a leaf holding labelled
        # points takes their histogram.
        lab = labels >= 0
        counts = np.zeros((n, C))
        np.add.at(counts, (leaf_ids[lab].ravel(), np.repeat(labels[lab], leaf_ids.shape[1])), 1.0)
        geo = np.full((C, n), np.inf)
        for c in range(C):  # one multi-source search per class covers every tree at once
            sources = np.flatnonzero(counts[:, c] > 0)
            if sources.size:
                geo[c] = dijkstra(graph, directed=False, indices=sources, min_only=True)
        has_labels = counts.sum(axis=1) > 0
        nearest = geo.min(axis=0)
        reached = np.isfinite(nearest)
        scores = np.zeros((n, C))
        if float(self.bandwidth) == 0 or not reached.any():
            scores[np.flatnonzero(reached), np.argmin(geo[:, reached], axis=0)] = 1.0
        else:
            h = max(float(self.bandwidth) * float(np.median(nearest[reached])), 1e-12)
            labelled_leaves = np.flatnonzero(has_labels)
            bounds = np.searchsorted(labelled_leaves, np.r_[tree_first, n])
            # The graph is block-diagonal by tree, so each tree's distances come from its own block: memory
            # (labelled leaves x leaves) per tree rather than over the forest.
            for t in range(f.n_trees):
                src = labelled_leaves[bounds[t]:bounds[t + 1]]
                lo, hi = tree_first[t], tree_last[t]
                if src.size == 0:
                    continue
                d = dijkstra(graph[lo:hi, lo:hi], directed=False, indices=src - lo)  # (sources, leaves of t)
                with np.errstate(invalid="ignore"):
                    w = np.where(np.isfinite(d), np.exp(-(d - nearest[lo:hi]) / h), 0.0)
                # Each class's weights are averaged over its labelled points: summed, a class with more labels
                # would outvote the others wherever the kernel is wide (on data without gaps it took every point).
                scores[lo:hi] = (w.T @ counts[src]) / np.maximum(counts[src].sum(axis=0), 1.0)
        scores[has_labels] = counts[has_labels]
        total = scores.sum(axis=1, keepdims=True)
        # A leaf no path links to any labelled leaf says nothing: uniform.
        return np.where(total > 0, scores / np.where(total > 0, total, 1.0), 1.0 / C)

    def predict_proba(self, X) -> np.ndarray:
        """Inductive posterior for unseen points, (n_samples, n_classes)."""
        X = self._checked_input(X)
        with numba_threads(self.n_jobs):
            return tree_average(self._apply_checked(X), self.leaf_posterior_)

    def predict(self, X) -> np.ndarray:
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]

    def score(self, X, y) -> float:
        return float(np.mean(self.predict(X) == np.asarray(y)))

    def suggest_queries(self, X, k: int = 1) -> np.ndarray:
        """Indices of the k points of X whose labels would help most (sec. 7.5): highest posterior entropy,
        each pick discounting the points that share its leaves so the queries stay spread out."""
        X = self._checked_input(X)
        if not isinstance(k, (int, np.integer)) or not 1 <= k <= X.shape[0]:
            raise InvalidInputError(f"k must be an integer in [1, {X.shape[0]}], got {k!r}")
        leaves = self._apply_checked(X)
        with numba_threads(self.n_jobs):
            p = tree_average(leaves, self.leaf_posterior_)
        with np.errstate(divide="ignore", invalid="ignore"):
            score = -np.sum(np.where(p > 0, p * np.log(p), 0.0), axis=1)
        chosen = []
        for _ in range(k):  # k picks, each one vectorised over all candidates
            i = int(np.argmax(score))
            chosen.append(i)
            shared = (leaves == leaves[i]).mean(axis=1)
            score = score * (1.0 - shared)
            score[chosen] = -np.inf
        return np.array(chosen, dtype=np.int64)

    def leaf_arrays(self) -> dict[str, np.ndarray]:
        classes = self.classes_ if self.classes_.dtype.kind in "biufU" else self.classes_.astype(str)
        return {"leaf.posterior": self.leaf_posterior_, "classes": classes}

    def restore_leaves(self, meta: dict, arrays: dict[str, np.ndarray]) -> None:
        post, classes = arrays.get("leaf.posterior"), arrays.get("classes")
        if post is None or classes is None or post.shape != (self.forest_.n_leaves, classes.size):
            raise ModelFormatError("leaf posteriors do not match the forest's leaves and classes")
        self.leaf_posterior_ = np.ascontiguousarray(post, np.float64)
        self.classes_ = classes
