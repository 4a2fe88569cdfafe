"""The regression forest's output: per point, an equal-weight mixture of T Gaussians (one per tree)."""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp, ndtr


class ForestGaussianMixture:
    """p(y | x) = 1/T sum_t N(y; mu_t(x), Sigma_t(x)) for n query points.

    Parameters
    ----------
    means : (n, T, d) float64
    covs : (n, T, d, d) float64
    """

    def __init__(self, means: np.ndarray, covs: np.ndarray) -> None:
        self.means = means
        self.covs = covs

    @property
    def n_outputs(self) -> int:
        return self.means.shape[2]

    def mean(self) -> np.ndarray:
        """E[y | x], shape (n, d)."""
        return self.means.mean(axis=1)

    def cov(self) -> np.ndarray:
        """Mixture covariance: mean of covariances plus the spread of the means, shape (n, d, d)."""
        mu = self.mean()
        dev = self.means - mu[:, None, :]
        return self.covs.mean(axis=1) + np.einsum("ntd,nte->nde", dev, dev) / self.means.shape[1]

    def std(self) -> np.ndarray:
        """Marginal standard deviation per output, shape (n, d)."""
        return np.sqrt(np.maximum(np.diagonal(self.cov(), axis1=1, axis2=2), 0.0))

    def _marginal(self, dim: int) -> tuple[np.ndarray, np.ndarray]:
        return self.means[:, :, dim], np.sqrt(np.maximum(self.covs[:, :, dim, dim], 1e-300))

    def pdf(self, grid: np.ndarray, dim: int = 0) -> np.ndarray:
        """Marginal density of output `dim` on a 1-D grid, shape (n, len(grid))."""
        mu, sd = self._marginal(dim)
        g = np.asarray(grid, dtype=np.float64)[None, None, :]
        z = (g - mu[:, :, None]) / sd[:, :, None]
        return np.mean(np.exp(-0.5 * z * z) / (np.sqrt(2 * np.pi) * sd[:, :, None]), axis=1)

    def logpdf(self, y: np.ndarray) -> np.ndarray:
        """Joint log density of one target per point, y of shape (n, d); returns (n,)."""
        y = np.asarray(y, dtype=np.float64).reshape(self.means.shape[0], -1)
        diff = y[:, None, :] - self.means
        _, logdet = np.linalg.slogdet(self.covs)
        sol = np.linalg.solve(self.covs, diff[..., None])[..., 0]
        quad = np.einsum("ntd,ntd->nt", diff, sol)
        d = self.n_outputs
        comp = -0.5 * (quad + logdet + d * np.log(2 * np.pi))
        return logsumexp(comp, axis=1) - np.log(self.means.shape[1])

    def cdf(self, values: np.ndarray, dim: int = 0) -> np.ndarray:
        """Marginal CDF of output `dim` at one value per point, shape (n,)."""
        mu, sd = self._marginal(dim)
        return np.mean(ndtr((np.asarray(values)[:, None] - mu) / sd), axis=1)

    def quantile(self, q, dim: int = 0, tol: float = 1e-9) -> np.ndarray:
        """Marginal quantiles of output `dim` by bisection on the mixture CDF.

        Parameters
        ----------
        q : float or sequence of floats in (0, 1)

        Returns
        -------
        (n,) for a scalar q, else (n, len(q))
        """
        qs = np.atleast_1d(np.asarray(q, dtype=np.float64))
        if np.any((qs <= 0) | (qs >= 1)):
            raise ValueError("quantile levels must lie strictly between 0 and 1")
        mu, sd = self._marginal(dim)
        out = np.empty((mu.shape[0], qs.size))
        for k, level in enumerate(qs):
            lo = (mu - 10 * sd).min(axis=1)
            hi = (mu + 10 * sd).max(axis=1)
            for _ in range(200):  # bisection halves the bracket; stop once below tolerance
                mid = 0.5 * (lo + hi)
                below = self.cdf(mid, dim) < level
                lo = np.where(below, mid, lo)
                hi = np.where(below, hi, mid)
                if np.all(hi - lo <= tol * (1 + np.abs(mid))):
                    break
            out[:, k] = 0.5 * (lo + hi)
        return out[:, 0] if np.ndim(q) == 0 else out

    def mode(self, n_iter: int = 50, n_starts: int = 8) -> np.ndarray:
        """argmax_y p(y | x) per point, shape (n, d).

        One output: the best of a 1024-point grid over the mixture's support, refined by mean-shift. Several
        outputs: mean-shift (fixed-point) iterations from the `n_starts` component means of highest density.
        """
        n, T, d = self.means.shape
        if d == 1:
            mu, sd = self._marginal(0)
            lo = (mu - 5 * sd).min(axis=1)
            hi = (mu + 5 * sd).max(axis=1)
            frac = np.linspace(0.0, 1.0, 1024)
            best = np.empty((n, 1))
            for i0 in range(0, n, 256):  # bounded memory: 256 points x 1024 grid x T
                sl = slice(i0, i0 + 256)
                grid = lo[sl, None] + frac[None, :] * (hi - lo)[sl, None]
                z = (grid[:, None, :] - mu[sl, :, None]) / sd[sl, :, None]
                dens = np.mean(np.exp(-0.5 * z * z) / sd[sl, :, None], axis=1)
                best[sl, 0] = grid[np.arange(grid.shape[0]), np.argmax(dens, axis=1)]
            starts = best[:, None, :]
        else:
            scores = np.stack([self.logpdf(self.means[:, t, :]) for t in range(T)], axis=1)
            top = np.argsort(-scores, axis=1)[:, :min(n_starts, T)]
            starts = np.take_along_axis(self.means, top[:, :, None], axis=1)
        prec = np.linalg.inv(self.covs)
        _, logdet = np.linalg.slogdet(self.covs)
        prec_mu = np.einsum("ntde,nte->ntd", prec, self.means)
        best = starts[:, 0, :].copy()
        best_val = np.full(n, -np.inf)
        for k in range(starts.shape[1]):
            y = starts[:, k, :].copy()
            for _ in range(n_iter):
                diff = y[:, None, :] - self.means
                logw = -0.5 * (np.einsum("ntd,ntde,nte->nt", diff, prec, diff) + logdet)
                w = np.exp(logw - logw.max(axis=1, keepdims=True))
                y_new = np.linalg.solve(np.einsum("nt,ntde->nde", w, prec),
                                        np.einsum("nt,ntd->nd", w, prec_mu)[..., None])[..., 0]
                done = np.allclose(y_new, y, rtol=1e-10, atol=1e-12)
                y = y_new
                if done:
                    break
            val = self.logpdf(y)
            better = val > best_val
            best[better] = y[better]
            best_val[better] = val[better]
        return best
