"""Scoring candidate splits for a batch of nodes at once (numba, parallel over node x candidate pairs).

Two strategies, both one pass over each candidate's responses:

- binned: K thresholds per candidate (random in the node's response range, Sherwood-style); responses fall into
  K + 1 bins whose statistics are prefix-summed, so every partition "bins [i, j) go left" costs O(S). One-sided tests
  use i = 0; two-sided (band) tests use every i < j.
- exhaustive: responses sorted; every boundary between distinct values is scored (one-sided only).

Positions m index a chunk of the trainer's point order: node s owns positions [seg_start[s], seg_end[s]).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from imageforest.forest.objectives import accumulate, weighted_impurity


def partition_configs(n_thresholds: int, two_sided: bool) -> np.ndarray:
    """Left-set configurations (i, j): bins i..j-1 go left; shape (B, 2) int64."""
    k = n_thresholds
    if not two_sided:
        return np.array([(0, j) for j in range(1, k + 1)], dtype=np.int64)
    pairs = [(i, j) for i in range(k + 1) for j in range(i + 1, k + 2) if not (i == 0 and j == k + 1)]
    return np.array(pairs, dtype=np.int64)


@njit(cache=True, parallel=True)
def segment_min_max(resp, seg_start, seg_end):  # pragma: no cover - numba
    """Per node and candidate, the smallest and largest response: two (n_nodes, rho) float32 arrays."""
    n_nodes = seg_start.shape[0]
    rho = resp.shape[1]
    lo = np.empty((n_nodes, rho), dtype=np.float32)
    hi = np.empty((n_nodes, rho), dtype=np.float32)
    for pair in prange(n_nodes * rho):
        s = pair // rho
        c = pair % rho
        a = np.float32(np.inf)
        b = np.float32(-np.inf)
        for m in range(seg_start[s], seg_end[s]):
            v = resp[m, c]
            if v < a:
                a = v
            if v > b:
                b = v
        lo[s, c] = a
        hi[s, c] = b
    return lo, hi


@njit(cache=True, parallel=True)
def binned_gain_table(resp, seg_start, seg_end, samples, wts, thresholds, configs, criterion, labels,
                      targets, n_blocks, q, n_stats, reg, min_samples_leaf):  # pragma: no cover - numba
    """Information gain of every (node, candidate, configuration); -inf where a child is too small.

    Parameters
    ----------
    resp : (M, rho) float32
    seg_start, seg_end : (n_nodes,) int64
    samples : (M,) int32 point index per position; wts : (M,) float64 weight per position
    thresholds : (n_nodes, rho, K) float32, ascending along the last axis
    configs : (B, 2) int64 from `partition_configs`

    Returns
    -------
    (n_nodes, rho, B) float64
    """
    n_nodes, rho, k = thresholds.shape
    n_cfg = configs.shape[0]
    out = np.full((n_nodes, rho, n_cfg), -np.inf)
    for pair in prange(n_nodes * rho):
        s = pair // rho
        c = pair % rho
        thr = thresholds[s, c]
        cum = np.zeros((k + 2, n_stats))
        ccount = np.zeros(k + 2, dtype=np.int64)
        work = np.empty((max(q, 1), max(q, 1)))
        w_node = 0.0
        for m in range(seg_start[s], seg_end[s]):
            v = resp[m, c]
            lo = 0
            hi = k
            while lo < hi:  # bin = number of thresholds strictly below v
                mid = (lo + hi) >> 1
                if thr[mid] < v:
                    lo = mid + 1
                else:
                    hi = mid
            accumulate(cum[lo + 1], samples[m], wts[m], criterion, labels, targets, n_blocks, q)
            ccount[lo + 1] += 1
            w_node += wts[m]
        for b in range(1, k + 2):
            ccount[b] += ccount[b - 1]
            for j in range(n_stats):
                cum[b, j] += cum[b - 1, j]
        n_total = ccount[k + 1]
        if w_node <= 0.0:
            continue
        parent = weighted_impurity(cum[k + 1], criterion, n_blocks, q, reg, work)
        left = np.empty(n_stats)
        right = np.empty(n_stats)
        for g in range(n_cfg):
            i = configs[g, 0]
            j = configs[g, 1]
            n_left = ccount[j] - ccount[i]
            if n_left < min_samples_leaf or n_total - n_left < min_samples_leaf:
                continue
            for t in range(n_stats):
                left[t] = cum[j, t] - cum[i, t]
                right[t] = cum[k + 1, t] - left[t]
            child = weighted_impurity(left, criterion, n_blocks, q, reg, work)
            child += weighted_impurity(right, criterion, n_blocks, q, reg, work)
            out[s, c, g] = (parent - child) / w_node
    return out


@njit(cache=True, parallel=True)
def exhaustive_best(resp, seg_start, seg_end, samples, wts, criterion, labels, targets, n_blocks, q, n_stats,
                    reg, min_samples_leaf):  # pragma: no cover - numba
    """Best one-sided split of every (node, candidate) over all boundaries between distinct responses.

    Returns
    -------
    gain : (n_nodes, rho) float64, -inf where no valid split exists
    threshold : (n_nodes, rho) float32; a point goes left when its response <= threshold
    """
    n_nodes = seg_start.shape[0]
    rho = resp.shape[1]
    gain = np.full((n_nodes, rho), -np.inf)
    threshold = np.zeros((n_nodes, rho), dtype=np.float32)
    for pair in prange(n_nodes * rho):
        s = pair // rho
        c = pair % rho
        a = seg_start[s]
        n = seg_end[s] - a
        if n < 2 * min_samples_leaf:
            continue
        vals = np.empty(n, dtype=np.float32)
        for m in range(n):
            vals[m] = resp[a + m, c]
        idx = np.argsort(vals)
        work = np.empty((max(q, 1), max(q, 1)))
        total = np.zeros(n_stats)
        w_node = 0.0
        for m in range(n):
            accumulate(total, samples[a + m], wts[a + m], criterion, labels, targets, n_blocks, q)
            w_node += wts[a + m]
        if w_node <= 0.0:
            continue
        parent = weighted_impurity(total, criterion, n_blocks, q, reg, work)
        left = np.zeros(n_stats)
        right = np.empty(n_stats)
        best = -np.inf
        best_thr = np.float32(0.0)
        for r in range(n - 1):
            m = a + idx[r]
            accumulate(left, samples[m], wts[m], criterion, labels, targets, n_blocks, q)
            v0 = vals[idx[r]]
            v1 = vals[idx[r + 1]]
            if v1 <= v0 or r + 1 < min_samples_leaf or n - r - 1 < min_samples_leaf:
                continue
            for t in range(n_stats):
                right[t] = total[t] - left[t]
            g = (parent - weighted_impurity(left, criterion, n_blocks, q, reg, work)
                 - weighted_impurity(right, criterion, n_blocks, q, reg, work)) / w_node
            if g > best:
                best = g
                mid = np.float32(0.5 * (np.float64(v0) + np.float64(v1)))
                best_thr = mid if mid < v1 else v0  # v0 <= thr < v1 exactly in float32
        gain[s, c] = best
        threshold[s, c] = best_thr
    return gain, threshold


@njit(cache=True, parallel=True)
def partition_segments(order, wts, positions_start, resp, seg_start, seg_end, best_cand, thr_lo, thr_hi,
                       split):  # pragma: no cover - numba
    """Stable in-place partition of each split node's points: left-going points first.

    `order`/`wts` are the trainer's global arrays; node s of the chunk owns global positions
    positions_start[s] + [0, seg_end[s] - seg_start[s]). Returns the number of left points per node.
    """
    n_nodes = seg_start.shape[0]
    n_left = np.zeros(n_nodes, dtype=np.int64)
    for s in prange(n_nodes):
        if not split[s]:
            continue
        n = seg_end[s] - seg_start[s]
        g0 = positions_start[s]
        c = best_cand[s]
        lo = thr_lo[s]
        hi = thr_hi[s]
        tmp_o = np.empty(n, dtype=order.dtype)
        tmp_w = np.empty(n, dtype=wts.dtype)
        nl = 0
        for m in range(n):
            v = resp[seg_start[s] + m, c]
            if v > lo and v <= hi:
                tmp_o[nl] = order[g0 + m]
                tmp_w[nl] = wts[g0 + m]
                nl += 1
        nr = nl
        for m in range(n):
            v = resp[seg_start[s] + m, c]
            if not (v > lo and v <= hi):
                tmp_o[nr] = order[g0 + m]
                tmp_w[nr] = wts[g0 + m]
                nr += 1
        for m in range(n):
            order[g0 + m] = tmp_o[m]
            wts[g0 + m] = tmp_w[m]
        n_left[s] = nl
    return n_left


@njit(cache=True, parallel=True)
def segment_stats(order, wts, seg_start, seg_end, criterion, labels, targets, n_blocks, q,
                  n_stats):  # pragma: no cover - numba
    """Statistics vector and point count of each segment of the global order: (n_seg, S), (n_seg,)."""
    n_seg = seg_start.shape[0]
    stats = np.zeros((n_seg, n_stats))
    counts = np.zeros(n_seg, dtype=np.int64)
    for s in prange(n_seg):
        for m in range(seg_start[s], seg_end[s]):
            accumulate(stats[s], order[m], wts[m], criterion, labels, targets, n_blocks, q)
        counts[s] = seg_end[s] - seg_start[s]
    return stats, counts
