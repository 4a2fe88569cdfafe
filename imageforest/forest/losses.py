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
    (n_points,) float64 margins; a point in no segment (not drawn for any tree) gets 0.
    """
    lengths = (seg_end - seg_start).astype(np.int64)
    seg_of = np.repeat(np.arange(lengths.size), lengths)
    positions = np.arange(lengths.sum()) + np.repeat(seg_start - (np.cumsum(lengths) - lengths), lengths)
    point = order[positions]
    lab = labels[point]
    known = lab >= 0
    hist = np.bincount(seg_of[known] * n_classes + lab[known], weights=base_weights[positions][known],
                       minlength=lengths.size * n_classes).reshape(lengths.size, n_classes)
    total = hist.sum(axis=1, keepdims=True)
    post = hist / np.where(total > 0, total, 1.0)
    # average over the trees holding each point
    prob = np.stack([np.bincount(point, weights=post[seg_of, k], minlength=n_points) for k in range(n_classes)], 1)
    count = np.bincount(point, minlength=n_points).astype(np.float64)
    prob /= np.maximum(count, 1.0)[:, None]
    y = np.where(labels >= 0, labels, 0)
    own = prob[np.arange(n_points), y]
    rest = prob.copy()
    rest[np.arange(n_points), y] = -np.inf
    margin = own - rest.max(axis=1) if n_classes > 1 else own
    return np.where((count > 0) & (labels >= 0), margin, 0.0)
