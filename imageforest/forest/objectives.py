"""Training objectives as sufficient statistics plus an impurity (seeds/000 sec. 3.2, eq. 4.6, App. A).

Every objective accumulates a fixed-length statistics vector per set of points, so the split search can bin
responses, take prefix sums and score any left/right partition in O(S). Layouts:

- classification (``ENTROPY``, ``GINI``): S = n_classes weighted class counts.
- regression (``GAUSSIAN``, ``SQUARED_ERROR``): the target is split into ``n_blocks`` blocks of ``q`` dimensions
  (one block for ordinary multivariate regression; one block per organ for localization). Per block:
  ``[w, sum y (q), sum y y^T (q*q)]``. A point whose block is NaN does not contribute to that block, so an organ
  missing from a scan does not pull its statistics.

`weighted_impurity` returns W * H(S) (W the set's weight), so a split's information gain is
(imp(parent) - imp(left) - imp(right)) / W_parent, which is eq. 3.x / A.3 for each objective.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit

ENTROPY, GINI, GAUSSIAN, SQUARED_ERROR = 0, 1, 2, 3
CRITERIA = {"entropy": ENTROPY, "gini": GINI, "gaussian": GAUSSIAN, "squared_error": SQUARED_ERROR}


@dataclass
class Objective:
    """What the split search needs to score partitions.

    Attributes
    ----------
    criterion : int
        One of ENTROPY, GINI, GAUSSIAN, SQUARED_ERROR.
    labels : (n,) int32
        Class index per point (classification; length-0 array otherwise).
    targets : (n, n_blocks * q) float64
        Targets (regression; (0, 0) otherwise). NaN marks a missing block.
    n_classes, n_blocks, q : int
    reg : (n_blocks,) float64
        Variance floor added to each block's covariance diagonal before log det (Gaussian).
    """

    criterion: int
    labels: np.ndarray
    targets: np.ndarray
    n_classes: int = 0
    n_blocks: int = 0
    q: int = 0
    reg: np.ndarray = None  # type: ignore[assignment]

    @property
    def n_stats(self) -> int:
        if self.criterion in (ENTROPY, GINI):
            return self.n_classes
        return self.n_blocks * (1 + self.q + self.q * self.q)

    @classmethod
    def classification(cls, labels: np.ndarray, n_classes: int, criterion: str = "entropy") -> Objective:
        return cls(CRITERIA[criterion], np.ascontiguousarray(labels, dtype=np.int32),
                   np.zeros((0, 0)), n_classes=n_classes, n_blocks=0, q=0, reg=np.zeros(1))

    @classmethod
    def regression(cls, targets: np.ndarray, criterion: str = "gaussian", block_size: int | None = None,
                   relative_floor: float = 1e-3) -> Objective:
        """Regression statistics over `targets` (n, d), optionally in blocks of `block_size` dimensions.

        The Gaussian variance floor is `relative_floor` times the block's mean per-dimension variance: it keeps
        log det finite for tiny sets without favouring isolating single points.
        """
        targets = np.ascontiguousarray(targets, dtype=np.float64)
        d = targets.shape[1]
        q = d if block_size is None else int(block_size)
        n_blocks = d // q
        reg = np.empty(n_blocks)
        for b in range(n_blocks):
            block = targets[:, b * q:(b + 1) * q]
            block = block[~np.isnan(block[:, 0])]
            var = float(np.mean(np.var(block, axis=0))) if block.shape[0] > 1 else 1.0
            reg[b] = relative_floor * (var if var > 0 else 1.0)
        return cls(CRITERIA[criterion], np.zeros(0, dtype=np.int32), targets, n_classes=0,
                   n_blocks=n_blocks, q=q, reg=reg)


@njit(cache=True, inline="always")
def accumulate(row, i, w, criterion, labels, targets, n_blocks, q):  # pragma: no cover - numba
    """Add point i with weight w to the statistics vector `row`."""
    if criterion <= GINI:
        row[labels[i]] += w
        return
    stride = 1 + q + q * q
    for b in range(n_blocks):
        y0 = b * q
        if math.isnan(targets[i, y0]):
            continue
        base = b * stride
        row[base] += w
        for a in range(q):
            ya = targets[i, y0 + a]
            row[base + 1 + a] += w * ya
            if criterion == GAUSSIAN:
                for c in range(q):
                    row[base + 1 + q + a * q + c] += w * ya * targets[i, y0 + c]
            else:
                row[base + 1 + q + a * q + a] += w * ya * ya


@njit(cache=True)
def _half_logdet_cov(row, base, q, reg, work):  # pragma: no cover - numba
    """0.5 log det of the block covariance (plus reg on the diagonal) by an in-place Cholesky."""
    w = row[base]
    for a in range(q):
        ma = row[base + 1 + a] / w
        for c in range(q):
            mc = row[base + 1 + c] / w
            work[a, c] = row[base + 1 + q + a * q + c] / w - ma * mc
        work[a, a] += reg
    half_logdet = 0.0
    for j in range(q):
        s = work[j, j]
        for k in range(j):
            s -= work[j, k] * work[j, k]
        if s < reg:  # rounding can push a tiny variance below zero; the floor is the smallest it can be
            s = reg
        d = math.sqrt(s)
        work[j, j] = d
        half_logdet += math.log(d)
        for i in range(j + 1, q):
            t = work[i, j]
            for k in range(j):
                t -= work[i, k] * work[j, k]
            work[i, j] = t / d
    return half_logdet


@njit(cache=True, inline="always")
def weighted_impurity(row, criterion, n_blocks, q, reg, work):  # pragma: no cover - numba
    """W * H for the statistics vector `row` (W = the set's weight in each block)."""
    if criterion <= GINI:
        total = 0.0
        for k in range(row.shape[0]):
            total += row[k]
        if total <= 0.0:
            return 0.0
        acc = 0.0
        if criterion == ENTROPY:
            for k in range(row.shape[0]):
                if row[k] > 0.0:
                    p = row[k] / total
                    acc -= p * math.log(p)
        else:
            acc = 1.0
            for k in range(row.shape[0]):
                p = row[k] / total
                acc -= p * p
        return total * acc
    stride = 1 + q + q * q
    acc = 0.0
    for b in range(n_blocks):
        base = b * stride
        w = row[base]
        if w <= 0.0:
            continue
        if criterion == GAUSSIAN:
            acc += w * _half_logdet_cov(row, base, q, reg[b], work)
        else:
            for a in range(q):
                s = row[base + 1 + a]
                acc += row[base + 1 + q + a * q + a] - s * s / w
    return acc


@njit(cache=True)
def total_weight(row, criterion, n_blocks, q):  # pragma: no cover - numba
    """Weight of the set: class-count sum, or the largest block weight for regression."""
    if criterion <= GINI:
        return row.sum()
    stride = 1 + q + q * q
    best = 0.0
    for b in range(n_blocks):
        best = max(best, row[b * stride])
    return best
