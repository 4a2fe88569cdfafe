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
def _margins(order, base_weights, seg_start, seg_end, labels, n_classes, n_points):  # pragma: no cover - numba
    # serial: one pass over the positions, cheap beside a level's split search, and the same sums on any thread count
    prob = np.zeros((n_points, n_classes))
    count = np.zeros(n_points)
    hist = np.zeros(n_classes)
    for s in range(seg_start.shape[0]):
        hist[:] = 0.0
        for pos in range(seg_start[s], seg_end[s]):
            lab = labels[order[pos]]
            if lab >= 0:
                hist[lab] += base_weights[pos]
        total = hist.sum()
        if total > 0.0:
            hist /= total
        for pos in range(seg_start[s], seg_end[s]):
            i = order[pos]
            count[i] += 1.0
            for k in range(n_classes):
                prob[i, k] += hist[k]
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
    return _margins(np.ascontiguousarray(order), np.ascontiguousarray(base_weights, dtype=np.float64),
                    np.ascontiguousarray(seg_start, dtype=np.int64), np.ascontiguousarray(seg_end, dtype=np.int64),
                    np.ascontiguousarray(labels, dtype=np.int32), int(n_classes), int(n_points))
