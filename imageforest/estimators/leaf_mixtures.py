"""Each tree's leaf Gaussians refitted together as one Gaussian mixture, by expectation-maximisation (numba).

A density forest whose leaves spread over the whole space ("space" support) reads every tree as a Gaussian mixture
of its leaves, each fitted to its own cell's points alone. EM steps (Dempster, Laird and Rubin 1977) then fit the
mixture as a whole to the training points: a point near a cell's wall shares itself between the leaves on both
sides, and the leaves' shares, means and covariances move to raise the tree's likelihood. The tree's partition is
the mixture's start; the floor is added to every refitted covariance, as to the leaves'.

Trees are refitted independently, each on one thread, every sum taken in the points' order, so the result does not
depend on the thread count. A leaf whose log term lies `cut` below the best one found for a point takes no share of
it (at e^-40 it would add under 1e-17); a leaf left with no weight gets share 0 and keeps its Gaussian.
"""

from __future__ import annotations

import math

import numpy as np

from imageforest.forest.leaf_models import cholesky_lower
from imageforest.forest.threads import run_ranges
from imageforest.kernels import njit

LOG_2PI = math.log(2.0 * math.pi)


def refit_leaf_mixtures(X: np.ndarray, weight: np.ndarray, own_leaf: np.ndarray, mean: np.ndarray, cov: np.ndarray,
                        share: np.ndarray, tree_start: np.ndarray, floor: float, steps: int,
                        cut: float = 40.0) -> None:
    """`steps` EM steps on every tree's leaves, in place.

    Parameters
    ----------
    X : (n, d) float64 training points; weight : (n,) their weights
    own_leaf : (n, T) int, each point's leaf in every tree (where its E-step starts)
    mean : (L, d), cov : (L, d, d), share : (L,) float64, the leaves' Gaussians and shares (updated)
    tree_start : (T + 1,) int64, tree t's leaves are tree_start[t]:tree_start[t + 1]
    floor : variance added to every refitted covariance's diagonal
    """
    if steps <= 0:
        return
    run_ranges(_refit_range, tree_start.size - 1, X, weight, own_leaf, mean, cov, share, tree_start, float(floor),
               int(steps), float(cut))


@njit(cache=True, nogil=True)
def _cholesky_inverse(a, out):  # pragma: no cover - numba
    """Inverse of the lower Cholesky factor of the symmetric positive definite `a` into `out`; returns log det a."""
    d = a.shape[0]
    low = np.zeros((d, d))
    cholesky_lower(a, low)
    logdet = 0.0
    for i in range(d):
        logdet += 2.0 * math.log(low[i, i])
        for j in range(d):
            out[i, j] = 0.0
    for j in range(d):  # forward substitution, column j of the identity
        for i in range(j, d):
            acc = 1.0 if i == j else 0.0
            for k in range(j, i):
                acc -= low[i, k] * out[k, j]
            out[i, j] = acc / low[i, i]
    return logdet


@njit(cache=True, nogil=True)
def _refit_range(t0, t1, X, weight, own_leaf, mean, cov, share, tree_start, floor, steps,
                 cut):  # pragma: no cover - numba
    n, d = X.shape
    total = 0.0
    for i in range(n):
        total += weight[i]
    for t in range(t0, t1):
        first = tree_start[t]
        n_leaves = tree_start[t + 1] - first
        chol_inv = np.empty((n_leaves, d, d))
        log_norm = np.empty(n_leaves)
        mass = np.empty(n_leaves)
        s1 = np.empty((n_leaves, d))
        s2 = np.empty((n_leaves, d, d))
        found = np.empty(n_leaves, dtype=np.int64)
        term = np.empty(n_leaves)
        diff = np.empty(d)
        for _ in range(steps):
            for k in range(n_leaves):
                leaf = first + k
                if share[leaf] > 0.0:
                    logdet = _cholesky_inverse(cov[leaf], chol_inv[k])
                    log_norm[k] = math.log(share[leaf]) - 0.5 * logdet - 0.5 * d * LOG_2PI
                else:
                    log_norm[k] = -np.inf
            mass[:] = 0.0
            s1[:] = 0.0
            s2[:] = 0.0
            for i in range(n):
                if weight[i] <= 0.0:
                    continue
                # E-step: the point's own leaf first, then every leaf not negligible against the best so far
                own = own_leaf[i, t] - first
                count = 0
                top = -np.inf
                for step_k in range(n_leaves + 1):
                    k = own if step_k == 0 else step_k - 1
                    if (step_k > 0 and k == own) or log_norm[k] == -np.inf:
                        continue
                    limit = 2.0 * (log_norm[k] - top + cut)
                    # written out: a shared helper for the quadratic form made the whole fit 2.4x slower
                    q = 0.0
                    for a in range(d):
                        acc = 0.0
                        for b in range(a + 1):
                            acc += chol_inv[k, a, b] * (X[i, b] - mean[first + k, b])
                        q += acc * acc
                        if q > limit:
                            break
                    if q > limit:
                        continue
                    found[count] = k
                    term[count] = log_norm[k] - 0.5 * q
                    top = max(top, term[count])
                    count += 1
                if count == 0:
                    continue
                s = 0.0
                for c in range(count):
                    s += math.exp(term[c] - top)
                lse = top + math.log(s)
                for c in range(count):
                    r = weight[i] * math.exp(term[c] - lse)
                    k = found[c]
                    mass[k] += r
                    # sums about the leaf's current mean: no cancellation in the covariance
                    for a in range(d):
                        diff[a] = X[i, a] - mean[first + k, a]
                        s1[k, a] += r * diff[a]
                    for a in range(d):
                        for b in range(a + 1):
                            s2[k, a, b] += r * diff[a] * diff[b]
            # M-step
            for k in range(n_leaves):
                leaf = first + k
                if mass[k] <= 1e-12 * total:
                    share[leaf] = 0.0
                    continue
                share[leaf] = mass[k] / total
                for a in range(d):
                    diff[a] = s1[k, a] / mass[k]
                for a in range(d):
                    for b in range(a + 1):
                        c = s2[k, a, b] / mass[k] - diff[a] * diff[b]
                        cov[leaf, a, b] = c
                        cov[leaf, b, a] = c
                    cov[leaf, a, a] += floor
                for a in range(d):
                    mean[leaf, a] += diff[a]
