"""Leaf models: fitted from each leaf's training points, read through the leaf ids `apply` returns.

- class histograms: p_t(c | v) per leaf (Criminisi et al. 2012, sec. 2.2, eq. 2.12-2.13 combine them over trees);
- Gaussian (probabilistic-constant): mean and covariance of y per leaf (sec. 4.2, eq. 4.6);
- probabilistic-linear: a weighted least-squares hyperplane y = W^T [x - x_bar, 1] per leaf with the parameter
  covariance, giving p(y | x) = N(W^T x~, Sigma (1 + x~^T A^-1 x~)) whose variance grows away from the leaf's data
  (App. A). A small ridge keeps tiny leaves solvable.
"""

from __future__ import annotations

import numpy as np

from imageforest.forest.memory_pages import small_pages
from imageforest.forest.threads import run_ranges
from imageforest.kernels import njit


def _weights_arg(wts: np.ndarray | None) -> tuple[np.ndarray, bool]:
    """A kernel's weight arguments: the per-position table and False, or an empty table and True (all ones)."""
    return (np.ones(0), True) if wts is None else (wts, False)


def class_histograms(order, wts, labels, leaf_start, leaf_end, n_classes):
    """Normalised weighted class histogram of every leaf, (n_leaves, n_classes) float32.

    wts : (n_positions,) float64 weight of each position of `order`, or None when every one is 1.
    """
    with small_pages():
        out = np.zeros((leaf_start.shape[0], n_classes), dtype=np.float32)
    run_ranges(_class_histograms_range, leaf_start.shape[0], order, *_weights_arg(wts), labels, leaf_start,
               leaf_end, out)
    return out


@njit(cache=True, nogil=True)
def _class_histograms_range(l0, l1, order, wts, unit, labels, leaf_start, leaf_end,
                            out):  # pragma: no cover - numba
    n_classes = out.shape[1]
    acc = np.zeros(n_classes)
    for leaf in range(l0, l1):
        acc[:] = 0.0
        for m in range(leaf_start[leaf], leaf_end[leaf]):
            acc[labels[order[m]]] += 1.0 if unit else wts[m]
        total = 0.0
        for c in range(n_classes):  # a loop, as acc.sum() adds, without compiling numpy's reduction for a first fit
            total += acc[c]
        if total > 0:
            for c in range(n_classes):
                out[leaf, c] = acc[c] / total


def tree_average(leaf_ids, table):
    """Mean over trees of each point's leaf rows: (n, k) float64 from leaf ids (n, T) and a leaf table (L, k).

    With class histograms this is the forest posterior of eq. 2.12; with leaf means, the regression mean.
    """
    out = np.zeros((leaf_ids.shape[0], table.shape[1]))
    run_ranges(_tree_average_range, leaf_ids.shape[0], leaf_ids, table, out)
    return out


@njit(cache=True, nogil=True)
def _tree_average_range(i0, i1, leaf_ids, table, out):  # pragma: no cover - numba
    n_trees = leaf_ids.shape[1]
    k = table.shape[1]
    for i in range(i0, i1):
        for t in range(n_trees):
            row = table[leaf_ids[i, t]]
            for c in range(k):
                out[i, c] += row[c]
        for c in range(k):
            out[i, c] /= n_trees


def product_posterior(leaf_ids, hist, floor):
    """Eq. 2.13: normalised product of the trees' posteriors, each floored so no single tree vetoes a class."""
    out = np.zeros((leaf_ids.shape[0], hist.shape[1]))
    run_ranges(_product_posterior_range, leaf_ids.shape[0], leaf_ids, hist, float(floor), out)
    return out


@njit(cache=True, nogil=True)
def _product_posterior_range(i0, i1, leaf_ids, hist, floor, out):  # pragma: no cover - numba
    n_trees = leaf_ids.shape[1]
    n_classes = hist.shape[1]
    logp = np.empty(n_classes)
    for i in range(i0, i1):
        logp[:] = 0.0
        for t in range(n_trees):
            row = hist[leaf_ids[i, t]]
            for c in range(n_classes):
                logp[c] += np.log(max(row[c], floor))
        top = logp.max()
        z = 0.0
        for c in range(n_classes):
            out[i, c] = np.exp(logp[c] - top)
            z += out[i, c]
        for c in range(n_classes):
            out[i, c] /= z


def gaussian_leaves(order, wts, targets, leaf_start, leaf_end, var_floor):
    """Weighted mean (n_leaves, d) and covariance (n_leaves, d, d) of the targets in each leaf.

    `var_floor` (d,) is added to the covariance diagonal: a leaf of identical targets still predicts a proper
    (narrow) Gaussian. `wts`: (n_positions,) float64 weight of each position of `order`, or None when every one is 1.
    """
    n_leaves = leaf_start.shape[0]
    d = targets.shape[1]
    with small_pages():
        mean = np.zeros((n_leaves, d))
        cov = np.zeros((n_leaves, d, d))
    run_ranges(_gaussian_leaves_range, n_leaves, order, *_weights_arg(wts), targets, leaf_start, leaf_end, var_floor,
               mean, cov)
    return mean, cov


@njit(cache=True, nogil=True)
def _gaussian_leaves_range(l0, l1, order, wts, unit, targets, leaf_start, leaf_end, var_floor, mean,
                           cov):  # pragma: no cover - numba
    d = targets.shape[1]
    for leaf in range(l0, l1):
        w_sum = 0.0
        for m in range(leaf_start[leaf], leaf_end[leaf]):
            w = 1.0 if unit else wts[m]
            w_sum += w
            for a in range(d):
                mean[leaf, a] += w * targets[order[m], a]
        for a in range(d):
            mean[leaf, a] /= w_sum
        for m in range(leaf_start[leaf], leaf_end[leaf]):
            w = 1.0 if unit else wts[m]
            for a in range(d):
                ea = targets[order[m], a] - mean[leaf, a]
                for b in range(d):
                    cov[leaf, a, b] += w * ea * (targets[order[m], b] - mean[leaf, b])
        for a in range(d):
            for b in range(d):
                cov[leaf, a, b] /= w_sum
            cov[leaf, a, a] += var_floor[a]


@njit(cache=True, inline="always")
def _design_row(x, x_mean, z):  # pragma: no cover - numba
    """z = [x - x_mean, 1]: the leaf-centred input with the intercept term."""
    p = x.shape[0]
    for a in range(p):
        z[a] = x[a] - x_mean[a]
    z[p] = 1.0


def linear_leaves(order, wts, X, targets, leaf_start, leaf_end, ridge):
    """Probabilistic-linear fit per leaf.

    Parameters
    ----------
    order : (n_positions,) int32 training rows in leaf order; wts : (n_positions,) float64 their weights
    X : (n, p) inputs; targets : (n, d) float64
    leaf_start, leaf_end : (n_leaves,) int64 each leaf's positions [start, end)
    ridge : float, shrinkage of the slopes (the intercept is not shrunk)

    Returns
    -------
    x_mean : (n_leaves, p) leaf input centre
    coef : (n_leaves, p + 1, d) hyperplane over [x - x_mean, 1]
    a_inv : (n_leaves, p + 1, p + 1) inverse of the (ridge-regularised) weighted design Gram matrix
    ssr : (n_leaves, d, d) weighted sum of squared residuals
    dof : (n_leaves,) residual degrees of freedom, max(W - p - 1, 0)
    """
    n_leaves = leaf_start.shape[0]
    p = X.shape[1]
    d = targets.shape[1]
    x_mean = np.zeros((n_leaves, p))
    coef = np.zeros((n_leaves, p + 1, d))
    a_inv = np.zeros((n_leaves, p + 1, p + 1))
    noise = np.zeros((n_leaves, d, d))
    dofs = np.zeros(n_leaves)
    run_ranges(_linear_leaves_range, n_leaves, order, wts, X, targets, leaf_start, leaf_end, float(ridge), x_mean,
               coef, a_inv, noise, dofs)
    return x_mean, coef, a_inv, noise, dofs


@njit(cache=True, inline="always")
def cholesky_lower(a, chol):  # pragma: no cover - numba
    """The lower triangle of `chol` = L with a = L L^T, for a symmetric positive-definite (n, n) matrix `a`.

    A leaf's matrices are small, so plain loops beat a LAPACK call here, and they compile in a fraction of the
    time numba's ``np.linalg`` functions take.
    """
    n = a.shape[0]
    for i in range(n):
        for j in range(i + 1):
            s = a[i, j]
            for k in range(j):
                s -= chol[i, k] * chol[j, k]
            if i == j:
                chol[i, i] = np.sqrt(s)
            else:
                chol[i, j] = s / chol[j, j]


@njit(cache=True, inline="always")
def _spd_inverse(a, chol, out):  # pragma: no cover - numba
    """out = a^-1 for a symmetric positive-definite (n, n) matrix, through its Cholesky factor (a = L L^T)."""
    n = a.shape[0]
    cholesky_lower(a, chol)
    for c in range(n):  # column c of the inverse solves L L^T x = e_c
        for i in range(n):
            s = 1.0 if i == c else 0.0
            for k in range(i):
                s -= chol[i, k] * out[k, c]
            out[i, c] = s / chol[i, i]
        for i in range(n - 1, -1, -1):
            s = out[i, c]
            for k in range(i + 1, n):
                s -= chol[k, i] * out[k, c]
            out[i, c] = s / chol[i, i]


@njit(cache=True, nogil=True)
def _linear_leaves_range(l0, l1, order, wts, X, targets, leaf_start, leaf_end, ridge, x_mean, coef, a_inv, noise,
                         dofs):  # pragma: no cover - numba
    p = X.shape[1]
    d = targets.shape[1]
    gram = np.empty((p + 1, p + 1))
    chol = np.zeros((p + 1, p + 1))
    rhs = np.empty((p + 1, d))
    z = np.empty(p + 1)
    r = np.empty(d)
    for leaf in range(l0, l1):
        s0 = leaf_start[leaf]
        s1 = leaf_end[leaf]
        w_sum = 0.0
        for m in range(s0, s1):
            w_sum += wts[m]
            for a in range(p):
                x_mean[leaf, a] += wts[m] * X[order[m], a]
        for a in range(p):
            x_mean[leaf, a] /= w_sum
        gram[:] = 0.0
        rhs[:] = 0.0
        for m in range(s0, s1):
            i = order[m]
            w = wts[m]
            _design_row(X[i], x_mean[leaf], z)
            for a in range(p + 1):
                for b in range(p + 1):
                    gram[a, b] += w * z[a] * z[b]
                for b in range(d):
                    rhs[a, b] += w * z[a] * targets[i, b]
        for a in range(p):  # the intercept is not shrunk
            gram[a, a] += ridge * (1.0 + gram[a, a])
        inv = a_inv[leaf]
        _spd_inverse(gram, chol, inv)
        for a in range(p + 1):
            for b in range(d):
                acc = 0.0
                for k in range(p + 1):
                    acc += inv[a, k] * rhs[k, b]
                coef[leaf, a, b] = acc
        dofs[leaf] = max(w_sum - (p + 1), 0.0)
        for m in range(s0, s1):
            i = order[m]
            w = wts[m]
            _design_row(X[i], x_mean[leaf], z)
            for b in range(d):
                pred = 0.0
                for a in range(p + 1):
                    pred += z[a] * coef[leaf, a, b]
                r[b] = targets[i, b] - pred
            for a in range(d):
                for b in range(d):
                    noise[leaf, a, b] += w * r[a] * r[b]


def shrunk_noise(ssr: np.ndarray, dof: np.ndarray, prior_strength: float, var_floor: np.ndarray) -> np.ndarray:
    """Leaf residual covariances shrunk toward the forest's pooled residual covariance.

    A leaf with a handful of points fits its line almost exactly, and its raw residual variance would claim a
    certainty the data do not support. Treating the pooled covariance as a prior worth `prior_strength`
    observations gives (SSR_l + k S_pooled) / (dof_l + k), the usual conjugate estimate.

    Parameters
    ----------
    ssr : (n_leaves, d, d); dof : (n_leaves,); var_floor : (d,)
    """
    pooled = ssr.sum(axis=0) / max(dof.sum(), 1.0)
    noise = (ssr + prior_strength * pooled) / (dof + prior_strength)[:, None, None]
    noise[:, np.arange(ssr.shape[1]), np.arange(ssr.shape[1])] += var_floor
    return noise


def linear_components(leaf_ids, X, x_mean, coef, a_inv, noise, with_cov):
    """Per point and tree, the probabilistic-linear prediction.

    Parameters
    ----------
    leaf_ids : (n, T) int32; X : (n, p); the leaf arrays of `linear_leaves`, the noise shrunk (`shrunk_noise`)

    Returns
    -------
    means : (n, T, d); covs : (n, T, d, d), or (0, 0, d, d) when not `with_cov`
    """
    n, n_trees = leaf_ids.shape
    d = coef.shape[2]
    means = np.zeros((n, n_trees, d))
    covs = np.zeros((n, n_trees, d, d)) if with_cov else np.zeros((0, 0, d, d))
    run_ranges(_linear_components_range, n, leaf_ids, X, x_mean, coef, a_inv, noise, bool(with_cov), means, covs)
    return means, covs


@njit(cache=True, nogil=True)
def _linear_components_range(i0, i1, leaf_ids, X, x_mean, coef, a_inv, noise, with_cov, means,
                             covs):  # pragma: no cover - numba
    n_trees = leaf_ids.shape[1]
    p = X.shape[1]
    d = coef.shape[2]
    z = np.empty(p + 1)
    for i in range(i0, i1):
        for t in range(n_trees):
            leaf = leaf_ids[i, t]
            _design_row(X[i], x_mean[leaf], z)
            for b in range(d):
                acc = 0.0
                for a in range(p + 1):
                    acc += z[a] * coef[leaf, a, b]
                means[i, t, b] = acc
            if with_cov:
                quad = 0.0
                for a in range(p + 1):
                    for b in range(p + 1):
                        quad += z[a] * a_inv[leaf, a, b] * z[b]
                for a in range(d):
                    for b in range(d):
                        covs[i, t, a, b] = noise[leaf, a, b] * (1.0 + quad)
