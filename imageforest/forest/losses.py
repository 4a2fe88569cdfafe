"""Global losses for alternating decision forests: sample weights from the whole forest's margins.

Trees are grown level by level; after each level the forest so far classifies every training point (the average
over trees of the class histograms of the nodes the point sits in), and the point's weight for the next level is
the magnitude of the loss gradient at its margin, |dl/dm| (Schulter et al., "Alternating decision forests",
CVPR 2013, eq. 8): points the forest already gets right count less. The margin of a point with class y is
m = p(y | x) - max over k != y of p(k | x), in [-1, 1].

Losses, as functions of the margin m: logit log(1 + e^-m), exponential e^-m, Savage 1 / (1 + e^2m)^2 (Masnadi-
Shirazi and Vasconcelos, NIPS 2008), tangent (2 arctan(m) - 1)^2 (Masnadi-Shirazi et al., 2010), hinge max(0, 1 - m).
"""

from __future__ import annotations

import numpy as np

from imageforest.kernels import njit

LOSSES = ("logit", "exponential", "savage", "tangent", "hinge")


def loss_gradient(name: str, margin: np.ndarray) -> np.ndarray:
    """|dl/dm| of the named loss at each margin (same shape, float64)."""
    m = np.asarray(margin, dtype=np.float64)
    if name == "logit":
        return 1.0 / (1.0 + np.exp(m))
    if name == "exponential":
        return np.exp(-m)
    if name == "savage":
        e = np.exp(2.0 * m)
        return 4.0 * e / (1.0 + e) ** 3
    if name == "tangent":
        return np.abs(4.0 * (2.0 * np.arctan(m) - 1.0) / (1.0 + m * m))
    if name == "hinge":
        return (m < 1.0).astype(np.float64)
    raise ValueError(f"loss must be one of {', '.join(LOSSES)}, got {name!r}")


@njit(cache=True)
def _add_segments(order, weights, per_point, seg_start, seg_end, labels, prob, count):  # pragma: no cover - numba
    """Add each segment's weighted class posterior to prob[i] of every point i it holds, and 1 to count[i].

    `weights` are per position, or per point when `per_point`. A segment holding few of the classes adds only
    those (adding 0.0 changes no sum, and deep nodes hold one or two classes).
    """
    n_classes = prob.shape[1]
    hist = np.zeros(n_classes)
    held = np.empty(n_classes, dtype=np.int64)
    for s in range(seg_start.shape[0]):
        hist[:] = 0.0
        for pos in range(seg_start[s], seg_end[s]):
            lab = labels[order[pos]]
            if lab >= 0:
                hist[lab] += weights[order[pos]] if per_point else weights[pos]
        total = hist.sum()
        if total > 0.0:
            hist /= total
        n_held = 0
        for k in range(n_classes):
            if hist[k] != 0.0:
                held[n_held] = k
                n_held += 1
        if 2 * n_held > n_classes:  # most classes: one contiguous pass (vectorised) beats the indirection
            for pos in range(seg_start[s], seg_end[s]):
                i = order[pos]
                count[i] += 1.0
                for k in range(n_classes):
                    prob[i, k] += hist[k]
        else:
            for pos in range(seg_start[s], seg_end[s]):
                i = order[pos]
                count[i] += 1.0
                for h in range(n_held):
                    prob[i, held[h]] += hist[held[h]]


@njit(cache=True)
def loss_weights(order, sample_weight, scale):  # pragma: no cover - numba
    """(n_positions,) sample_weight[order] * scale[order]: the weights a global loss gives the next level."""
    out = np.empty(order.shape[0])
    for pos in range(order.shape[0]):
        i = order[pos]
        out[pos] = sample_weight[i] * scale[i]
    return out


@njit(cache=True)
def _margin_of(prob, count, labels):  # pragma: no cover - numba
    """(n_points,) margins from the summed posteriors `prob` (n_points, C) of `count` trees per point."""
    n_points, n_classes = prob.shape
    margin = np.zeros(n_points)
    for i in range(n_points):
        y = labels[i]
        if count[i] == 0.0 or y < 0:
            continue
        other = -np.inf
        for k in range(n_classes):
            if k != y and prob[i, k] > other:
                other = prob[i, k]
        margin[i] = (prob[i, y] - other) / count[i] if n_classes > 1 else prob[i, y] / count[i]
    return margin


def forest_margins(order: np.ndarray, base_weights: np.ndarray, seg_start: np.ndarray, seg_end: np.ndarray,
                   labels: np.ndarray, n_classes: int, n_points: int) -> np.ndarray:
    """Margin of every training point under the forest grown so far.

    Parameters
    ----------
    order : (n_positions,) point index at each position; every tree's positions form segments, one per node
    base_weights : (n_positions,) weight of each position for the class histograms
    seg_start, seg_end : (n_segments,) the current nodes (frontier and finished leaves) of every tree
    labels : (n_points,) class index per point (negative: unlabelled, no histogram entry, margin 0)
    n_classes, n_points : int

    Returns
    -------
    (n_points,) float64 margins, the class posteriors averaged over the trees holding each point; a point in no
    segment (not drawn for any tree) gets 0.
    """
    prob, count = np.zeros((int(n_points), int(n_classes))), np.zeros(int(n_points))
    labels = np.ascontiguousarray(labels, dtype=np.int32)
    _add_segments(np.ascontiguousarray(order), np.ascontiguousarray(base_weights, dtype=np.float64), False,
                  np.ascontiguousarray(seg_start, dtype=np.int64), np.ascontiguousarray(seg_end, dtype=np.int64),
                  labels, prob, count)
    return _margin_of(prob, count, labels)


class GrowingMargins:
    """`forest_margins` of a forest grown level by level, without summing the finished leaves again every level.

    A finished leaf's posterior and its points do not change while the forest grows deeper, so each leaf is added
    once, when it is made, to sums kept from level to level; a level adds only its frontier nodes to a copy of them.
    Points sum their trees' posteriors in the order the leaves were made, then the frontier's (the same order on
    any thread count).
    """

    def __init__(self, labels: np.ndarray, n_classes: int, n_points: int) -> None:
        self.labels = np.ascontiguousarray(labels, dtype=np.int32)
        self.prob = np.zeros((int(n_points), int(n_classes)))
        self.count = np.zeros(int(n_points))
        self.n_leaves = 0

    def margins(self, order: np.ndarray, sample_weight: np.ndarray, leaf_start: np.ndarray, leaf_end: np.ndarray,
                front_start: np.ndarray, front_end: np.ndarray) -> np.ndarray:
        """(n_points,) margins with the finished leaves `leaf_start/leaf_end` (the leaves of earlier calls first, in
        the same order) and the frontier nodes `front_start/front_end` (segments of `order`); `sample_weight`
        (n_points,) weighs the points in the class histograms."""
        order = np.ascontiguousarray(order)
        weights = np.ascontiguousarray(sample_weight, dtype=np.float64)
        new = slice(self.n_leaves, len(leaf_start))
        _add_segments(order, weights, True, np.ascontiguousarray(leaf_start[new], dtype=np.int64),
                      np.ascontiguousarray(leaf_end[new], dtype=np.int64), self.labels, self.prob, self.count)
        self.n_leaves = len(leaf_start)
        prob, count = self.prob.copy(), self.count.copy()
        _add_segments(order, weights, True, np.ascontiguousarray(front_start, dtype=np.int64),
                      np.ascontiguousarray(front_end, dtype=np.int64), self.labels, prob, count)
        return _margin_of(prob, count, self.labels)
