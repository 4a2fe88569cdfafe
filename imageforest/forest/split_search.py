"""Scoring candidate splits for a batch of nodes at once (numba, parallel over node x candidate pairs).

Two strategies, both one pass over each candidate's responses:

- binned: K thresholds per candidate (random in the node's response range, Sherwood-style); responses fall into
  K + 1 bins whose statistics are prefix-summed, so every partition "bins [i, j) go left" costs O(S).
  One-sided tests use i = 0; two-sided (band) tests use every i < j.
- exhaustive: responses sorted; every boundary between distinct values is scored (one-sided only).

Positions m index a chunk of the trainer's point order: node s owns positions [seg_start[s], seg_end[s]).
Responses are candidate-major, (rho, M), so each (node, candidate) scan reads contiguous memory.

Deep levels hold millions of tiny (node, candidate) pairs, so the kernels hand pairs to a fixed number of work
blocks (pair p goes to block p % N_WORK_BLOCKS) and each block allocates its scratch once.
"""

from __future__ import annotations

import math

import numpy as np

from imageforest.forest.objectives import (
    ENTROPY,
    GINI,
    MIXED,
    SQUARED_ERROR,
    accumulate,
    supervised_scale,
    weighted_impurity,
)
from imageforest.forest.threads import run_ranges
from imageforest.kernels import njit

N_WORK_BLOCKS = 256
# The sorted search sorts a candidate's keys by radix from this many points on (digits of 8 or 11 bits, whichever
# the cost model `_radix_digit_bits` prefers, skipping digits every key shares); below it a comparison sort of the
# few keys is faster.
RADIX_MIN = 48
RADIX_BITS = 11  # the widest digit: the count table holds 2^RADIX_BITS bins
INSERTION_MAX = 16
XLOGX_TABLE_MAX = 1 << 21  # the heaviest node weight whose x log x values are tabled (16 MB) rather than computed
LINEAR_BIN_MAX = 32
# Class rows wider than this are binned and scored over the classes present in each node.
COMPACT_CLASSES_MIN = 8


def partition_configs(n_thresholds: int, two_sided: bool) -> np.ndarray:
    """Left-set configurations (i, j): bins i..j-1 go left; shape (B, 2) int64."""
    k = n_thresholds
    if not two_sided:
        return np.array([(0, j) for j in range(1, k + 1)], dtype=np.int64)
    pairs = [(i, j) for i in range(k + 1) for j in range(i + 1, k + 2) if not (i == 0 and j == k + 1)]
    return np.array(pairs, dtype=np.int64)


def segment_min_max(resp, seg_start, seg_end):
    """Per node and candidate, the smallest and largest response: two (n_nodes, rho) float32 arrays."""
    n_nodes = seg_start.shape[0]
    rho = resp.shape[0]
    lo = np.empty((n_nodes, rho), dtype=np.float32)
    hi = np.empty((n_nodes, rho), dtype=np.float32)
    run_ranges(_segment_min_max_range, n_nodes * rho, resp, seg_start, seg_end, lo, hi)
    return lo, hi


@njit(cache=True, nogil=True)
def _segment_min_max_range(p0, p1, resp, seg_start, seg_end, lo, hi):  # pragma: no cover - numba
    rho = resp.shape[0]
    for pair in range(p0, p1):
        s = pair // rho
        c = pair % rho
        a = np.float32(np.inf)
        b = np.float32(-np.inf)
        for m in range(seg_start[s], seg_end[s]):
            v = resp[c, m]
            a = min(a, v)
            b = max(b, v)
        lo[s, c] = a
        hi[s, c] = b


@njit(cache=True, inline="always")
def _bin_pair(resp_c, m0, m1, thr, samples, wts, criterion, labels, targets, n_blocks, q, cum, ccount,
              column):  # pragma: no cover - numba
    """Fill cum[b + 1] / ccount[b + 1] with the statistics of bin b, then prefix-sum; returns the total weight.

    After the prefix sum, bins [i, j) hold cum[j] - cum[i]. Class rows count label l in column[l].
    """
    k = thr.shape[0]
    cum[:] = 0.0
    ccount[:] = 0
    w_node = 0.0
    for m in range(m0, m1):
        v = resp_c[m]
        # bin = number of thresholds strictly below v. A branch-free count beats binary search for small K: the
        # comparisons are coin flips on random data, so a branching search mispredicts about every other step.
        if k <= LINEAR_BIN_MAX:
            b = 0
            for j in range(k):
                b += thr[j] < v
        else:
            b = 0
            hi = k
            while b < hi:
                mid = (b + hi) >> 1
                if thr[mid] < v:
                    b = mid + 1
                else:
                    hi = mid
        if criterion <= GINI:  # the common cases first, without building a row view per point
            cum[b + 1, column[labels[samples[m]]]] += wts[m]
        elif n_blocks == 1 and q == 1 and criterion != MIXED:  # scalar regression: [w, w y, w y^2]
            y = targets[samples[m], 0]
            wy = wts[m] * y
            cum[b + 1, 0] += wts[m]
            cum[b + 1, 1] += wy
            cum[b + 1, 2] += wy * y
        else:
            accumulate(cum[b + 1], samples[m], wts[m], criterion, labels, targets, n_blocks, q)
        ccount[b + 1] += 1
        w_node += wts[m]
    for b in range(1, k + 2):
        ccount[b] += ccount[b - 1]
        for j in range(cum.shape[1]):
            cum[b, j] += cum[b - 1, j]
    return w_node


def binned_gain_table(resp, seg_start, seg_end, samples, wts, thresholds, configs, criterion, labels,
                      targets, n_blocks, q, n_stats, reg, min_samples_leaf):
    """Information gain of every (node, candidate, configuration); -inf where a child is too small.

    Parameters
    ----------
    resp : (rho, M) float32
    seg_start, seg_end : (n_nodes,) int64
    samples : (M,) int32 row of `labels`/`targets` per position; wts : (M,) float64 weight per position
    thresholds : (n_nodes, rho, K) float32, ascending along the last axis
    configs : (B, 2) int64 from `partition_configs`

    Returns
    -------
    (n_nodes, rho, B) float64
    """
    n_nodes, rho, _ = thresholds.shape
    out = np.full((n_nodes, rho, configs.shape[0]), -np.inf)
    n_pairs = n_nodes * rho
    n_work = min(n_pairs, N_WORK_BLOCKS)
    compact = criterion <= GINI and n_stats > COMPACT_CLASSES_MIN
    if compact:
        columns, width = node_class_columns(seg_start, seg_end, samples, labels, n_stats)
    else:
        columns = np.arange(n_stats, dtype=np.int64).reshape(1, n_stats)
        width = np.full(1, n_stats, dtype=np.int64)
    run_ranges(_binned_blocks, n_work, n_pairs, resp, seg_start, seg_end, samples, wts, thresholds, configs,
               criterion, labels, targets, n_blocks, q, n_stats, reg, min_samples_leaf, compact, columns, width, out)
    return out


@njit(cache=True, nogil=True)
def _binned_blocks(b0, b1, n_pairs, resp, seg_start, seg_end, samples, wts, thresholds, configs, criterion, labels,
                   targets, n_blocks, q, n_stats, reg, min_samples_leaf, compact, columns, width,
                   out):  # pragma: no cover - numba
    """Work blocks [b0, b1) of `binned_gain_table`; block b holds the pairs [b n_pairs / n_work, (b + 1) ...)."""
    n_nodes = thresholds.shape[0]
    k = thresholds.shape[2]
    n_work = min(n_pairs, N_WORK_BLOCKS)
    cum_all = np.empty((k + 2) * n_stats)
    ccount = np.empty(k + 2, dtype=np.int64)
    work = np.empty((max(q, 1), max(q, 1)))
    total_all = np.empty(n_stats)
    left_all = np.empty(n_stats)
    right_all = np.empty(n_stats)
    for blk in range(b0, b1):
        # Contiguous, candidate-major pair ranges: consecutive pairs read adjacent stretches of one response row,
        # which the hardware prefetcher streams (deep levels have ~100-point segments, too short to stream alone).
        for pair in range(blk * n_pairs // n_work, (blk + 1) * n_pairs // n_work):
            c = pair // n_nodes
            s = pair % n_nodes
            row = s if compact else 0
            # Many classes, few points (deep levels): bins and scores only over the classes the node holds. Absent
            # classes add exact zeros to every sum, so the gains are the same numbers.
            n_cols = width[row]
            cum = cum_all[: (k + 2) * n_cols].reshape((k + 2, n_cols))
            w_node = _bin_pair(resp[c], seg_start[s], seg_end[s], thresholds[s, c], samples, wts, criterion,
                               labels, targets, n_blocks, q, cum, ccount, columns[row])
            if w_node <= 0.0:
                continue
            _score_configs(cum, ccount, w_node, configs, criterion, n_blocks, q, reg, min_samples_leaf, work,
                           total_all[:n_cols], left_all[:n_cols], right_all[:n_cols], out, s, c)


def node_class_columns(seg_start, seg_end, samples, labels, n_classes):
    """Per node, the column of each class among the classes its points hold (ascending; -1 when absent).

    Returns
    -------
    columns : (n_nodes, n_classes) int64
    width : (n_nodes,) int64, the number of classes present
    """
    n_nodes = seg_start.shape[0]
    columns = np.full((n_nodes, int(n_classes)), -1, dtype=np.int64)
    width = np.zeros(n_nodes, dtype=np.int64)
    run_ranges(_node_class_columns_range, n_nodes, seg_start, seg_end, samples, labels, columns, width)
    return columns, width


@njit(cache=True, nogil=True)
def _node_class_columns_range(s0, s1, seg_start, seg_end, samples, labels, columns,
                              width):  # pragma: no cover - numba
    n_classes = columns.shape[1]
    for s in range(s0, s1):
        for m in range(seg_start[s], seg_end[s]):
            columns[s, labels[samples[m]]] = 0
        w = 0
        for t in range(n_classes):
            if columns[s, t] >= 0:
                columns[s, t] = w
                w += 1
        width[s] = w


@njit(cache=True, inline="always")
def _score_configs(cum, ccount, w_node, configs, criterion, n_blocks, q, reg, min_samples_leaf, work, total, left,
                   right, out, s, c):  # pragma: no cover - numba
    """Gain of every configuration of one (node s, candidate c) into out[s, c, :], from its prefix-summed bins
    (`_bin_pair`'s layout: bins [i, j) hold cum[j] - cum[i], the last row is the node); -inf stays where a child
    would be too small. The node's totals are copied to the `total` scratch rather than viewed, and the function
    is inlined: at deep levels a (node, candidate) holds a handful of points and per-call views cost as much."""
    k = cum.shape[0] - 2
    n_stats = cum.shape[1]
    n_total = ccount[k + 1]
    for t in range(n_stats):
        total[t] = cum[k + 1, t]
    mix = supervised_scale(total, criterion, n_blocks, q, reg)
    parent = weighted_impurity(total, criterion, n_blocks, q, reg, work, mix)
    for g in range(configs.shape[0]):
        i = configs[g, 0]
        j = configs[g, 1]
        if g > 0 and i == configs[g - 1, 0] and ccount[j] == ccount[configs[g - 1, 1]]:
            # the bins in between are empty: the same children as the configuration before (a small node's
            # thresholds leave most bins empty)
            out[s, c, g] = out[s, c, g - 1]
            continue
        n_left = ccount[j] - ccount[i]
        if n_left < min_samples_leaf or n_total - n_left < min_samples_leaf:
            continue
        for t in range(n_stats):
            left[t] = cum[j, t] - cum[i, t]
            right[t] = total[t] - left[t]
        child = weighted_impurity(left, criterion, n_blocks, q, reg, work, mix)
        child += weighted_impurity(right, criterion, n_blocks, q, reg, work, mix)
        out[s, c, g] = (parent - child) / w_node


def lifted_gain_table(resp, seg_start, seg_end, samples, wts, thresholds, configs, criterion, lifted, n_blocks,
                      q, n_stats, reg, min_samples_leaf):
    """`binned_gain_table` for wide statistics rows (`Objective.lifted`), node-major.

    A row of hundreds of statistics (one Gaussian block per organ) costs more to fetch than to add, so each
    point's row is read once and added into the bins of all rho candidates, instead of once per candidate.
    Same arguments and result as `binned_gain_table` (with `lifted` in place of the targets).
    """
    n_nodes, rho, _ = thresholds.shape
    out = np.full((n_nodes, rho, configs.shape[0]), -np.inf)
    # nodes differ in size: blocks go to whichever thread is free
    run_ranges(_lifted_blocks, min(n_nodes, N_WORK_BLOCKS), resp, seg_start, seg_end, samples, wts, thresholds,
               configs, criterion, lifted, n_blocks, q, n_stats, reg, min_samples_leaf, out, chunks_per_thread=8)
    return out


@njit(cache=True, nogil=True)
def _lifted_blocks(b0, b1, resp, seg_start, seg_end, samples, wts, thresholds, configs, criterion, lifted, n_blocks,
                   q, n_stats, reg, min_samples_leaf, out):  # pragma: no cover - numba
    """Work blocks [b0, b1) of `lifted_gain_table`: block b takes nodes b, b + n_work, ..."""
    n_nodes, rho, k = thresholds.shape
    n_work = min(n_nodes, N_WORK_BLOCKS)
    cum = np.empty((rho, k + 2, n_stats))
    ccount = np.empty((rho, k + 2), dtype=np.int64)
    work = np.empty((max(q, 1), max(q, 1)))
    total = np.empty(n_stats)
    left = np.empty(n_stats)
    right = np.empty(n_stats)
    for blk in range(b0, b1):
        for s in range(blk, n_nodes, n_work):
            cum[:] = 0.0
            ccount[:] = 0
            w_node = 0.0
            thr = thresholds[s]
            for m in range(seg_start[s], seg_end[s]):
                w = wts[m]
                i = samples[m]
                w_node += w
                for c in range(rho):
                    v = resp[c, m]
                    b = 0
                    for j in range(k):
                        b += thr[c, j] < v
                    ccount[c, b + 1] += 1
                    for j in range(n_stats):
                        cum[c, b + 1, j] += w * lifted[i, j]
            if w_node <= 0.0:
                continue
            for c in range(rho):
                for b in range(1, k + 2):
                    ccount[c, b] += ccount[c, b - 1]
                    for j in range(n_stats):
                        cum[c, b, j] += cum[c, b - 1, j]
                _score_configs(cum[c], ccount[c], w_node, configs, criterion, n_blocks, q, reg, min_samples_leaf,
                               work, total, left, right, out, s, c)


@njit(cache=True)
def _best_sorted_split(resp_c, a, n, samples, wts, criterion, labels, targets, n_blocks, q, reg, min_samples_leaf,
                       vals, total, left, right, work):  # pragma: no cover - numba
    """Best one-sided split of positions [a, a + n) of one candidate: (gain, threshold)."""
    for m in range(n):
        vals[m] = resp_c[a + m]
    idx = np.argsort(vals[:n])
    total[:] = 0.0
    left[:] = 0.0
    w_node = 0.0
    for m in range(n):
        accumulate(total, samples[a + m], wts[a + m], criterion, labels, targets, n_blocks, q)
        w_node += wts[a + m]
    best = -np.inf
    best_thr = np.float32(0.0)
    if w_node <= 0.0:
        return best, best_thr
    mix = supervised_scale(total, criterion, n_blocks, q, reg)
    parent = weighted_impurity(total, criterion, n_blocks, q, reg, work, mix)
    for r in range(n - 1):
        m = a + idx[r]
        accumulate(left, samples[m], wts[m], criterion, labels, targets, n_blocks, q)
        v0 = vals[idx[r]]
        v1 = vals[idx[r + 1]]
        if v1 <= v0 or r + 1 < min_samples_leaf or n - r - 1 < min_samples_leaf:
            continue
        for t in range(total.shape[0]):
            right[t] = total[t] - left[t]
        g = (parent - weighted_impurity(left, criterion, n_blocks, q, reg, work, mix)
             - weighted_impurity(right, criterion, n_blocks, q, reg, work, mix)) / w_node
        if g > best:
            best = g
            mid = np.float32(0.5 * (np.float64(v0) + np.float64(v1)))
            best_thr = mid if mid < v1 else v0  # v0 <= thr < v1 exactly in float32
    return best, best_thr


def exhaustive_best(resp, seg_start, seg_end, samples, wts, criterion, labels, targets, n_blocks, q, n_stats,
                    reg, min_samples_leaf):
    """Best one-sided split of every (node, candidate) over all boundaries between distinct responses.

    Returns
    -------
    gain : (n_nodes, rho) float64, -inf where no valid split exists
    threshold : (n_nodes, rho) float32; a point goes left when its response <= threshold
    """
    n_nodes = seg_start.shape[0]
    rho = resp.shape[0]
    gain = np.full((n_nodes, rho), -np.inf)
    threshold = np.zeros((n_nodes, rho), dtype=np.float32)
    n_pairs = n_nodes * rho
    n_work = min(n_pairs, N_WORK_BLOCKS)
    longest = int((seg_end - seg_start).max()) if n_nodes else 0
    run_ranges(_exhaustive_blocks, n_work, n_pairs, longest, resp, seg_start, seg_end, samples, wts, criterion,
               labels, targets, n_blocks, q, n_stats, reg, min_samples_leaf, gain, threshold)
    return gain, threshold


@njit(cache=True, nogil=True)
def _exhaustive_blocks(b0, b1, n_pairs, longest, resp, seg_start, seg_end, samples, wts, criterion, labels, targets,
                       n_blocks, q, n_stats, reg, min_samples_leaf, gain, threshold):  # pragma: no cover - numba
    """Work blocks [b0, b1) of `exhaustive_best`: block b takes pairs b, b + n_work, ... (n_work = its block count)."""
    rho = resp.shape[0]
    n_work = min(n_pairs, N_WORK_BLOCKS)
    vals = np.empty(longest, dtype=np.float32)
    total = np.empty(n_stats)
    left = np.empty(n_stats)
    right = np.empty(n_stats)
    work = np.empty((max(q, 1), max(q, 1)))
    for blk in range(b0, b1):
        for pair in range(blk, n_pairs, n_work):
            s = pair // rho
            c = pair % rho
            n = seg_end[s] - seg_start[s]
            if n < 2 * min_samples_leaf:
                continue
            g, t = _best_sorted_split(resp[c], seg_start[s], n, samples, wts, criterion, labels, targets,
                                      n_blocks, q, reg, min_samples_leaf, vals, total, left, right, work)
            gain[s, c] = g
            threshold[s, c] = t


def partition_segments(order, wts, positions_start, resp, seg_start, seg_end, best_cand, thr_lo, thr_hi, split):
    """Stable in-place partition of each split node's points: left-going points first.

    `order`/`wts` are the trainer's global arrays; node s of the chunk owns global positions
    positions_start[s] + [0, seg_end[s] - seg_start[s]). Returns the number of left points per node.
    """
    n_nodes = seg_start.shape[0]
    n_left = np.zeros(n_nodes, dtype=np.int64)
    m_total = int(seg_end[n_nodes - 1]) if n_nodes else 0
    # One chunk-wide buffer; node s uses its own slice [seg_start[s], seg_end[s]).
    tmp_o = np.empty(m_total, dtype=order.dtype)
    tmp_w = np.empty(m_total, dtype=wts.dtype)
    run_ranges(_partition_segments_range, n_nodes, order, wts, positions_start, resp, seg_start, seg_end, best_cand,
               thr_lo, thr_hi, split, tmp_o, tmp_w, n_left)
    return n_left


@njit(cache=True, nogil=True)
def _partition_segments_range(s0, s1, order, wts, positions_start, resp, seg_start, seg_end, best_cand, thr_lo,
                              thr_hi, split, tmp_o, tmp_w, n_left):  # pragma: no cover - numba
    for s in range(s0, s1):
        if not split[s]:
            continue
        n = seg_end[s] - seg_start[s]
        g0 = positions_start[s]
        b0 = seg_start[s]
        c = best_cand[s]
        lo = thr_lo[s]
        hi = thr_hi[s]
        nl = 0
        for m in range(n):
            v = resp[c, b0 + m]
            if v > lo and v <= hi:
                tmp_o[b0 + nl] = order[g0 + m]
                tmp_w[b0 + nl] = wts[g0 + m]
                nl += 1
        nr = nl
        for m in range(n):
            v = resp[c, b0 + m]
            if not (v > lo and v <= hi):
                tmp_o[b0 + nr] = order[g0 + m]
                tmp_w[b0 + nr] = wts[g0 + m]
                nr += 1
        for m in range(n):
            order[g0 + m] = tmp_o[b0 + m]
            wts[g0 + m] = tmp_w[b0 + m]
        n_left[s] = nl


def segment_stats(order, wts, seg_start, seg_end, criterion, labels, targets, n_blocks, q, n_stats,
                  per_position=False):
    """Statistics vector and point count of each segment of the global order: (n_seg, S), (n_seg,).

    `labels`/`targets` are per point (read through `order`), or per position when `per_position`.
    """
    n_seg = seg_start.shape[0]
    stats = np.zeros((n_seg, n_stats))
    run_ranges(_segment_stats_range, n_seg, order, wts, seg_start, seg_end, criterion, labels, targets, n_blocks, q,
               bool(per_position), stats)
    return stats, (seg_end - seg_start).astype(np.int64)


@njit(cache=True, nogil=True)
def _segment_stats_range(s0, s1, order, wts, seg_start, seg_end, criterion, labels, targets, n_blocks, q,
                         per_position, stats):  # pragma: no cover - numba
    for s in range(s0, s1):
        for m in range(seg_start[s], seg_end[s]):
            i = m if per_position else order[m]
            accumulate(stats[s], i, wts[m], criterion, labels, targets, n_blocks, q)


def segment_class_counts(pos_labels, seg_start, seg_end, n_classes):
    """`segment_stats` for classification with unit weights and labels per position: class counts as float.

    Reads one byte per position instead of the 8-byte weights and the generic accumulator (0.57 -> 0.1 s over a
    200k x 50 ExtraTrees fit); the counts equal the unit-weight sums exactly.
    """
    n_seg = seg_start.shape[0]
    stats = np.zeros((n_seg, n_classes))
    run_ranges(_class_counts_range, n_seg, pos_labels, seg_start, seg_end, stats)
    return stats, (seg_end - seg_start).astype(np.int64)


@njit(cache=True, nogil=True)
def _class_counts_range(s0, s1, pos_labels, seg_start, seg_end, stats):  # pragma: no cover - numba
    n_classes = stats.shape[1]
    tally = np.zeros(n_classes, dtype=np.int64)
    for s in range(s0, s1):
        tally[:] = 0
        for m in range(seg_start[s], seg_end[s]):
            tally[np.uint64(pos_labels[m])] += 1
        for c in range(n_classes):
            stats[s, c] = tally[c]


def segment_one_target_stats(pos_targets, seg_start, seg_end):
    """`segment_stats` for one regression target per position, unit weights: rows [weight, sum y, sum y^2].

    The sums run in registers, point after point as the generic accumulator adds them (1 * y and (1 * y) * y are
    y and y * y exactly), so the rows are the same bits at a third of the memory traffic. NaN targets are skipped
    as there.
    """
    n_seg = seg_start.shape[0]
    stats = np.zeros((n_seg, 3))
    run_ranges(_one_target_stats_range, n_seg, pos_targets, seg_start, seg_end, stats)
    return stats, (seg_end - seg_start).astype(np.int64)


@njit(cache=True, nogil=True)
def _one_target_stats_range(s0, s1, pos_targets, seg_start, seg_end, stats):  # pragma: no cover - numba
    for s in range(s0, s1):
        w = 0.0
        sy = 0.0
        syy = 0.0
        for m in range(seg_start[s], seg_end[s]):
            y = pos_targets[m, 0]
            if math.isnan(y):
                continue
            w += 1.0
            sy += y
            syy += y * y
        stats[s, 0] = w
        stats[s, 1] = sy
        stats[s, 2] = syy


def sorted_search_applies(criterion: int, n_blocks: int, q: int) -> bool:
    """Whether `exhaustive_best_sorted` serves this objective: class entropy or Gini, or squared error on one
    target (the scores whose children's impurities follow from running sums in O(1) per point)."""
    return criterion <= GINI or (criterion == SQUARED_ERROR and n_blocks == 1 and q == 1)


def exhaustive_best_sorted(resp, seg_start, seg_end, rows, wts, criterion, labels, targets, n_classes,
                           min_samples_leaf):
    """`exhaustive_best` for the objectives of `sorted_search_applies`, with the same choices: each candidate's
    responses are sorted once (as 64-bit keys: the float's order-preserving bits, then its position) and the
    children's statistics move one point at a time, so a boundary costs O(1) whatever the number of classes.

    Returns (gain (n_nodes, rho) float64 with -inf where nothing splits, threshold (n_nodes, rho) float32)."""
    n_nodes = seg_start.shape[0]
    rho = resp.shape[0]
    gain = np.full((n_nodes, rho), -np.inf)
    threshold = np.zeros((n_nodes, rho), dtype=np.float32)
    n_pairs = n_nodes * rho
    n_work = min(n_pairs, N_WORK_BLOCKS)
    if n_pairs == 0:
        return gain, threshold
    longest = int(np.max(seg_end - seg_start))
    tgt = targets[:, 0] if criterion == SQUARED_ERROR else np.zeros(1)
    resp = np.ascontiguousarray(resp, dtype=np.float32)
    xlogx = whole_weight_xlogx(wts, seg_start, seg_end) if criterion == ENTROPY else np.zeros(0)
    run_ranges(_sorted_search_blocks, n_work, n_work, resp, resp.view(np.uint32), seg_start, seg_end, rows, wts,
               criterion, labels, tgt,
               max(n_classes, 1), min_samples_leaf, longest, xlogx, gain, threshold, chunks_per_thread=16)
    return gain, threshold


def whole_weight_xlogx(wts: np.ndarray, seg_start: np.ndarray, seg_end: np.ndarray) -> np.ndarray:
    """The x log x table entropy scans read (`_xlogx_of`) for the weights `wts` of segments [seg_start, seg_end).

    With whole-number weights (unit weights, bootstrap counts) every class and child weight is a whole number up to
    the heaviest segment's, so x log x comes from a table of 0, 1, ..., that weight instead of six logarithms per
    point; other weights, or a segment heavier than XLOGX_TABLE_MAX, get an empty table (logarithms computed)."""
    heaviest = _heaviest_whole_segment(wts, seg_start, seg_end)
    return _xlogx_table(int(heaviest)) if 0.0 <= heaviest <= XLOGX_TABLE_MAX else np.zeros(0)


@njit(cache=True)
def _heaviest_whole_segment(wts, seg_start, seg_end):  # pragma: no cover - numba
    """The largest total weight of a segment when every weight is a whole number >= 0, else -1."""
    heaviest = 0.0
    for s in range(seg_start.shape[0]):
        total = 0.0
        for m in range(seg_start[s], seg_end[s]):
            w = wts[m]
            if not (w >= 0.0 and w == math.floor(w)):
                return -1.0
            total += w
        heaviest = max(heaviest, total)
    return heaviest


@njit(cache=True)
def _xlogx_table(top):  # pragma: no cover - numba
    """x log x of x = 0, 1, ..., top, as `_xlogx` computes it (the same bits)."""
    table = np.empty(top + 1)
    for x in range(top + 1):
        table[x] = _xlogx(np.float64(x))
    return table


@njit(cache=True, nogil=True)
def _sorted_search_blocks(b0, b1, n_work, resp, resp_bits, seg_start, seg_end, rows, wts, criterion, labels, tgt,
                          n_classes, msl, longest, xlogx, gain, threshold):  # pragma: no cover - numba
    rho = resp.shape[0]
    n_pairs = seg_start.shape[0] * rho
    keys = np.empty(longest, dtype=np.uint64)
    spare = np.empty(longest if longest >= RADIX_MIN else 0, dtype=np.uint64)
    counts = np.empty(1 << RADIX_BITS, dtype=np.int64)
    left = np.empty(n_classes)
    total = np.empty(n_classes)
    for blk in range(b0, b1):
        for pair in range(blk, n_pairs, n_work):
            s = pair // rho
            c = pair % rho
            a = seg_start[s]
            n = seg_end[s] - a
            if n < 2 * msl:
                continue
            if not _sorted_keys(resp_bits[c], a, n, keys, spare, counts):
                # one value (a discrete feature deep in a tree, often): nothing splits, and the gain stays -inf
                # with threshold 0, as the scan would leave them, without its sort
                continue
            vals = resp[c, a:a + n]
            g, t = _scan_sorted(keys, vals, n, a, rows, wts, criterion, labels, tgt, msl, left, total, xlogx)
            gain[s, c] = g
            threshold[s, c] = t


@njit(cache=True)
def _sorted_keys(bits, a, n, keys, spare, counts):  # pragma: no cover - numba
    """Keys of the float32 values whose bits are bits[a:a + n] into keys[:n], sorted: each value's order-preserving
    bits, then its index 0..n-1. Returns False, leaving them unsorted, when every value is the same.

    `spare` (n,) and `counts` (2^RADIX_BITS,) are the radix sort's scratch, used from RADIX_MIN points on."""
    x_or = np.uint64(0)
    x_and = np.uint64(0xFFFFFFFF)
    for m in range(n):
        b = np.uint64(bits[a + m])
        # order-preserving: flip every bit of a negative float, only the sign bit of a positive one
        key = b ^ np.uint64(0xFFFFFFFF) if b >> np.uint64(31) else b | np.uint64(0x80000000)
        x_or |= key
        x_and &= key
        keys[m] = (key << np.uint64(32)) | np.uint64(m)
    if x_or == x_and:
        return False
    if n >= RADIX_MIN:
        varying = x_or ^ x_and
        _radix_sort_high(keys, spare, counts, n, varying, _radix_digit_bits(varying, n))
    elif n > INSERTION_MAX:
        keys[:n].sort()
    else:  # deep nodes: most pairs hold a handful of points
        _sort_small(keys, n)
    return True


@njit(cache=True, nogil=True)
def _sort_small(a, n):  # pragma: no cover - numba
    """Sort a[:n] in place by insertion: for a handful of values, faster than a library sort's call, and it
    compiles in a fraction of np.sort's time."""
    for i in range(1, n):
        v = a[i]
        j = i - 1
        while j >= 0 and a[j] > v:
            a[j + 1] = a[j]
            j -= 1
        a[j + 1] = v


@njit(cache=True, inline="always")
def _digits(varying, width):  # pragma: no cover - numba
    """How many width-bit digits of a 32-bit value key hold a bit of `varying`."""
    mask = np.uint64((1 << width) - 1)
    count = 0
    for shift in range(0, 32, width):
        count += ((varying >> np.uint64(shift)) & mask) != 0
    return count


@njit(cache=True)
def _radix_digit_bits(varying, n):  # pragma: no cover - numba
    """8 or 11: the digit width that sorts n keys, whose value bits differ where `varying` is set, in the least time.
    A pass costs about 2.9 ns per key and 0.4 ns per bin of its count table (measured on this project's machines):
    few keys take the small table; data of few distinct values (whole numbers, bytes) skip most 8-bit digits."""
    cost8 = _digits(varying, 8) * (2.9 * n + 0.4 * 256)
    cost11 = _digits(varying, 11) * (2.9 * n + 0.4 * 2048)
    return 8 if cost8 <= cost11 else 11

@njit(cache=True)
def _radix_sort_high(keys, spare, counts, n, varying, width):  # pragma: no cover - numba
    """Sort keys[:n] by their upper 32 bits, stably (least significant digit first, `width` bits at a time, skipping
    the digits where no key's value differs from another's: `varying` has their bits set): keys built with
    ascending positions in the lower bits come out as a full sort would leave them."""
    n_bins = 1 << width
    mask = np.uint64(n_bins - 1)
    src, dst = keys, spare
    swapped = False
    for shift in range(0, 32, width):
        if not (varying >> np.uint64(shift)) & mask:
            continue  # every key shares this digit: the pass would leave them in place
        sh = np.uint64(shift + 32)
        counts[:n_bins] = 0
        for m in range(n):
            counts[np.int64((src[m] >> sh) & mask)] += 1
        acc = 0
        for b in range(n_bins):
            c = counts[b]
            counts[b] = acc
            acc += c
        for m in range(n):
            b = np.int64((src[m] >> sh) & mask)
            dst[counts[b]] = src[m]
            counts[b] += 1
        src, dst = dst, src
        swapped = not swapped
    if swapped:
        for m in range(n):
            keys[m] = src[m]


@njit(cache=True, inline="always")
def _xlogx(x):  # pragma: no cover - numba
    return x * math.log(x) if x > 0.0 else 0.0


@njit(cache=True, inline="always")
def _xlogx_of(x, table):  # pragma: no cover - numba
    """`_xlogx` of x, read from `table` (x log x of 0, 1, 2, ...) when one is given: x is then a whole number."""
    if table.shape[0] > 0:
        return table[np.int64(x)]
    return _xlogx(x)


@njit(cache=True)
def _scan_sorted(keys, vals, n, a, rows, wts, criterion, labels, tgt, msl, left, total,
                 xlogx):  # pragma: no cover - numba
    """Best boundary of one sorted candidate: (gain, threshold) as `_best_sorted_split` defines them; `xlogx` as
    in `_xlogx_of`."""
    low = np.uint64(0xFFFFFFFF)
    w_node = 0.0
    s_node = 0.0
    regression = criterion == SQUARED_ERROR
    if not regression:
        left[:] = 0.0
        total[:] = 0.0
    w_pts = 0.0  # the node's weight without points whose target is NaN
    for m in range(n):
        w = wts[a + m]
        w_node += w
        if regression:
            y = tgt[rows[a + m]]
            if not math.isnan(y):
                s_node += w * y
                w_pts += w
        else:
            total[labels[rows[a + m]]] += w
    best = -np.inf
    best_thr = np.float32(0.0)
    if w_node <= 0.0:
        return best, best_thr
    # Running sums: weights, target sums (regression), sum of squared class weights (Gini) or of c log c (entropy)
    w_left = 0.0
    s_left = 0.0
    acc_left = 0.0
    acc_right = 0.0
    if criterion == GINI:
        for k in range(total.shape[0]):
            acc_right += total[k] * total[k]
    elif not regression:
        for k in range(total.shape[0]):
            acc_right += _xlogx_of(total[k], xlogx)
    if regression:
        parent = -s_node * s_node / w_pts if w_pts > 0.0 else 0.0
    elif criterion == GINI:
        parent = w_node - acc_right / w_node
    else:
        parent = _xlogx_of(w_node, xlogx) - acc_right
    if not regression:
        w_pts = w_node
    for r in range(n - 1):
        m = np.int64(keys[r] & low)
        w = wts[a + m]
        if regression:
            y = tgt[rows[a + m]]
            if not math.isnan(y):
                w_left += w
                s_left += w * y
        else:
            k = labels[rows[a + m]]
            lk = left[k]
            rk = total[k] - lk
            if criterion == GINI:
                acc_left += w * (2.0 * lk + w)
                acc_right += w * (w - 2.0 * rk)
            else:
                acc_left += _xlogx_of(lk + w, xlogx) - _xlogx_of(lk, xlogx)
                acc_right += _xlogx_of(rk - w, xlogx) - _xlogx_of(rk, xlogx)
            left[k] = lk + w
            w_left += w
        v0 = vals[m]
        v1 = vals[np.int64(keys[r + 1] & low)]
        if v1 <= v0 or r + 1 < msl or n - r - 1 < msl:
            continue
        w_right = w_pts - w_left
        if regression:
            s_right = s_node - s_left
            child = 0.0
            if w_left > 0.0:
                child -= s_left * s_left / w_left
            if w_right > 0.0:
                child -= s_right * s_right / w_right
        elif criterion == GINI:
            child = 0.0
            if w_left > 0.0:
                child += w_left - acc_left / w_left
            if w_right > 0.0:
                child += w_right - acc_right / w_right
        else:
            child = _xlogx_of(w_left, xlogx) - acc_left + _xlogx_of(max(w_right, 0.0), xlogx) - acc_right
        g = (parent - child) / w_node
        if g > best:
            best = g
            mid = np.float32(0.5 * (np.float64(v0) + np.float64(v1)))
            best_thr = mid if mid < v1 else v0  # v0 <= thr < v1 exactly in float32
    return best, best_thr
