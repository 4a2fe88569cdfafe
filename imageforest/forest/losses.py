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

from imageforest.forest.threads import run_ranges
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


def loss_weights(order: np.ndarray, sample_weight: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """(n_positions,) sample_weight[order] * scale[order]: the weights a global loss gives the next level."""
    out = np.empty(order.shape[0])
    run_ranges(_loss_weights_range, order.shape[0], order, sample_weight, scale, out, min_per_thread=1 << 16)
    return out


@njit(cache=True, nogil=True)
def _loss_weights_range(p0, p1, order, sample_weight, scale, out):  # pragma: no cover - numba
    for pos in range(p0, p1):
        i = order[pos]
        out[pos] = sample_weight[i] * scale[i]


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
    # dtypes fixed here so that every caller shares one compiled kernel
    order = np.ascontiguousarray(order, dtype=np.int32)
    _add_segments(order, np.ascontiguousarray(base_weights, dtype=np.float64), False,
                  np.ascontiguousarray(seg_start, dtype=np.int64), np.ascontiguousarray(seg_end, dtype=np.int64),
                  labels, prob, count)
    margin = np.empty(int(n_points))
    _group_margins(0, margin.size, prob[None], count[None], labels, margin)
    return margin


# The frontier's trees are summed in this many groups (fewer when the groups' sums would pass the budget), each on
# its own sums, whatever the thread count: a seed then fixes the margins' bits on any machine.
MARGIN_GROUPS = 4
MARGIN_GROUP_BYTES = 1 << 29


class GrowingMargins:
    """`forest_margins` of a forest grown level by level, without summing the finished leaves again every level.

    A finished leaf's posterior and its points do not change while the forest grows deeper, so each leaf is added
    once, when it is made, to sums kept from level to level. A level adds its frontier nodes tree group by tree
    group (`MARGIN_GROUPS`), each group into sums of its own on whichever thread is free, and a point's margin
    adds its groups' sums in group order (the same bits on any thread count).
    """

    def __init__(self, labels: np.ndarray, n_classes: int, n_points: int, n_trees: int) -> None:
        self.labels = np.ascontiguousarray(labels, dtype=np.int32)
        self.prob = np.zeros((int(n_points), int(n_classes)))
        self.count = np.zeros(int(n_points))
        self.n_leaves = 0
        room = MARGIN_GROUP_BYTES // max(1, 8 * (int(n_classes) + 1) * int(n_points))
        groups = int(np.clip(room, 1, min(MARGIN_GROUPS, int(n_trees))))
        self.group_prob = np.empty((groups, int(n_points), int(n_classes)))
        self.group_count = np.empty((groups, int(n_points)))
        # tree t's frontier nodes go to group t * groups // n_trees
        self.group_tree = (np.arange(groups + 1) * int(n_trees) + groups - 1) // groups

    def margins(self, order: np.ndarray, sample_weight: np.ndarray, leaf_start: np.ndarray, leaf_end: np.ndarray,
                front_start: np.ndarray, front_end: np.ndarray, front_tree: np.ndarray) -> np.ndarray:
        """(n_points,) margins with the finished leaves `leaf_start/leaf_end` (the leaves of earlier calls first, in
        the same order) and the frontier nodes `front_start/front_end` (segments of `order`) of trees `front_tree`
        (ascending); `sample_weight` (n_points,) weighs the points in the class histograms."""
        order = np.ascontiguousarray(order, dtype=np.int32)
        weights = np.ascontiguousarray(sample_weight, dtype=np.float64)
        new = slice(self.n_leaves, len(leaf_start))
        _add_segments(order, weights, True, np.ascontiguousarray(leaf_start[new], dtype=np.int64),
                      np.ascontiguousarray(leaf_end[new], dtype=np.int64), self.labels, self.prob, self.count)
        self.n_leaves = len(leaf_start)
        group_first = np.searchsorted(np.asarray(front_tree), self.group_tree).astype(np.int64)
        run_ranges(_add_groups, self.group_prob.shape[0], group_first, order, weights,
                   np.ascontiguousarray(front_start, dtype=np.int64), np.ascontiguousarray(front_end, dtype=np.int64),
                   self.labels, self.prob, self.count, self.group_prob, self.group_count)
        margin = np.empty(self.prob.shape[0])
        run_ranges(_group_margins, margin.size, self.group_prob, self.group_count, self.labels, margin,
                   min_per_thread=4096)
        return margin


@njit(cache=True, nogil=True)
def _add_groups(g0, g1, group_first, order, weights, f_start, f_end, labels, prob, count, group_prob,
                group_count):  # pragma: no cover - numba
    """Groups g0..g1: group g's frontier nodes group_first[g]..group_first[g + 1] added onto the finished leaves'
    sums (group 0) or onto zeros (the others)."""
    for g in range(g0, g1):
        if g == 0:
            group_prob[0, :, :] = prob
            group_count[0, :] = count
        else:
            group_prob[g, :, :] = 0.0
            group_count[g, :] = 0.0
        s0 = group_first[g]
        s1 = group_first[g + 1]
        _add_segments(order, weights, True, f_start[s0:s1], f_end[s0:s1], labels, group_prob[g], group_count[g])


@njit(cache=True, nogil=True)
def _group_margins(i0, i1, group_prob, group_count, labels, margin):  # pragma: no cover - numba
    """Margins of points i0..i1 from their groups' summed posteriors group_prob[:, i] (n_groups, C) of
    group_count[:, i] trees, added in group order: m = (p(y) - max over k != y of p(k)) / trees; 0 in no tree."""
    n_groups, _, n_classes = group_prob.shape
    acc = np.empty(n_classes)
    for i in range(i0, i1):
        c = group_count[0, i]
        for k in range(n_classes):
            acc[k] = group_prob[0, i, k]
        for g in range(1, n_groups):
            c += group_count[g, i]
            for k in range(n_classes):
                acc[k] += group_prob[g, i, k]
        y = labels[i]
        if c == 0.0 or y < 0:
            margin[i] = 0.0
            continue
        other = -np.inf
        for k in range(n_classes):
            if k != y and acc[k] > other:
                other = acc[k]
        margin[i] = (acc[y] - other) / c if n_classes > 1 else acc[y] / c
