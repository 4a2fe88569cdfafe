"""Training objectives as sufficient statistics plus an impurity (Criminisi et al. 2012, sec. 3.2, eq. 4.6, App. A).

Every objective accumulates a fixed-length statistics vector per set of points, so the split search can bin
responses, take prefix sums and score any left/right partition in O(S). Layouts:

- classification (``ENTROPY``, ``GINI``): S = n_classes weighted class counts.
- regression (``GAUSSIAN``, ``SQUARED_ERROR``): the target is split into ``n_blocks`` blocks of ``q`` dimensions
  (one block for ordinary multivariate regression; one block per organ for localization). Per block:
  ``[w, sum y (q), sum y y^T (q*q)]``. A point whose block is NaN does not contribute to that block, so an organ
  missing from a scan does not pull its statistics.

- semi-supervised (``MIXED``, eq. 7.1-7.3): ``n_classes`` class weights of the labelled points (label -1 adds
  nothing), then one Gaussian block over the inputs of all points.

`weighted_impurity` returns W * H(S) (W the set's weight), so a split's information gain is
(imp(parent) - imp(left) - imp(right)) / W_parent, which is eq. 3.x / A.3 for each objective. For ``MIXED`` the
supervised term is added with the factor `supervised_scale(parent)` = alpha W_all / W_labelled, which turns the
sum into I_u + alpha I_s with each gain normalised by its own set, as in eq. 7.1.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from imageforest.kernels import njit

ENTROPY, GINI, GAUSSIAN, SQUARED_ERROR, MIXED = 0, 1, 2, 3, 4
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
    lifted : (n, n_stats) float64 or None
        Each point's own statistics row, precomputed when the rows are wide (many blocks): the split search then
        adds rows instead of rebuilding outer products per point and candidate.
    """

    criterion: int
    labels: np.ndarray
    targets: np.ndarray
    n_classes: int = 0
    n_blocks: int = 0
    q: int = 0
    reg: np.ndarray = None  # type: ignore[assignment]
    lifted: np.ndarray | None = None

    @property
    def n_stats(self) -> int:
        if self.criterion in (ENTROPY, GINI):
            return self.n_classes
        blocks = self.n_blocks * (1 + self.q + self.q * self.q)
        return blocks + (self.n_classes if self.criterion == MIXED else 0)

    @classmethod
    def classification(cls, labels: np.ndarray, n_classes: int, criterion: str = "entropy") -> Objective:
        return cls(CRITERIA[criterion], np.ascontiguousarray(labels, dtype=np.int32),
                   np.zeros((0, 0)), n_classes=n_classes, n_blocks=0, q=0, reg=np.zeros(1))

    @classmethod
    def semi_supervised(cls, labels: np.ndarray, n_classes: int, inputs: np.ndarray, alpha: float,
                        relative_floor: float = 1e-3) -> Objective:
        """Mixed gain over `inputs` (n, d) for all points and class `labels` (-1: unlabelled); `reg` carries the
        Gaussian variance floor followed by alpha."""
        gauss = cls.regression(inputs, "gaussian", relative_floor=relative_floor)
        return cls(MIXED, np.ascontiguousarray(labels, dtype=np.int32), gauss.targets, n_classes=n_classes,
                   n_blocks=1, q=gauss.q, reg=np.array([gauss.reg[0], float(alpha)]))

    @classmethod
    def regression(cls, targets: np.ndarray, criterion: str = "gaussian", block_size: int | None = None,
                   relative_floor: float = 1e-3, variance_floor: float | None = None) -> Objective:
        """Regression statistics over `targets` (n, d), optionally in blocks of `block_size` dimensions.

        The Gaussian variance floor is `relative_floor` times the block's mean per-dimension variance, or
        `variance_floor` (target units squared) when given: it keeps log det finite for tiny or degenerate sets
        (e.g. box walls whose differences are fixed within a scan) without favouring isolating them.
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
            reg[b] = relative_floor * (var if var > 0 else 1.0) if variance_floor is None else variance_floor
        out = cls(CRITERIA[criterion], np.zeros(0, dtype=np.int32), targets, n_classes=0,
                  n_blocks=n_blocks, q=q, reg=reg)
        if n_blocks > 1 and criterion == "gaussian":
            out.lifted = lift_rows(targets, n_blocks, q)
        return out


@dataclass
class NodeObjectives:
    """Several objectives over the same points, one chosen per node: a node that may split optimises
    `objectives[k]` with k = `choose(depth, n_nodes, rng)[i]` for the i-th such node of a level.

    Class-specific Hough forests choose, node by node at random, between the class-label uncertainty of the patches
    and the offset uncertainty of the foreground patches (Gall and Lempitsky, "Class-specific Hough forests for
    object detection", CVPR 2009; Criminisi et al. 2012, sec. 3.5 and ch. 4). A node counts as pure, and becomes a
    leaf, only when it is pure for every objective.

    Attributes
    ----------
    objectives : the objectives (each over all the points; NaN targets contribute nothing, as usual)
    choose : (depth, n_nodes, rng) -> (n_nodes,) int objective index per node; draws from `rng` only
    """

    objectives: Sequence[Objective]
    choose: Callable[[int, int, np.random.Generator], np.ndarray]

    @classmethod
    def random(cls, objectives: Sequence[Objective], p: Sequence[float] | None = None) -> NodeObjectives:
        """Each node picks objective k with probability p[k] (uniform by default)."""
        probs = None if p is None else np.asarray(p, dtype=np.float64) / np.sum(p)

        def choose(depth: int, n: int, rng: np.random.Generator) -> np.ndarray:
            return rng.choice(len(objectives), size=n, p=probs)

        return cls(list(objectives), choose)

    @classmethod
    def by_depth(cls, objectives: Sequence[Objective], schedule: Callable[[int], int]) -> NodeObjectives:
        """Every node at depth d optimises objective `schedule(d)` (no randomness drawn)."""

        def choose(depth: int, n: int, rng: np.random.Generator) -> np.ndarray:
            return np.full(n, int(schedule(depth)), dtype=np.int64)

        return cls(list(objectives), choose)


def lift_rows(targets: np.ndarray, n_blocks: int, q: int) -> np.ndarray:
    """Every point's Gaussian statistics row [1, y, y y^T] per block (zeros for a NaN block), (n, n_stats)."""
    n = targets.shape[0]
    stride = 1 + q + q * q
    rows = np.zeros((n, n_blocks * stride))
    for b in range(n_blocks):
        y = targets[:, b * q:(b + 1) * q]
        has = ~np.isnan(y[:, 0])
        yz = np.where(has[:, None], y, 0.0)
        base = b * stride
        rows[:, base] = has
        rows[:, base + 1:base + 1 + q] = yz
        rows[:, base + 1 + q:base + stride] = (yz[:, :, None] * yz[:, None, :]).reshape(n, q * q)
    return rows


@njit(cache=True, inline="always")
def accumulate(row, i, w, criterion, labels, targets, n_blocks, q):  # pragma: no cover - numba
    """Add point i with weight w to the statistics vector `row`."""
    if criterion <= GINI:
        row[labels[i]] += w
        return
    stride = 1 + q + q * q
    offset = row.shape[0] - n_blocks * stride  # the class counts in front of a MIXED row; 0 otherwise
    if criterion == MIXED and labels[i] >= 0:
        row[labels[i]] += w
    for b in range(n_blocks):
        y0 = b * q
        if math.isnan(targets[i, y0]):
            continue
        base = offset + b * stride
        row[base] += w
        for a in range(q):
            ya = targets[i, y0 + a]
            row[base + 1 + a] += w * ya
            if criterion != SQUARED_ERROR:
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
    # det = product of the squared pivots; one log at the end (rescaled if the product leaves a safe range)
    # rather than q logs: this runs for every candidate split of every block.
    half_logdet = 0.0
    prod = 1.0
    for j in range(q):
        s = work[j, j]
        for k in range(j):
            s -= work[j, k] * work[j, k]
        if s < reg:  # rounding can push a tiny variance below zero; the floor is the smallest it can be
            s = reg
        d = math.sqrt(s)
        work[j, j] = d
        prod *= s
        if prod > 1e150 or prod < 1e-150:
            half_logdet += 0.5 * math.log(prod)
            prod = 1.0
        for i in range(j + 1, q):
            t = work[i, j]
            for k in range(j):
                t -= work[i, k] * work[j, k]
            work[i, j] = t / d
    return half_logdet + 0.5 * math.log(prod)


@njit(cache=True, inline="always")
def _class_impurity(row, n, gini):  # pragma: no cover - numba
    """W * H of the first n entries (class weights): Shannon entropy, or Gini impurity."""
    total = 0.0
    for k in range(n):
        total += row[k]
    if total <= 0.0:
        return 0.0
    if gini:
        acc = 1.0
        for k in range(n):
            p = row[k] / total
            acc -= p * p
        return total * acc
    acc = 0.0
    for k in range(n):
        if row[k] > 0.0:
            p = row[k] / total
            acc -= p * math.log(p)
    return total * acc


@njit(cache=True, inline="always")
def weighted_impurity(row, criterion, n_blocks, q, reg, work, mix):  # pragma: no cover - numba
    """W * H for the statistics vector `row`; `mix` weighs the supervised term of MIXED rows (else unused).

    The class term is written once for both classification and MIXED rows: this function is inlined three times
    into every split scorer, and each copy of the class impurity costs compile time on a first run.
    """
    acc = 0.0
    n_class = row.shape[0]
    class_weight = 1.0
    if criterion > GINI:
        stride = 1 + q + q * q
        offset = row.shape[0] - n_blocks * stride
        for b in range(n_blocks):
            base = offset + b * stride
            w = row[base]
            if w <= 0.0:
                continue
            if criterion == SQUARED_ERROR:
                for a in range(q):
                    s = row[base + 1 + a]
                    acc += row[base + 1 + q + a * q + a] - s * s / w
            else:
                acc += w * _half_logdet_cov(row, base, q, reg[b], work)
        n_class = offset if criterion == MIXED and mix > 0.0 else 0
        class_weight = mix
    if n_class > 0:
        acc += class_weight * _class_impurity(row, n_class, criterion == GINI)
    return acc


@njit(cache=True, inline="always")
def supervised_scale(parent, criterion, n_blocks, q, reg):  # pragma: no cover - numba
    """alpha W_all / W_labelled of a MIXED parent (0 without labelled points); 1.0 for other criteria."""
    if criterion != MIXED:
        return 1.0
    offset = parent.shape[0] - n_blocks * (1 + q + q * q)
    w_lab = 0.0
    for k in range(offset):
        w_lab += parent[k]
    if w_lab <= 0.0:
        return 0.0
    return reg[n_blocks] * parent[offset] / w_lab
