"""Depth-first growth of small nodes whose positions carry weights: bagging's counts or sample weights.

The weighted counterparts of `imageforest.forest.subtree_growth.grow_subtrees`, for class labels and for one
regression target: K uniform thresholds per candidate, bins that sum the positions' weights, and each root's
positions, weights and labels copied into local arrays, partitioned there and written back when its subtree is done
(as the every-threshold kernels of `subtree_growth` do). The search, the stopping rules and the per-subtree random
streams are those of the unit-weight kernels, so that equal weights choose the same splits (tested).
"""

from __future__ import annotations

import numpy as np

from imageforest.forest.random_streams import _uniform
from imageforest.forest.row_split_search import _gather_and_draw, _prefix_sums, _score_one_target
from imageforest.forest.split_search import _xlogx_of, whole_weight_xlogx
from imageforest.forest.subtree_growth import (
    CHUNKS_PER_THREAD,
    SubtreeNodes,
    _band,
    _chosen,
    _draw_rows,
    _load_root,
    _pop,
    _push_children,
    _record_leaf,
    _record_split,
    _split_local,
    _start_root,
    _store_root,
)
from imageforest.forest.threads import run_ranges
from imageforest.kernels import njit


def grow_weighted_class_subtrees(roots_start: np.ndarray, roots_end: np.ndarray, roots_depth: int,
                                 seeds: np.ndarray, P: np.ndarray, order: np.ndarray, wts: np.ndarray,
                                 pos_labels: np.ndarray, n_classes: int, gini: bool, rho: int, n_thresholds: int,
                                 configs: np.ndarray, min_samples_split: int, min_samples_leaf: int, min_gain: float,
                                 max_depth: int) -> SubtreeNodes:
    """`grow_subtrees` for class labels with a weight per position (bagging's counts, sample weights): K uniform
    thresholds per candidate, weighted class sums, and the positions' order, weights and labels partitioned in
    place.

    Parameters
    ----------
    P : (n_points, n_rows) float32, the training matrix point-major (C-contiguous)
    wts : (n_positions,) float64 weight per position; pos_labels : (n_positions,) class per position
    Others as in `grow_subtrees`.
    """
    R = roots_start.shape[0]
    nodes = SubtreeNodes.allocate(roots_end - roots_start)
    max_points = int((roots_end - roots_start).max()) if R else 1
    xlogx = np.zeros(0) if gini else whole_weight_xlogx(wts, roots_start, roots_end)
    run_ranges(_weighted_class_subtrees, R, roots_start, roots_end, roots_depth, seeds, nodes.cap_start,
               P.reshape(-1), P.shape[1], order, wts, pos_labels, n_classes, bool(gini), xlogx, max_points, rho,
               n_thresholds, configs, min_samples_split, min_samples_leaf, float(min_gain), max_depth,
               *nodes.columns(), chunks_per_thread=CHUNKS_PER_THREAD)
    return nodes.counted()


@njit(cache=True, inline="always")
def _weighted_impurity(row, width, w, gini, xlogx):  # pragma: no cover - numba
    """w H of weighted class sums row[:width] totalling w: w log w - sum c log c, or w - sum c^2 / w for Gini."""
    if not w > 0.0:
        return 0.0
    acc = 0.0
    if gini:
        for t in range(width):
            acc += row[t] * row[t]
        return w - acc / w
    for t in range(width):
        acc += _xlogx_of(row[t], xlogx)
    return _xlogx_of(w, xlogx) - acc


@njit(cache=True, inline="always")
def _weighted_class_candidate(P, n_rows, r, o_loc, a, n, u, vals, thr, clab, w_loc, width, configs, gini, min_leaf,
                              parent, w_node, xlogx, cum, ccount, lrow, rrow, gains):  # pragma: no cover - numba
    """`_class_candidate` with a weight per position: bins sum the weights, children's sizes (for min_leaf) count
    the positions, and gains are (parent - children) / the node's weight."""
    varies = _gather_and_draw(P, np.uint64(n_rows), np.uint64(r), o_loc, a, n, u, vals, thr)
    gains[:] = -np.inf
    if not varies:
        return
    k = thr.shape[0]
    for b in range(k + 2):
        ccount[b] = 0
        for j in range(width):
            cum[b, j] = 0.0
    for m in range(n):
        v = vals[m]
        b = 1
        for j in range(k):
            b += thr[j] < v
        cum[b, clab[m]] += w_loc[a + m]
        ccount[b] += 1
    _prefix_sums(cum, ccount, width)
    for g in range(configs.shape[0]):
        i = configs[g, 0]
        j = configs[g, 1]
        if g > 0 and i == configs[g - 1, 0] and ccount[j] == ccount[configs[g - 1, 1]]:
            gains[g] = gains[g - 1]  # the bins in between are empty: the same children
            continue
        n_left = ccount[j] - ccount[i]
        if n_left < min_leaf or n - n_left < min_leaf:
            continue
        w_left = 0.0
        for t in range(width):
            lrow[t] = cum[j, t] - cum[i, t]
            rrow[t] = cum[k + 1, t] - lrow[t]
            w_left += lrow[t]
        child = _weighted_impurity(lrow, width, w_left, gini, xlogx)
        child += _weighted_impurity(rrow, width, max(w_node - w_left, 0.0), gini, xlogx)
        gains[g] = (parent - child) / w_node


@njit(cache=True, nogil=True)
def _weighted_class_subtrees(r0, r1, roots_start, roots_end, roots_depth, seeds, cap_start, P, n_rows, order, wts,
                             labels, n_classes, gini, xlogx, max_points, rho, n_thr, configs, min_split, min_leaf,
                             min_gain, max_depth, row, thr_lo, thr_hi, left, depth, gain, weight, start, end,
                             used):  # pragma: no cover - numba
    """`grow_weighted_class_subtrees`, roots r0..r1. A root's positions, weights and labels are copied into local
    arrays and written back when its subtree is done, as `_sorted_subtrees` does."""
    n_cfg = configs.shape[0]
    state = np.zeros(1, dtype=np.uint64)
    perm = np.arange(n_rows)
    swaps = np.empty(rho, dtype=np.int64)
    rows = np.empty(rho, dtype=np.int64)
    u = np.empty(n_thr)
    cand_thr = np.empty((rho, n_thr), dtype=np.float32)
    out = np.empty((rho, n_cfg))
    vals = np.empty(max_points, dtype=np.float32)
    o_loc = np.empty(max_points, dtype=order.dtype)
    w_loc = np.empty(max_points)
    l_loc = np.empty(max_points, dtype=labels.dtype)
    clab = np.empty(max_points, dtype=np.int64)
    go = np.empty(max_points, dtype=np.bool_)
    tmp_o = np.empty(max_points, dtype=order.dtype)
    tmp_w = np.empty(max_points)
    tmp_l = np.empty(max_points, dtype=labels.dtype)
    stack = np.empty((max_points, 4), dtype=np.int64)
    totals = np.zeros(n_classes)
    index = np.empty(n_classes, dtype=np.int64)
    node_row = np.empty(n_classes)
    cum = np.empty((n_thr + 2, n_classes))
    ccount = np.empty(n_thr + 2, dtype=np.int64)
    lrow = np.empty(n_classes)
    rrow = np.empty(n_classes)
    for r in range(r0, r1):
        state[0] = seeds[r]
        base = cap_start[r]
        a0 = roots_start[r]
        n0 = roots_end[r] - a0
        _load_root(order, wts, labels, a0, n0, o_loc, w_loc, l_loc)
        n_used = 1
        top = _start_root(stack, 0, n0, roots_depth)
        while top >= 0:
            g, a, e, d, top = _pop(stack, top, base)
            n = e - a
            w_node = 0.0
            for m in range(a, e):
                totals[np.int64(l_loc[m])] += w_loc[m]
                w_node += w_loc[m]
            # the classes the node holds, in class order: their sums, and each position's column among them
            width = 0
            biggest = 0.0
            for t in range(n_classes):
                if totals[t] > 0.0:
                    index[t] = width
                    node_row[width] = totals[t]
                    biggest = max(biggest, totals[t])
                    width += 1
                totals[t] = 0.0
            if (n < min_split or n < 2 * min_leaf or d >= max_depth or not w_node > 0.0
                    or biggest >= w_node * (1.0 - 1e-12)):
                _record_leaf(g, a0 + a, a0 + e, d, w_node, row, thr_lo, thr_hi, gain, left, depth, weight, start, end)
                continue
            for m in range(n):
                clab[m] = index[np.int64(l_loc[a + m])]
            parent = _weighted_impurity(node_row, width, w_node, gini, xlogx)
            _draw_rows(state, n_rows, rho, perm, swaps, rows)
            for c in range(rho):
                for j in range(n_thr):
                    u[j] = _uniform(state)
                _weighted_class_candidate(P, n_rows, rows[c], o_loc, a, n, u, vals, cand_thr[c], clab, w_loc, width,
                                          configs, gini, min_leaf, parent, w_node, xlogx, cum, ccount, lrow, rrow,
                                          out[c])
            best = _chosen(state, out, min_gain)
            if best < 0:
                _record_leaf(g, a0 + a, a0 + e, d, w_node, row, thr_lo, thr_hi, gain, left, depth, weight, start, end)
                continue
            c = best // n_cfg
            lo, hi = _band(cand_thr[c], configs, best % n_cfg)
            nl = _split_local(P, n_rows, rows[c], lo, hi, o_loc, w_loc, l_loc, a, n, go, tmp_o, tmp_w, tmp_l)
            _record_split(g, rows[c], lo, hi, out[c, best % n_cfg], d, w_node, n_used, row, thr_lo, thr_hi, gain,
                          depth, weight, left)
            top = _push_children(stack, top, n_used, a, a + nl, e, d + 1)
            n_used += 2
        used[r] = n_used
        _store_root(order, wts, labels, a0, n0, o_loc, w_loc, l_loc)


def grow_weighted_one_target_subtrees(roots_start: np.ndarray, roots_end: np.ndarray, roots_depth: int,
                                      seeds: np.ndarray, P: np.ndarray, order: np.ndarray, wts: np.ndarray,
                                      pos_targets: np.ndarray, squared: bool, reg: float, rho: int,
                                      n_thresholds: int, configs: np.ndarray, min_samples_split: int,
                                      min_samples_leaf: int, min_gain: float, max_depth: int) -> SubtreeNodes:
    """`grow_subtrees` for one regression target with a weight per position (bagging's counts, sample weights):
    weighted sums per bin, scored as the level-wise one-target scorer does.

    Parameters
    ----------
    wts : (n_positions,) float64 weight per position; pos_targets : (n_positions, 1) float64 target per position
    Others as in `grow_subtrees`.
    """
    R = roots_start.shape[0]
    nodes = SubtreeNodes.allocate(roots_end - roots_start)
    max_points = int((roots_end - roots_start).max()) if R else 1
    targets = np.ascontiguousarray(pos_targets[:, 0])
    run_ranges(_weighted_one_target_subtrees, R, roots_start, roots_end, roots_depth, seeds, nodes.cap_start,
               P.reshape(-1), P.shape[1], order, wts, targets, bool(squared), float(reg), max_points, rho,
               n_thresholds, configs, min_samples_split, min_samples_leaf, float(min_gain), max_depth,
               *nodes.columns(), chunks_per_thread=CHUNKS_PER_THREAD)
    if not np.shares_memory(targets, pos_targets):
        pos_targets[:, 0] = targets
    return nodes.counted()


@njit(cache=True, nogil=True)
def _weighted_one_target_subtrees(r0, r1, roots_start, roots_end, roots_depth, seeds, cap_start, P, n_rows, order,
                                  wts, targets, squared, reg, max_points, rho, n_thr, configs, min_split, min_leaf,
                                  min_gain, max_depth, row, thr_lo, thr_hi, left, depth, gain, weight, start, end,
                                  used):  # pragma: no cover - numba
    """`grow_weighted_one_target_subtrees`, roots r0..r1, with local copies of a root's order, weights and targets
    written back when its subtree is done."""
    n_cfg = configs.shape[0]
    state = np.zeros(1, dtype=np.uint64)
    perm = np.arange(n_rows)
    swaps = np.empty(rho, dtype=np.int64)
    rows = np.empty(rho, dtype=np.int64)
    u = np.empty(n_thr)
    cand_thr = np.empty((rho, n_thr), dtype=np.float32)
    out3 = np.empty((1, rho, n_cfg))
    out = out3[0]
    vals = np.empty(max_points, dtype=np.float32)
    o_loc = np.empty(max_points, dtype=order.dtype)
    w_loc = np.empty(max_points)
    t_loc = np.empty(max_points)
    go = np.empty(max_points, dtype=np.bool_)
    tmp_o = np.empty(max_points, dtype=order.dtype)
    tmp_w = np.empty(max_points)
    tmp_t = np.empty(max_points)
    stack = np.empty((max_points, 4), dtype=np.int64)
    cum = np.empty((n_thr + 2, 3))
    ccount = np.empty(n_thr + 2, dtype=np.int64)
    for r in range(r0, r1):
        state[0] = seeds[r]
        base = cap_start[r]
        a0 = roots_start[r]
        n0 = roots_end[r] - a0
        _load_root(order, wts, targets, a0, n0, o_loc, w_loc, t_loc)
        n_used = 1
        top = _start_root(stack, 0, n0, roots_depth)
        while top >= 0:
            g, a, e, d, top = _pop(stack, top, base)
            n = e - a
            w_node = 0.0
            s1 = 0.0
            s2 = 0.0
            for m in range(a, e):
                wy = w_loc[m] * t_loc[m]
                w_node += w_loc[m]
                s1 += wy
                s2 += wy * t_loc[m]
            pure = True
            if w_node > 0.0:
                mean = s1 / w_node
                pure = s2 / w_node - mean * mean <= 1e-12 * max(s2 / w_node, 1e-300)
            if n < min_split or n < 2 * min_leaf or d >= max_depth or pure:
                _record_leaf(g, a0 + a, a0 + e, d, w_node, row, thr_lo, thr_hi, gain, left, depth, weight, start, end)
                continue
            _draw_rows(state, n_rows, rho, perm, swaps, rows)
            for c in range(rho):
                for j in range(n_thr):
                    u[j] = _uniform(state)
                out3[0, c, :] = -np.inf
                if not _gather_and_draw(P, np.uint64(n_rows), np.uint64(rows[c]), o_loc, a, n, u, vals,
                                        cand_thr[c]):
                    continue  # one value: no child of it holds a point
                thr = cand_thr[c]
                cum[:] = 0.0
                ccount[:] = 0
                for m in range(n):
                    v = vals[m]
                    b = 1
                    for j in range(n_thr):
                        b += thr[j] < v
                    w = w_loc[a + m]
                    wy = w * t_loc[a + m]
                    cum[b, 0] += w
                    cum[b, 1] += wy
                    cum[b, 2] += wy * t_loc[a + m]
                    ccount[b] += 1
                _prefix_sums(cum, ccount)
                _score_one_target(cum, ccount, w_node, configs, squared, reg, min_leaf, out3, 0, c)
            best = _chosen(state, out, min_gain)
            if best < 0:
                _record_leaf(g, a0 + a, a0 + e, d, w_node, row, thr_lo, thr_hi, gain, left, depth, weight, start, end)
                continue
            c = best // n_cfg
            lo, hi = _band(cand_thr[c], configs, best % n_cfg)
            nl = _split_local(P, n_rows, rows[c], lo, hi, o_loc, w_loc, t_loc, a, n, go, tmp_o, tmp_w, tmp_t)
            _record_split(g, rows[c], lo, hi, out[c, best % n_cfg], d, w_node, n_used, row, thr_lo, thr_hi, gain,
                          depth, weight, left)
            top = _push_children(stack, top, n_used, a, a + nl, e, d + 1)
            n_used += 2
        used[r] = n_used
        _store_root(order, wts, targets, a0, n0, o_loc, w_loc, t_loc)
