"""Colour models of image regions: a Gaussian mixture per class, fitted to the pixels a segmentation gives it.

GrabCut's appearance model (Rother, Kolmogorov and Blake, "GrabCut: interactive foreground extraction using
iterated graph cuts", SIGGRAPH 2004): each class's colours (L*a*b* of a picture, or any channels) are described by
a mixture of a few full-covariance Gaussians, re-estimated from the current labels. A pixel's class posterior under
these models (equal class priors) is a global cue that a per-pixel forest grown on the scribbles alone lacks: it
has seen every pixel the last cut gave the class, not only the strokes.

Fitted by expectation-maximisation from a k-means++ start, on at most `max_pixels` pixels per class drawn with a
fixed seed, so that a result does not depend on the machine.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from imageforest.exceptions import InvalidInputError
from imageforest.forest.threads import run_ranges
from imageforest.kernels import njit

COVARIANCE_FLOOR = 1e-2  # added to each component's variances (channel units squared): no component collapses


@dataclass(frozen=True)
class GaussianMixture:
    """k full-covariance Gaussians in d channels.

    Attributes
    ----------
    weights : (k,) mixing shares, summing to 1
    means : (k, d)
    covariances : (k, d, d)
    """

    weights: np.ndarray
    means: np.ndarray
    covariances: np.ndarray

    def _whitening(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        """(k, d, d) inverse Cholesky factors (|L^-1 (x - mu)|^2 is the Mahalanobis distance) and the (k,)
        log normalising constants with the log weights."""
        chol = np.linalg.cholesky(self.covariances)
        log_det = 2.0 * np.log(np.diagonal(chol, axis1=1, axis2=2)).sum(axis=1)
        const = np.log(self.weights) - 0.5 * (log_det + d * np.log(2.0 * np.pi))
        return np.ascontiguousarray(np.linalg.inv(chol)), const

    def log_density(self, x: np.ndarray) -> np.ndarray:
        """log p(x) of (n, d) points, float64 (n,)."""
        x = np.ascontiguousarray(x, dtype=np.float64)
        inv, const = self._whitening(x.shape[1])
        out = np.empty(x.shape[0])
        run_ranges(_log_density_range, x.shape[0], x, np.ascontiguousarray(self.means), inv, const, out,
                   min_per_thread=8192)
        return out


@njit(cache=True, nogil=True)
def _components_at(x, i, means, inv, const, comp):  # pragma: no cover - numba
    """comp[j] = const_j - |inv_j (x_i - mean_j)|^2 / 2 for every component j."""
    k, d = means.shape
    for j in range(k):
        q = 0.0
        for a in range(d):
            z = 0.0
            for b in range(a + 1):  # inv_j is lower triangular
                z += inv[j, a, b] * (x[i, b] - means[j, b])
            q += z * z
        comp[j] = const[j] - 0.5 * q


@njit(cache=True, nogil=True)
def _log_density_range(i0, i1, x, means, inv, const, out):  # pragma: no cover - numba
    comp = np.empty(means.shape[0])
    for i in range(i0, i1):
        _components_at(x, i, means, inv, const, comp)
        top = comp.max()
        out[i] = top + np.log(np.sum(np.exp(comp - top)))


def fit_mixture(x: np.ndarray, k: int = 5, iterations: int = 10, seed: int = 0) -> GaussianMixture:
    """A mixture of at most `k` Gaussians fitted to (n, d) points (fewer when there are fewer distinct points).

    k-means++ picks the starting means, a few rounds of k-means refine them, then `iterations` rounds of EM.
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 1:
        raise InvalidInputError(f"a colour model needs (n, d) points with n >= 1, got shape {x.shape}")
    n, d = x.shape
    rng = np.random.default_rng(seed)
    k = int(max(1, min(k, n)))
    centres = [x[rng.integers(n)]]
    nearest = np.sum((x - centres[0]) ** 2, axis=1)
    for _ in range(1, k):
        total = nearest.sum()
        if total <= 0:  # every point sits on a centre already
            break
        centres.append(x[rng.choice(n, p=nearest / total)])
        nearest = np.minimum(nearest, np.sum((x - centres[-1]) ** 2, axis=1))
    means = np.array(centres)
    assign = np.empty(n, dtype=np.int64)
    _k_means(x, means, 5, assign)
    mass, first, second = _assigned_moments(x, assign, len(means))
    model = _from_moments(mass, first, second, d)
    for _ in range(iterations):
        inv, const = model._whitening(d)
        mass, first, second = _em_moments(x, np.ascontiguousarray(model.means), inv, const)
        model = _from_moments(mass, first, second, d)
    return model


def _from_moments(mass: np.ndarray, first: np.ndarray, second: np.ndarray, d: int) -> GaussianMixture:
    """Weights, means and covariances from each component's weighted count (k,), sum (k, d) and sum of outer
    products (k, d, d); components holding less than one point's weight are dropped."""
    keep = mass >= min(1.0, mass.max())  # a component holding less than one point has no covariance to speak of
    mass, first, second = mass[keep], first[keep], second[keep]
    means = first / mass[:, None]
    covs = second / mass[:, None, None] - means[:, :, None] * means[:, None, :] + COVARIANCE_FLOOR * np.eye(d)
    covs = 0.5 * (covs + np.transpose(covs, (0, 2, 1)))
    return GaussianMixture(mass / mass.sum(), means, covs)


@njit(cache=True, nogil=True)
def _k_means(x, means, rounds, assign):  # pragma: no cover - numba
    """Lloyd's rounds from `means` (k, d), in place; `assign` (n,) gets each point's nearest mean."""
    n, d = x.shape
    k = means.shape[0]
    for r in range(rounds):
        sums = np.zeros((k, d))
        counts = np.zeros(k)
        for i in range(n):
            best, best_j = np.inf, 0
            for j in range(k):
                q = 0.0
                for a in range(d):
                    q += (x[i, a] - means[j, a]) ** 2
                if q < best:
                    best, best_j = q, j
            assign[i] = best_j
            counts[best_j] += 1.0
            for a in range(d):
                sums[best_j, a] += x[i, a]
        if r < rounds - 1:
            for j in range(k):
                if counts[j] > 0:
                    for a in range(d):
                        means[j, a] = sums[j, a] / counts[j]


@njit(cache=True, nogil=True)
def _assigned_moments(x, assign, k):  # pragma: no cover - numba
    n, d = x.shape
    mass = np.zeros(k)
    first = np.zeros((k, d))
    second = np.zeros((k, d, d))
    for i in range(n):
        j = assign[i]
        mass[j] += 1.0
        for a in range(d):
            first[j, a] += x[i, a]
            for b in range(d):
                second[j, a, b] += x[i, a] * x[i, b]
    return mass, first, second


@njit(cache=True, nogil=True)
def _em_moments(x, means, inv, const):  # pragma: no cover - numba
    """One EM round in one pass: each point's responsibilities under the current components (E), accumulated
    into the weighted counts, sums and outer products the next components are made of (M)."""
    n, d = x.shape
    k = means.shape[0]
    mass = np.zeros(k)
    first = np.zeros((k, d))
    second = np.zeros((k, d, d))
    comp = np.empty(k)
    for i in range(n):
        _components_at(x, i, means, inv, const, comp)
        exp_normalise(comp, comp.max())
        for j in range(k):
            w = comp[j]
            mass[j] += w
            for a in range(d):
                first[j, a] += w * x[i, a]
                for b in range(d):
                    second[j, a, b] += w * x[i, a] * x[i, b]
    return mass, first, second


def class_colour_posterior(colours: np.ndarray, labels: np.ndarray, n_classes: int, k: int = 5,
                           max_pixels: int = 20000, seed: int = 0) -> np.ndarray:
    """Each pixel's class posterior under per-class colour mixtures fitted to the pixels `labels` gives them.

    Parameters
    ----------
    colours : (n, d) pixel colours (L*a*b*, or any channels)
    labels : (n,) int class index 0..n_classes-1 of every pixel (a segmentation)
    n_classes : K
    k : Gaussians per class;  max_pixels : pixels per class the mixture is fitted on at most (a fixed draw)

    Returns
    -------
    (n, K) float32 posteriors with equal class priors; a class without pixels gets 0 everywhere (1 / K where no
    class has any, which cannot happen for a segmentation of the image).
    """
    colours = np.ascontiguousarray(colours, dtype=np.float64)
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    log_p = np.full((colours.shape[0], n_classes), -np.inf)
    for c in range(n_classes):
        members = np.flatnonzero(labels == c)
        if members.size == 0:
            continue
        if members.size > max_pixels:  # each pixel kept with the same chance: about max_pixels of them
            members = members[rng.random(members.size) < max_pixels / members.size]
        log_p[:, c] = fit_mixture(colours[members], k, seed=seed + c).log_density(colours)
    out = np.empty(log_p.shape, dtype=np.float32)
    run_ranges(_normalise_rows, log_p.shape[0], log_p, out, min_per_thread=8192)
    return out


@njit(cache=True, nogil=True)
def _normalise_rows(i0, i1, log_p, out):  # pragma: no cover - numba
    """out[i] = exp(log_p[i]) / sum(exp(log_p[i])), or 1 / K where every entry is -inf."""
    n_cls = log_p.shape[1]
    row = np.empty(n_cls)
    for i in range(i0, i1):
        row[:] = log_p[i]
        top = row.max()
        if not np.isfinite(top):
            out[i] = 1.0 / n_cls
            continue
        exp_normalise(row, top)
        out[i] = row


@njit(cache=True, nogil=True)
def exp_normalise(row, top):  # pragma: no cover - numba
    """row = exp(row - top) / sum(exp(row - top)), in place: a row of log-probabilities (top: its maximum) made
    probabilities, for any kernel that pools log-posteriors."""
    total = 0.0
    for k in range(row.size):
        e = np.exp(row[k] - top)
        row[k] = e
        total += e
    for k in range(row.size):
        row[k] /= total
