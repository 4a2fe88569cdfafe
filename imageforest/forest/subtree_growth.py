"""Depth-first growth of small nodes: a node of few points is grown to its leaves in one compiled pass.

Level-wise growth visits every node of a level before any of the next, so by the time a deep node is searched its
points' rows of the training matrix were last read a whole level (tens of megabytes) ago, and every level also pays
per-level Python and table-building costs. Below `SUBTREE_POINTS` points a node's rows fit in the core's cache:
growing its whole subtree at once, as a depth-first builder does, reads them from memory once.

A subtree searches as the level-wise search does (rho distinct rows of the matrix; K uniform thresholds over each
candidate's range, or every boundary between distinct values; the same gains up to rounding, ties broken
uniformly at random, the same stopping rules), but draws its randomness from a generator of its own, seeded per
subtree from the forest's generator: the trees depend on the seed only, never on the thread count. Axis-aligned
responses (rows of one matrix) with class or one-target regression statistics take this path, with any weights but
a global loss's (which change level by level): K thresholds with unit weights (`grow_subtrees`) or with weights,
bagging's counts or sample weights (`imageforest.forest.weighted_subtrees`, whose roots' positions, weights and
labels are copied into local arrays), and every threshold (`grow_sorted_subtrees`).

Per-node helpers are ordinary compiled calls (each compiles once); the per-candidate scans are inlined, which costs
a first large fit about 4 s of compilation and saves 10-35% of the subtrees' time. The kernels repeat their
split step (test, partition, record, push) rather than call one helper with it: that call, with its two dozen array
arguments, made the 10-class subtrees 8% slower.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from imageforest.forest.objectives import ENTROPY, GINI
from imageforest.forest.random_streams import _below, _uniform
from imageforest.forest.row_split_search import (
    _gather_and_draw,
    _one_target_threshold_gain,
    _prefix_sums,
    _score_one_target,
)
from imageforest.forest.split_search import (
    RADIX_BITS,
    RADIX_MIN,
    _scan_sorted,
    _sorted_keys,
    whole_weight_xlogx,
)
from imageforest.forest.threads import run_ranges
from imageforest.kernels import njit

# Nodes of at most this many points are grown depth-first to their leaves (0: level by level to the end). Deeper
# subtrees save more levels; a root's points' rows stay in the cores' caches up to a few thousand points (ExtraTrees
# on 100k x 50, 2 / 10 classes: 2.38 / 5.04 s at 128 points, 2.10 / 4.38 at 4,096; Friedman 200k: 15.3 / 13.7 s).
SUBTREE_POINTS = 1 << 12
# ... or of at most this many when every threshold is searched (random-forest settings). Sorting a node's values
# costs more per point than binning them at K thresholds, so per-level costs weigh less, but the whole tree grown
# at once still saves them.
SORTED_SUBTREE_POINTS = 1 << 13
# With K thresholds, training matrices smaller than this take no subtrees: a first small fit in a new environment
# then does not compile the subtree kernels.
SUBTREE_MIN_BYTES = 512 << 10
# ... unless the forest holds this many positions (points x trees): then per-level costs dominate a level-wise fit
# (Wine Quality, 4,872 x 11 with 50 trees: 0.29 s level-wise, 0.20 s with subtrees). A first default fit (1,000
# points, 100 trees) stays below it.
SUBTREE_MIN_POSITIONS = 1 << 17
# Subtree roots per work range taken by a free thread (their costs differ by their sizes).
CHUNKS_PER_THREAD = 16


@dataclass
class SubtreeNodes:
    """Nodes grown below subtree roots: root r's block of rows starts at cap_start[r] and holds used[r] nodes, the
    root itself first, every node after its parent, a split node's children at consecutive local indices.

    Attributes
    ----------
    cap_start : (R + 1,) int64; used : (R,) int64; n_leaves : (R,) int64, leaves below each root (the root itself
        not counted)
    row : (C,) int32, the matrix row a split node's test reads
    thr_lo, thr_hi : (C,) float32, the test lo < f <= hi (-inf / inf at leaves)
    left : (C,) int32, local index of the left child (the right one follows it), -1 at leaves
    depth : (C,) int32; gain : (C,) float32; weight : (C,) float64
    start, end : (C,) int64, a leaf's positions in the order
    """

    cap_start: np.ndarray
    used: np.ndarray
    n_leaves: np.ndarray
    row: np.ndarray
    thr_lo: np.ndarray
    thr_hi: np.ndarray
    left: np.ndarray
    depth: np.ndarray
    gain: np.ndarray
    weight: np.ndarray
    start: np.ndarray
    end: np.ndarray

    @classmethod
    def allocate(cls, sizes: np.ndarray) -> SubtreeNodes:
        """Room for the subtrees of roots of `sizes` (R,) positions: a binary tree of m positions with non-empty
        children has at most 2m - 1 nodes. (Every node a kernel makes is written whole, so the capacity a root does
        not use, about half of it, is never touched and costs no memory.)"""
        R = sizes.shape[0]
        cap_start = np.zeros(R + 1, dtype=np.int64)
        np.cumsum(2 * sizes - 1, out=cap_start[1:])
        n = int(cap_start[-1])
        return cls(cap_start, np.zeros(R, dtype=np.int64), np.zeros(R, dtype=np.int64), np.empty(n, dtype=np.int32),
                   np.empty(n, dtype=np.float32), np.empty(n, dtype=np.float32), np.empty(n, dtype=np.int32),
                   np.empty(n, dtype=np.int32), np.empty(n, dtype=np.float32), np.empty(n), np.empty(n, dtype=np.int64),
                   np.empty(n, dtype=np.int64))

    def columns(self) -> tuple[np.ndarray, ...]:
        """The columns a growth kernel writes, in its argument order: row, thr_lo, thr_hi, left, depth, gain,
        weight, start, end, used."""
        return (self.row, self.thr_lo, self.thr_hi, self.left, self.depth, self.gain, self.weight, self.start,
                self.end, self.used)

    def counted(self) -> SubtreeNodes:
        """Itself, with n_leaves filled in from `used` (binary trees: a leaf more than splits; a root alone is
        none)."""
        self.n_leaves[:] = np.where(self.used > 1, (self.used + 1) // 2, 0)
        return self

    def place(self, node_first: np.ndarray, leaf_first: np.ndarray, root_tree: np.ndarray, params: np.ndarray,
              thr_lo: np.ndarray, thr_hi: np.ndarray, child: np.ndarray, depth: np.ndarray, gain: np.ndarray,
              weight: np.ndarray, leaf_node: np.ndarray, leaf_tree: np.ndarray, leaf_start: np.ndarray,
              leaf_end: np.ndarray) -> None:
        """Write every node below the roots into a forest's node columns (params: the row as a float, the axis
        family's parameter) and their leaves into its leaf columns: root r's nodes take ids node_first[r].. in
        local order, its leaves the leaf ids leaf_first[r].."""
        run_ranges(_place_range, self.used.shape[0], self.cap_start, self.used, self.row, self.thr_lo, self.thr_hi,
                   self.left, self.depth, self.gain, self.weight, self.start, self.end, node_first, leaf_first,
                   root_tree, params, thr_lo, thr_hi, child, depth, gain, weight, leaf_node, leaf_tree, leaf_start,
                   leaf_end, chunks_per_thread=CHUNKS_PER_THREAD)


@njit(cache=True, nogil=True)
def _place_range(r0, r1, cap_start, used, row, lo, hi, left, depth, gain, weight, start, end, node_first, leaf_first,
                 root_tree, t_params, t_lo, t_hi, t_child, t_depth, t_gain, t_weight, l_node, l_tree, l_start,
                 l_end):  # pragma: no cover - numba
    for r in range(r0, r1):
        base = cap_start[r]
        first = node_first[r]
        leaf = leaf_first[r]
        for k in range(1, used[r]):
            src = base + k
            dst = first + k - 1
            t_params[dst, 0] = row[src]
            t_lo[dst] = lo[src]
            t_hi[dst] = hi[src]
            t_depth[dst] = depth[src]
            t_gain[dst] = gain[src]
            t_weight[dst] = weight[src]
            if left[src] >= 0:
                t_child[dst] = first + left[src] - 1
            else:
                t_child[dst] = -leaf - 1
                l_node[leaf] = dst
                l_tree[leaf] = root_tree[r]
                l_start[leaf] = start[src]
                l_end[leaf] = end[src]
                leaf += 1


def grow_subtrees(roots_start: np.ndarray, roots_end: np.ndarray, roots_depth: int, seeds: np.ndarray,
                  P: np.ndarray, order: np.ndarray, pos_labels: np.ndarray, pos_targets: np.ndarray, classes: bool,
                  n_stats: int, gini: bool, squared: bool, reg: float, rho: int, n_thresholds: int,
                  configs: np.ndarray, min_samples_split: int, min_samples_leaf: int, min_gain: float,
                  max_depth: int) -> SubtreeNodes:
    """Grow each root's subtree to its leaves (unit weights), partitioning its positions of `order` and of
    `pos_labels` or `pos_targets` in place as level-wise growth would.

    Parameters
    ----------
    roots_start, roots_end : (R,) int64, root r owns positions [start, end) of the order
    roots_depth : depth of every root (one level's nodes)
    seeds : (R,) uint64, each subtree's generator seed
    P : (n_points, n_rows) float32, the training matrix point-major (C-contiguous)
    classes : class labels (`pos_labels`, n_stats classes; entropy or `gini`), else one regression target
        (`pos_targets` (n_positions, 1); squared error, or the Gaussian objective regularised by `reg`)
    configs : (B, 2) int64 from `partition_configs`
    """
    R = roots_start.shape[0]
    nodes = SubtreeNodes.allocate(roots_end - roots_start)
    max_points = int((roots_end - roots_start).max()) if R else 1
    common = (roots_start, roots_end, roots_depth, seeds, nodes.cap_start, P.reshape(-1), P.shape[1], order,
              max_points, rho, n_thresholds, configs, min_samples_split, min_samples_leaf, float(min_gain),
              max_depth, *nodes.columns())
    # Classification and regression each take a kernel of their own: a first fit compiles only its task's.
    if classes:
        run_ranges(_class_subtrees, R, *common, pos_labels, n_stats, bool(gini), chunks_per_thread=CHUNKS_PER_THREAD)
    else:
        run_ranges(_one_target_subtrees, R, *common, pos_targets[:, 0], bool(squared), float(reg),
                   chunks_per_thread=CHUNKS_PER_THREAD)
    return nodes.counted()


@njit(cache=True, nogil=True)
def _draw_rows(state, n_rows, rho, perm, swaps, rows):  # pragma: no cover - numba
    """rho candidate rows into rows[:rho]: distinct ones by a partial Fisher-Yates shuffle of `perm` (the identity,
    restored afterwards), repeated cyclically when rho exceeds n_rows, as the axis family draws them."""
    k = min(rho, n_rows)
    for i in range(k):
        j = i + _below(state, n_rows - i)
        swaps[i] = j
        t = perm[i]
        perm[i] = perm[j]
        perm[j] = t
        rows[i] = perm[i]
    for i in range(k - 1, -1, -1):
        j = swaps[i]
        t = perm[i]
        perm[i] = perm[j]
        perm[j] = t
    for i in range(k, rho):
        rows[i] = rows[i % k]


@njit(cache=True, nogil=True)
def _pick_best(state, out):  # pragma: no cover - numba
    """Flat index (c * B + g) of a best finite gain of out (rho, B), uniformly among those tied with it (the
    level-wise `_tie_broken_argmax`'s rule), or -1 when none is finite. (Loops over both axes: a flat view of out
    costs a deep node more than its scan.)"""
    rho, n_cfg = out.shape
    best = -np.inf
    for c in range(rho):
        for g in range(n_cfg):
            best = max(best, out[c, g])
    if not np.isfinite(best):
        return -1
    floor = best - 1e-9 * abs(best)
    n_tied = 0
    for c in range(rho):
        for g in range(n_cfg):
            n_tied += out[c, g] >= floor
    k = min(int(_uniform(state) * n_tied), n_tied - 1)
    for c in range(rho):
        for g in range(n_cfg):
            if out[c, g] >= floor:
                if k == 0:
                    return c * n_cfg + g
                k -= 1
    return -1


@njit(cache=True, nogil=True)
def _band(thr, configs, best):  # pragma: no cover - numba
    """The test lo < f <= hi of configuration `best` over the sorted thresholds thr (K,)."""
    i = configs[best, 0]
    j = configs[best, 1]
    lo = np.float32(-np.inf) if i == 0 else thr[i - 1]
    hi = np.float32(np.inf) if j == thr.shape[0] + 1 else thr[j - 1]
    return lo, hi


@njit(cache=True, nogil=True)
def _partition(P, n_rows, r, lo, hi, order, carried, a, e, go, tmp_o, tmp_c):  # pragma: no cover - numba
    """Stable partition of positions [a, e) of `order` and `carried` (labels or targets per position) by
    lo < P[point, r] <= hi, left-going first; returns the left count."""
    n = e - a
    nl = 0
    for m in range(n):
        v = P[np.uint64(order[a + m]) * np.uint64(n_rows) + np.uint64(r)]
        go[m] = v > lo and v <= hi
        nl += go[m]
    i_left = 0
    i_right = nl
    for m in range(n):
        d = i_left if go[m] else i_right
        tmp_o[d] = order[a + m]
        tmp_c[d] = carried[a + m]
        if go[m]:
            i_left += 1
        else:
            i_right += 1
    for m in range(n):
        order[a + m] = tmp_o[m]
        carried[a + m] = tmp_c[m]
    return nl


@njit(cache=True, inline="always")
def _count_impurity(row, width, n, gini, clogc):  # pragma: no cover - numba
    """n H of integer class counts row[:width] summing to n: n log n - sum c log c (c log c read from `clogc`), or
    n - sum c^2 / n for Gini; the level-wise scorer's W H up to rounding, without a logarithm per class."""
    if gini:
        acc = 0.0
        for t in range(width):
            acc += row[t] * row[t]
        return n - acc / n if n > 0 else 0.0
    acc = clogc[np.int64(n)]
    for t in range(width):
        acc -= clogc[np.int64(row[t])]
    return acc


@njit(cache=True, nogil=True)
def _class_node(labels, a, e, n_classes, counts, index, node_row, clab):  # pragma: no cover - numba
    """A node's present classes: their counts into node_row[:width] (class order), each point's among them into
    clab[:n]; returns (width, the largest count). `counts` (n_classes,) must be zero, and is left so."""
    for m in range(a, e):
        counts[np.int64(labels[m])] += 1
    width = 0
    biggest = 0
    for t in range(counts.shape[0]):
        if counts[t] > 0:
            index[t] = width
            node_row[width] = counts[t]
            biggest = max(biggest, counts[t])
            width += 1
            counts[t] = 0
    for m in range(e - a):
        clab[m] = index[np.int64(labels[a + m])]
    return width, biggest


@njit(cache=True, inline="always")
def _class_candidate(P, n_rows, r, order, a, n, u, vals, thr, clab, width, configs, gini, min_leaf, parent, clogc,
                     cum, ccount, lrow, rrow, gains):  # pragma: no cover - numba
    """One candidate row r of a node (positions a.., n points, present classes clab[:n]): its thresholds drawn
    from u into thr (ascending) and every configuration's gain (parent - children) / n into gains (B,), -inf where a
    child would be smaller than min_leaf."""
    varies = _gather_and_draw(P, np.uint64(n_rows), np.uint64(r), order, a, n, u, vals, thr)
    k = thr.shape[0]
    gains[:] = -np.inf
    if not varies:  # one value (a discrete feature deep in a tree, often): no child of it holds a point
        return
    if k == 1 and width <= 4:
        # Counts in registers from comparisons (a loop LLVM vectorises), instead of a table update per point.
        t = thr[0]
        n_right = 0
        r1 = 0
        r2 = 0
        r3 = 0
        c1 = 0
        c2 = 0
        c3 = 0
        for m in range(n):
            g = np.int64(t < vals[m])
            lab = clab[m]
            e1 = np.int64(lab == 1)
            e2 = np.int64(lab == 2)
            e3 = np.int64(lab == 3)
            n_right += g
            r1 += g & e1
            r2 += g & e2
            r3 += g & e3
            c1 += e1
            c2 += e2
            c3 += e3
        node = (n - c1 - c2 - c3, c1, c2, c3)
        right = (n_right - r1 - r2 - r3, r1, r2, r3)
        for j in range(width):
            cum[0, j] = 0.0
            cum[1, j] = np.float64(node[j] - right[j])
            cum[2, j] = np.float64(node[j])
        ccount[0] = 0
        ccount[1] = n - n_right
        ccount[2] = n
    else:
        for b in range(k + 2):
            ccount[b] = 0
            for j in range(width):
                cum[b, j] = 0.0
        for m in range(n):
            v = vals[m]
            b = 1
            for j in range(k):
                b += thr[j] < v
            cum[b, clab[m]] += 1.0
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
        for t in range(width):
            lrow[t] = cum[j, t] - cum[i, t]
            rrow[t] = cum[k + 1, t] - lrow[t]
        child = _count_impurity(lrow, width, np.float64(n_left), gini, clogc)
        child += _count_impurity(rrow, width, np.float64(n - n_left), gini, clogc)
        gains[g] = (parent - child) / np.float64(n)


@njit(cache=True, inline="always")
def _one_target_candidate(P, n_rows, r, order, a, n, u, vals, thr, targets, configs, squared, reg, min_leaf, cum,
                          ccount, out3, c):  # pragma: no cover - numba
    """One candidate row r of a node (positions a.., n points, one target per position): its thresholds drawn from
    u into thr (ascending) and every configuration's gain into out3[0, c], -inf where a child would be too small
    (out3: the caller's (rho, B) gain table as a (1, rho, B) one, the level-wise scorer's indexing)."""
    varies = _gather_and_draw(P, np.uint64(n_rows), np.uint64(r), order, a, n, u, vals, thr)
    k = thr.shape[0]
    if not varies:  # one value: no child of it holds a point (min_leaf >= 1)
        out3[0, c, :] = -np.inf
        return
    if k == 1 and configs.shape[0] == 1 and configs[0, 0] == 0 and configs[0, 1] == 1:
        out3[0, c, 0] = _one_target_threshold_gain(vals, n, thr[0], targets, a, squared, reg, min_leaf)
        return
    out3[0, c, :] = -np.inf
    cum[:] = 0.0
    ccount[:] = 0
    for m in range(n):
        v = vals[m]
        b = 1
        for j in range(k):
            b += thr[j] < v
        y = targets[a + m, 0]
        cum[b, 0] += 1.0
        cum[b, 1] += y
        cum[b, 2] += y * y
        ccount[b] += 1
    _prefix_sums(cum, ccount)
    _score_one_target(cum, ccount, np.float64(n), configs, squared, reg, min_leaf, out3, 0, c)


@njit(cache=True, nogil=True)
def _start_root(stack, start, end, depth):  # pragma: no cover - numba
    """A root's stack: its node (local index 0, positions [start, end), depth) alone; returns the top."""
    stack[0, 0] = 0
    stack[0, 1] = start
    stack[0, 2] = end
    stack[0, 3] = depth
    return 0


@njit(cache=True, inline="always")
def _pop(stack, top, base):  # pragma: no cover - numba
    """The node on top of the stack: its row in the block (base + local index), first position, end, depth, and
    the new top."""
    return base + stack[top, 0], stack[top, 1], stack[top, 2], stack[top, 3], top - 1


@njit(cache=True, nogil=True)
def _chosen(state, out, min_gain):  # pragma: no cover - numba
    """`_pick_best` of out (rho, B), or -1 when no gain is finite and at least min_gain."""
    best = _pick_best(state, out)
    if best < 0 or not out[best // out.shape[1], best % out.shape[1]] >= min_gain:
        return -1
    return best


@njit(cache=True, nogil=True)
def _record_split(g, r, lo, hi, node_gain, d, n, first, row, thr_lo, thr_hi, gain, depth, weight,
                  left):  # pragma: no cover - numba
    """Node g splits on row r by lo < f <= hi; its children take local indices first, first + 1."""
    row[g] = r
    thr_lo[g] = lo
    thr_hi[g] = hi
    gain[g] = node_gain
    depth[g] = d
    weight[g] = n
    left[g] = first


@njit(cache=True, nogil=True)
def _push_children(stack, top, first, a, mid, e, d):  # pragma: no cover - numba
    """Push a split node's children (local indices first, first + 1; positions [a, mid) and [mid, e); depth d),
    the left one on top so it is grown first; returns the new top."""
    stack[top + 1, 0] = first + 1
    stack[top + 1, 1] = mid
    stack[top + 1, 2] = e
    stack[top + 2, 0] = first
    stack[top + 2, 1] = a
    stack[top + 2, 2] = mid
    stack[top + 1, 3] = d
    stack[top + 2, 3] = d
    return top + 2


@njit(cache=True, inline="always")
def _record_leaf(g, a, e, d, w, row, thr_lo, thr_hi, gain, left, depth, weight, start,
                 end):  # pragma: no cover - numba
    """Node g is a leaf of weight w holding positions [a, e) at depth d (no test: row 0, thresholds -inf / inf,
    gain 0)."""
    row[g] = 0
    thr_lo[g] = -np.inf
    thr_hi[g] = np.inf
    gain[g] = 0.0
    left[g] = -1
    depth[g] = d
    weight[g] = w
    start[g] = a
    end[g] = e


@njit(cache=True, nogil=True)
def _class_subtrees(r0, r1, roots_start, roots_end, roots_depth, seeds, cap_start, P, n_rows, order, max_points,
                    rho, n_thr, configs, min_split, min_leaf, min_gain, max_depth, row, thr_lo, thr_hi, left, depth,
                    gain, weight, start, end, used, labels, n_classes, gini):  # pragma: no cover - numba
    """`grow_subtrees` for class labels, roots r0..r1."""
    n_cfg = configs.shape[0]
    state = np.zeros(1, dtype=np.uint64)
    perm = np.arange(n_rows)
    swaps = np.empty(rho, dtype=np.int64)
    rows = np.empty(rho, dtype=np.int64)
    u = np.empty(n_thr)
    cand_thr = np.empty((rho, n_thr), dtype=np.float32)
    out = np.empty((rho, n_cfg))
    vals = np.empty(max_points, dtype=np.float32)
    clab = np.empty(max_points, dtype=np.int64)
    go = np.empty(max_points, dtype=np.bool_)
    tmp_o = np.empty(max_points, dtype=order.dtype)
    tmp_l = np.empty(max_points, dtype=labels.dtype)
    stack = np.empty((max_points, 4), dtype=np.int64)  # local index, first position, end, depth
    counts = np.zeros(n_classes, dtype=np.int64)
    index = np.empty(n_classes, dtype=np.int64)
    node_row = np.empty(n_classes)
    cum = np.empty((n_thr + 2, n_classes))
    ccount = np.empty(n_thr + 2, dtype=np.int64)
    lrow = np.empty(n_classes)
    rrow = np.empty(n_classes)
    clogc = np.zeros(max_points + 1)  # c log c of the counts a node can hold
    for t in range(2, max_points + 1):
        clogc[t] = t * np.log(t)
    for r in range(r0, r1):
        state[0] = seeds[r]
        base = cap_start[r]
        n_used = 1
        top = _start_root(stack, roots_start[r], roots_end[r], roots_depth)
        while top >= 0:
            g, a, e, d, top = _pop(stack, top, base)
            n = e - a
            if n < min_split or n < 2 * min_leaf or d >= max_depth:
                _record_leaf(g, a, e, d, e - a, row, thr_lo, thr_hi, gain, left, depth, weight, start, end)
                continue
            width, biggest = _class_node(labels, a, e, n_classes, counts, index, node_row, clab)
            if biggest == n:  # pure
                _record_leaf(g, a, e, d, e - a, row, thr_lo, thr_hi, gain, left, depth, weight, start, end)
                continue
            parent = _count_impurity(node_row, width, np.float64(n), gini, clogc)
            _draw_rows(state, n_rows, rho, perm, swaps, rows)
            for c in range(rho):
                for j in range(n_thr):
                    u[j] = _uniform(state)
                _class_candidate(P, n_rows, rows[c], order, a, n, u, vals, cand_thr[c], clab, width, configs, gini,
                                 min_leaf, parent, clogc, cum, ccount, lrow, rrow, out[c])
            best = _chosen(state, out, min_gain)
            if best < 0:
                _record_leaf(g, a, e, d, e - a, row, thr_lo, thr_hi, gain, left, depth, weight, start, end)
                continue
            c = best // n_cfg
            lo, hi = _band(cand_thr[c], configs, best % n_cfg)
            nl = _partition(P, n_rows, rows[c], lo, hi, order, labels, a, e, go, tmp_o, tmp_l)
            _record_split(g, rows[c], lo, hi, out[c, best % n_cfg], d, n, n_used, row, thr_lo, thr_hi, gain, depth,
                          weight, left)
            top = _push_children(stack, top, n_used, a, a + nl, e, d + 1)
            n_used += 2
        used[r] = n_used


@njit(cache=True, nogil=True)
def _one_target_subtrees(r0, r1, roots_start, roots_end, roots_depth, seeds, cap_start, P, n_rows, order,
                         max_points, rho, n_thr, configs, min_split, min_leaf, min_gain, max_depth, row, thr_lo,
                         thr_hi, left, depth, gain, weight, start, end, used, targets, squared,
                         reg):  # pragma: no cover - numba
    """`grow_subtrees` for one regression target per position (targets (n_positions,)), roots r0..r1."""
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
    go = np.empty(max_points, dtype=np.bool_)
    tmp_o = np.empty(max_points, dtype=order.dtype)
    tmp_t = np.empty(max_points)
    stack = np.empty((max_points, 4), dtype=np.int64)
    cum = np.empty((n_thr + 2, 3))
    ccount = np.empty(n_thr + 2, dtype=np.int64)
    column = targets.reshape((targets.shape[0], 1))
    for r in range(r0, r1):
        state[0] = seeds[r]
        base = cap_start[r]
        n_used = 1
        top = _start_root(stack, roots_start[r], roots_end[r], roots_depth)
        while top >= 0:
            g, a, e, d, top = _pop(stack, top, base)
            n = e - a
            if n < min_split or n < 2 * min_leaf or d >= max_depth:
                _record_leaf(g, a, e, d, e - a, row, thr_lo, thr_hi, gain, left, depth, weight, start, end)
                continue
            s1 = 0.0
            s2 = 0.0
            for m in range(a, e):
                y = targets[m]
                s1 += y
                s2 += y * y
            mean = s1 / n
            if s2 / n - mean * mean <= 1e-12 * max(s2 / n, 1e-300):  # zero variance, as `_node_purity` judges it
                _record_leaf(g, a, e, d, e - a, row, thr_lo, thr_hi, gain, left, depth, weight, start, end)
                continue
            _draw_rows(state, n_rows, rho, perm, swaps, rows)
            for c in range(rho):
                for j in range(n_thr):
                    u[j] = _uniform(state)
                _one_target_candidate(P, n_rows, rows[c], order, a, n, u, vals, cand_thr[c], column, configs,
                                      squared, reg, min_leaf, cum, ccount, out3, c)
            best = _chosen(state, out, min_gain)
            if best < 0:
                _record_leaf(g, a, e, d, e - a, row, thr_lo, thr_hi, gain, left, depth, weight, start, end)
                continue
            c = best // n_cfg
            lo, hi = _band(cand_thr[c], configs, best % n_cfg)
            nl = _partition(P, n_rows, rows[c], lo, hi, order, targets, a, e, go, tmp_o, tmp_t)
            _record_split(g, rows[c], lo, hi, out[c, best % n_cfg], d, n, n_used, row, thr_lo, thr_hi, gain, depth,
                          weight, left)
            top = _push_children(stack, top, n_used, a, a + nl, e, d + 1)
            n_used += 2
        used[r] = n_used


def grow_sorted_subtrees(roots_start: np.ndarray, roots_end: np.ndarray, roots_depth: int, seeds: np.ndarray,
                         X: np.ndarray, order: np.ndarray, wts: np.ndarray, labels: np.ndarray, targets: np.ndarray,
                         criterion: int, n_classes: int, rho: int, min_samples_split: int, min_samples_leaf: int,
                         min_gain: float, max_depth: int) -> SubtreeNodes:
    """Grow each root's subtree to its leaves with every threshold searched (`exhaustive_best_sorted`'s choice:
    the best boundary between distinct values of rho distinct features), partitioning its positions of `order`
    and their weights `wts` in place as level-wise growth would.

    Parameters
    ----------
    roots_start, roots_end : (R,) int64, root r owns positions [start, end) of the order
    roots_depth : depth of every root (one level's nodes)
    seeds : (R,) uint64, each subtree's generator seed
    X : (n_features, n_points) float32, the training matrix feature-major (C-contiguous)
    wts : (n_positions,) weight per position: bootstrap counts (uint8, or float32 beyond a byte), sample weights
        or ones (float64)
    labels : (n_points,) class per point (class criteria); targets : (n_points, 1) float64 (squared error)
    criterion : ENTROPY, GINI or SQUARED_ERROR
    """
    R = roots_start.shape[0]
    nodes = SubtreeNodes.allocate(roots_end - roots_start)
    max_points = int((roots_end - roots_start).max()) if R else 1
    classes = criterion <= GINI
    lab = labels if classes else np.zeros(1, dtype=np.int64)
    tgt = np.zeros(1) if classes else np.ascontiguousarray(targets[:, 0], dtype=np.float64)
    # a node's weight is at most its root's
    xlogx = whole_weight_xlogx(wts, roots_start, roots_end) if criterion == ENTROPY else np.zeros(0)
    run_ranges(_sorted_subtrees, R, roots_start, roots_end, roots_depth, seeds, nodes.cap_start, X, order, wts, lab,
               tgt, criterion, max(n_classes, 1), max_points, rho, min_samples_split, min_samples_leaf,
               float(min_gain), max_depth, xlogx, *nodes.columns(), chunks_per_thread=CHUNKS_PER_THREAD)
    return nodes.counted()


@njit(cache=True, nogil=True)
def _sorted_node(w_loc, lab_loc, tgt_loc, a, e, classes, totals):  # pragma: no cover - numba
    """A node's weight and whether its targets are all alike, as the level-wise statistics judge it (one class
    holding the weight; zero variance of the targets that are not NaN). `totals` (n_classes,) is scratch."""
    w_node = 0.0
    if classes:
        totals[:] = 0.0
        for m in range(a, e):
            w_node += w_loc[m]
            totals[lab_loc[m]] += w_loc[m]
        biggest = -np.inf
        for t in range(totals.shape[0]):
            biggest = max(biggest, totals[t])
        return w_node, biggest >= w_node * (1.0 - 1e-12)
    w = 0.0
    s1 = 0.0
    s2 = 0.0
    for m in range(a, e):
        w_node += w_loc[m]
        y = tgt_loc[m]
        if math.isnan(y):
            continue
        wy = w_loc[m] * y
        w += w_loc[m]
        s1 += wy
        s2 += wy * y
    if w <= 0.0:
        return w_node, True
    mean = s1 / w
    return w_node, s2 / w - mean * mean <= 1e-12 * max(s2 / w, 1e-300)


@njit(cache=True, inline="always")
def _move(arr, a, n, go, nl, tmp):  # pragma: no cover - numba
    """Stable partition of arr[a:a + n] by go[:n] (nl of them true), those going left first."""
    i_left = 0
    i_right = nl
    for m in range(n):
        if go[m]:
            tmp[i_left] = arr[a + m]
            i_left += 1
        else:
            tmp[i_right] = arr[a + m]
            i_right += 1
    for m in range(n):
        arr[a + m] = tmp[m]


@njit(cache=True, inline="always")
def _load_root(order, wts, carried, a0, n0, o_loc, w_loc, c_loc):  # pragma: no cover - numba
    """Copy a root's positions a0..a0 + n0 of the order, their weights and a per-position array (labels or
    targets) into local arrays."""
    for m in range(n0):
        o_loc[m] = order[a0 + m]
        w_loc[m] = wts[a0 + m]
        c_loc[m] = carried[a0 + m]


@njit(cache=True, inline="always")
def _store_root(order, wts, carried, a0, n0, o_loc, w_loc, c_loc):  # pragma: no cover - numba
    """`_load_root` backwards: the grown subtree's order, weights and per-position array written in place."""
    for m in range(n0):
        order[a0 + m] = o_loc[m]
        wts[a0 + m] = w_loc[m]
        carried[a0 + m] = c_loc[m]


@njit(cache=True, inline="always")
def _split_local(P, n_rows, r, lo, hi, o_loc, w_loc, c_loc, a, n, go, tmp_o, tmp_w, tmp_c):  # pragma: no cover
    """Stable partition of local positions a..a + n (order, weights, labels or targets) by lo < P[point, r] <= hi,
    left-going first; returns the left count."""
    r_c = np.uint64(r)
    nl = 0
    for m in range(n):
        v = P[np.uint64(o_loc[a + m]) * np.uint64(n_rows) + r_c]
        go[m] = v > lo and v <= hi
        nl += go[m]
    _move(o_loc, a, n, go, nl, tmp_o)
    _move(w_loc, a, n, go, nl, tmp_w)
    _move(c_loc, a, n, go, nl, tmp_c)
    return nl


@njit(cache=True, nogil=True)
def _sorted_subtrees(r0, r1, roots_start, roots_end, roots_depth, seeds, cap_start, X, order, wts, labels, tgt,
                     criterion, n_classes, max_points, rho, min_split, min_leaf, min_gain, max_depth, xlogx, row,
                     thr_lo, thr_hi, left, depth, gain, weight, start, end, used):  # pragma: no cover - numba
    """`grow_sorted_subtrees`, roots r0..r1. A root's positions, weights and targets are copied into local arrays
    (which stay in the core's cache while its subtree grows) and its order and weights written back at the end."""
    n_rows = X.shape[0]
    classes = criterion <= GINI
    state = np.zeros(1, dtype=np.uint64)
    perm = np.arange(n_rows)
    swaps = np.empty(rho, dtype=np.int64)
    rows = np.empty(rho, dtype=np.int64)
    cand_thr = np.empty(rho, dtype=np.float32)
    out = np.empty((rho, 1))
    vals = np.empty(max_points, dtype=np.float32)
    bits = vals.view(np.uint32)
    keys = np.empty(max_points, dtype=np.uint64)
    spare = np.empty(max_points if max_points >= RADIX_MIN else 0, dtype=np.uint64)
    counts = np.empty(1 << RADIX_BITS, dtype=np.int64)
    ident = np.arange(max_points)
    o_loc = np.empty(max_points, dtype=order.dtype)
    w_loc = np.empty(max_points)
    lab_loc = np.zeros(max_points if classes else 1, dtype=np.int64)
    tgt_loc = np.zeros(1 if classes else max_points)
    go = np.empty(max_points, dtype=np.bool_)
    tmp_o = np.empty(max_points, dtype=order.dtype)
    tmp_w = np.empty(max_points)
    tmp_l = np.empty(lab_loc.shape[0], dtype=np.int64)
    tmp_t = np.empty(tgt_loc.shape[0])
    stack = np.empty((max_points, 4), dtype=np.int64)
    totals = np.empty(n_classes)
    left_s = np.empty(n_classes)
    total_s = np.empty(n_classes)
    lo = np.float32(-np.inf)
    for r in range(r0, r1):
        state[0] = seeds[r]
        base = cap_start[r]
        a0 = roots_start[r]
        n0 = roots_end[r] - a0
        for m in range(n0):
            i = order[a0 + m]
            o_loc[m] = i
            w_loc[m] = wts[a0 + m]
            if classes:
                lab_loc[m] = labels[i]
            else:
                tgt_loc[m] = tgt[i]
        n_used = 1
        top = _start_root(stack, 0, n0, roots_depth)
        while top >= 0:
            g, a, e, d, top = _pop(stack, top, base)
            n = e - a
            w_node, pure = _sorted_node(w_loc, lab_loc, tgt_loc, a, e, classes, totals)
            if n < min_split or n < 2 * min_leaf or d >= max_depth or pure or not w_node > 0.0:
                _record_leaf(g, a0 + a, a0 + e, d, w_node, row, thr_lo, thr_hi, gain, left, depth, weight, start, end)
                continue
            _draw_rows(state, n_rows, rho, perm, swaps, rows)
            for c in range(rho):
                x = X[rows[c]]
                for m in range(n):
                    vals[m] = x[o_loc[a + m]]
                out[c, 0] = -np.inf
                cand_thr[c] = 0.0
                if _sorted_keys(bits, 0, n, keys, spare, counts):
                    g_c, t_c = _scan_sorted(keys, vals, n, a, ident, w_loc, criterion, lab_loc, tgt_loc, min_leaf,
                                            left_s, total_s, xlogx)
                    out[c, 0] = g_c
                    cand_thr[c] = t_c
            c = _chosen(state, out, min_gain)
            if c < 0:
                _record_leaf(g, a0 + a, a0 + e, d, w_node, row, thr_lo, thr_hi, gain, left, depth, weight, start, end)
                continue
            hi = cand_thr[c]
            x = X[rows[c]]
            nl = 0
            for m in range(n):
                v = x[o_loc[a + m]]
                go[m] = v > lo and v <= hi
                nl += go[m]
            _move(o_loc, a, n, go, nl, tmp_o)
            _move(w_loc, a, n, go, nl, tmp_w)
            if classes:
                _move(lab_loc, a, n, go, nl, tmp_l)
            else:
                _move(tgt_loc, a, n, go, nl, tmp_t)
            _record_split(g, rows[c], lo, hi, out[c, 0], d, w_node, n_used, row, thr_lo, thr_hi, gain, depth, weight,
                          left)
            top = _push_children(stack, top, n_used, a, a + nl, e, d + 1)
            n_used += 2
        used[r] = n_used
        for m in range(n0):
            order[a0 + m] = o_loc[m]
            wts[a0 + m] = w_loc[m]
