"""Fused split search for families whose responses are rows of one matrix (axis-aligned weak learners).

When a candidate's response is just ``F[row, point]`` (the feature-major training matrix), materialising a
(rho, M) response table per chunk costs more memory traffic than the search itself on this kind of machine. Here
each (node, candidate) pair instead reads its node's points straight from the trainer's global order: one pass
gathers the feature into a small scratch buffer (min and max on the way), the K thresholds are drawn from the same
uniforms the generic path uses, and `_bin_node` / `_score_configs` score it while the buffer is still in cache. The
winning candidate's row is read once more by `partition_by_row`.

Pairs of large nodes are visited grouped by matrix row, so a thread gathers from one row (n_points floats, L2-sized
for a few hundred thousand points) for a long stretch. Small nodes, the bulk of a deep level's pairs, go node by node
instead and read a point-major copy of the matrix: a node's rho candidates then share each point's cache lines, and
its positions, labels, uniforms and gains are read once rather than in every row's sweep (2x faster on the deep
levels of a 10-class fit). Labels and small targets travel with the order (`pos_labels`, `pos_targets`, moved by
the partition) instead of being read through it.

The results equal the generic path's bit for bit (same thresholds, same gains, same partition), so a seed still
fixes the model bytes; tests compare the two.
"""

from __future__ import annotations

import math

import numpy as np

from imageforest.forest.objectives import GINI, MIXED, SQUARED_ERROR, _class_impurity, accumulate
from imageforest.forest.split_search import N_WORK_BLOCKS, _score_configs
from imageforest.forest.threads import run_ranges
from imageforest.kernels import njit

# Nodes of at most this many points are searched node by node from the point-major matrix; larger ones row by row.
POINT_ORDER_MAX = 64
# A (node, candidate) pair's fixed cost in points scanned, for splitting the work into blocks of equal cost.
PAIR_COST = 64
# Ranges of work blocks per thread, taken by whichever thread is free (see `run_ranges`).
CHUNKS_PER_THREAD = 8


@njit(cache=True)
def _pairs_by_row(rows):  # pragma: no cover - numba
    """Flat pair indices (s * rho + c) ordered by the row they read (counting sort, stable)."""
    n_nodes = rows.shape[0]
    return _visit_order(rows, np.ones(n_nodes, dtype=np.bool_), np.zeros(n_nodes, dtype=np.int64), 1, 1)[0]


@njit(cache=True)
def _visit_order(rows, by_row, sizes, n_work, pair_cost):  # pragma: no cover - numba
    """Flat pair indices (s * rho + c): those of nodes with `by_row` ordered by the row they read (counting sort,
    stable), then every other node's pairs in node order; and the bounds of n_work blocks of consecutive pairs
    of about equal cost (a pair costs its node's points plus `pair_cost`), (n_work + 1,) int64.

    Blocks of equal pair counts left one of two threads three times the other's work on a shallow level, where
    node sizes differ by orders of magnitude.
    """
    n_nodes, rho = rows.shape
    n_rows = 1
    for s in range(n_nodes):
        if by_row[s]:
            for c in range(rho):
                n_rows = max(n_rows, rows[s, c] + 1)
    start = np.zeros(n_rows + 1, dtype=np.int64)
    n_by_row = 0
    total = 0
    for s in range(n_nodes):
        total += rho * (sizes[s] + pair_cost)
        if by_row[s]:
            n_by_row += rho
            for c in range(rho):
                start[rows[s, c] + 1] += 1
    for d in range(n_rows):
        start[d + 1] += start[d]
    perm = np.empty(n_nodes * rho, dtype=np.int64)
    rest = n_by_row
    for s in range(n_nodes):
        for c in range(rho):
            p = s * rho + c
            if by_row[s]:
                perm[start[rows[s, c]]] = p
                start[rows[s, c]] += 1
            else:
                perm[rest] = p
                rest += 1
    bounds = np.empty(n_work + 1, dtype=np.int64)
    bounds[0] = 0
    b = 1
    acc = 0
    p = 0
    for q in range(n_by_row):  # pairs grouped by row, then the other nodes' pairs in node order
        acc += sizes[perm[q] // rho] + pair_cost
        p += 1
        while b < n_work and acc * n_work >= total * b:
            bounds[b] = p
            b += 1
    for s in range(n_nodes):
        if by_row[s]:
            continue
        for _ in range(rho):
            acc += sizes[s] + pair_cost
            p += 1
            while b < n_work and acc * n_work >= total * b:
                bounds[b] = p
                b += 1
    while b <= n_work:
        bounds[b] = perm.shape[0]
        b += 1
    return perm, bounds


@njit(cache=True)
def _bin_node(vals, n, thr, a, order, per_position, wts, criterion, labels, targets, n_blocks, q, cum,
              ccount):  # pragma: no cover - numba
    """`_bin_pair` for a node's gathered responses vals[:n] whose points sit at positions a.. of the order.

    Indexes the full arrays instead of slicing them: at deep levels nodes hold a handful of points, and slice views
    per (node, candidate) cost as much as the scan.
    """
    k = thr.shape[0]
    cum[:] = 0.0
    ccount[:] = 0
    w_node = 0.0
    for m in range(n):
        v = vals[m]
        b = 1
        for j in range(k):  # branch-free bin count, as in `_bin_pair`
            b += thr[j] < v
        i = a + m if per_position else order[a + m]
        w = wts[a + m]  # unmoved under unit weights, but then every entry is 1
        accumulate(cum[b], i, w, criterion, labels, targets, n_blocks, q)
        ccount[b] += 1
        w_node += w
    _prefix_sums(cum, ccount)
    return w_node


@njit(cache=True, inline="always")
def _prefix_sums(cum, ccount, width=-1):  # pragma: no cover - numba
    """Bins [1, K + 1] of a (K + 2, S) table become running sums (bins [i, j) then hold cum[j] - cum[i]); only the
    first `width` columns when given."""
    n_cols = cum.shape[1] if width < 0 else width
    for b in range(1, cum.shape[0]):
        ccount[b] += ccount[b - 1]
        for j in range(n_cols):
            cum[b, j] += cum[b - 1, j]


@njit(cache=True, inline="always")
def _response_layout(F, P, n_rows, r, n):  # pragma: no cover - numba
    """Where row r's responses of a node of n points sit: point i's is src[i * stride + offset].

    F, P: the response matrix flattened, feature-major and point-major. A small node reads P: its rho candidates
    then share each point's cache lines, where rows of F would each cost a miss per point.
    """
    if n <= POINT_ORDER_MAX:
        return P, np.uint64(n_rows), np.uint64(r)
    return F, np.uint64(1), np.uint64(r) * np.uint64(F.shape[0] // n_rows)


@njit(cache=True, inline="always")
def _gather_and_draw(src, stride, offset, order, a, n, u_sc, vals, thr):  # pragma: no cover - numba
    """Copy a node's responses src[order[a:a + n] * stride + offset] into vals[:n] and draw its K thresholds,
    ascending, into thr: lo + u (hi - lo) over the node's response range, as numpy evaluates it on float32 lo, hi
    and float64 u. `src`, `stride`, `offset`: from `_response_layout`. Returns whether the responses differ (when
    they do not, every threshold sends every point left, and no test of them splits the node).
    """
    lo = np.float32(np.inf)
    hi = np.float32(-np.inf)
    for m in range(n):
        v = src[np.uint64(order[a + m]) * stride + offset]
        vals[m] = v
        lo = min(lo, v)
        hi = max(hi, v)
    span = np.float64(np.float32(hi - lo))
    for j in range(u_sc.shape[0]):  # insertion sort: K is small, and a library sort call costs more than the scan
        t = np.float32(np.float64(lo) + u_sc[j] * span)
        i = j
        while i > 0 and thr[i - 1] > t:
            thr[i] = thr[i - 1]
            i -= 1
        thr[i] = t
    return hi > lo


@njit(cache=True, inline="always")
def _two_class_impurity(a, b, gini):  # pragma: no cover - numba
    """`_class_impurity` of the row [a, b], operation for operation (same bits)."""
    total = 0.0 + a + b
    if total <= 0.0:
        return 0.0
    if gini:
        acc = 1.0
        p = a / total
        acc -= p * p
        p = b / total
        acc -= p * p
        return total * acc
    acc = 0.0
    if a > 0.0:
        p = a / total
        acc -= p * math.log(p)
    if b > 0.0:
        p = b / total
        acc -= p * math.log(p)
    return total * acc


@njit(cache=True, inline="always")
def _score_two_class(vals, n, t, labels, a, gini, min_samples_leaf, out, s, c):  # pragma: no cover - numba
    """Gain of the test f <= t on a node's gathered responses vals[:n], two classes, unit weights, into out[s, c, 0].

    Three integer counts in registers (a loop LLVM vectorises) instead of a read-modify-write of a bin table per
    point; the impurities are those `_score_configs` computes from the same (exact, integer) sums.
    """
    n_right = 0
    n_right1 = 0
    n_1 = 0
    for m in range(n):
        g = np.int64(t < vals[m])
        lab = np.int64(labels[a + m])
        n_right += g
        n_right1 += g & lab
        n_1 += lab
    n_left = n - n_right
    if n_left < min_samples_leaf or n_right < min_samples_leaf:
        return
    l1 = np.float64(n_1 - n_right1)
    l0 = np.float64(n_left - (n_1 - n_right1))
    r1 = np.float64(n_right1)
    r0 = np.float64(n_right - n_right1)
    parent = _two_class_impurity(l0 + r0, l1 + r1, gini)
    child = _two_class_impurity(l0, l1, gini) + _two_class_impurity(r0, r1, gini)
    out[s, c, 0] = (parent - child) / np.float64(n)


@njit(cache=True, inline="always")
def _score_classes(cum, ccount, w_node, configs, gini, min_samples_leaf, width, parent, total, left, right, out, s,
                   c):  # pragma: no cover - numba
    """`_score_configs` for class-count rows, operation for operation (same gains), without the other criteria's
    code: a first fit compiles only what its task needs.

    The rows hold the node's `width` present classes in class order (a class absent from the node adds nothing to
    either impurity, so skipping it keeps the gains' bits); parent: the node's impurity, or NaN to compute it from
    the table. total, left, right: scratch rows of the class count.
    """
    k = cum.shape[0] - 2
    n_total = ccount[k + 1]
    for t in range(width):
        total[t] = cum[k + 1, t]
    if parent != parent:
        parent = _class_impurity(total, width, gini)
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
        for t in range(width):
            left[t] = cum[j, t] - cum[i, t]
            right[t] = total[t] - left[t]
        child = _class_impurity(left, width, gini)
        child += _class_impurity(right, width, gini)
        out[s, c, g] = (parent - child) / w_node


def node_classes(labels, f_start, f_end, n_classes, gini, unit_weights):
    """Each node's present classes: positions' labels renumbered within their node, and per-node tables.

    Returns
    -------
    clab : (n_positions,) int8 or int32, position m's class among its node's present classes (class order); only
        the nodes' positions are written
    width : (n_nodes,) int64, classes present
    parent : (n_nodes,) float64, the node's impurity (unit weights: the same for all its candidates), else NaN
    """
    n_nodes = f_start.shape[0]
    small = n_classes <= np.iinfo(np.int8).max
    clab = np.empty(labels.shape[0] if n_nodes else 0, dtype=np.int8 if small else np.int32)
    width = np.empty(n_nodes, dtype=np.int64)
    parent = np.full(n_nodes, np.nan)
    run_ranges(_node_classes_range, n_nodes, labels, f_start, f_end, n_classes, gini, bool(unit_weights), clab, width,
               parent)
    return clab, width, parent


@njit(cache=True, nogil=True)
def _node_classes_range(s0, s1, labels, f_start, f_end, n_classes, gini, unit_weights, clab, width,
                        parent):  # pragma: no cover - numba
    full = np.zeros(n_classes, dtype=np.int64)
    index = np.empty(n_classes, dtype=np.int64)
    row = np.empty(n_classes)
    for s in range(s0, s1):
        a = f_start[s]
        e = f_end[s]
        for m in range(a, e):
            full[np.uint64(labels[m])] += 1
        w = 0
        for t in range(n_classes):
            if full[t] > 0:
                index[t] = w
                row[w] = np.float64(full[t])
                w += 1
                full[t] = 0
        width[s] = w
        for m in range(a, e):
            clab[m] = index[np.uint64(labels[m])]
        if unit_weights:
            parent[s] = _class_impurity(row, w, gini)


@njit(cache=True, inline="always")
def _one_target_impurity(w, s1, s2, squared, reg):  # pragma: no cover - numba
    """`weighted_impurity` of one one-target block (weight w, sum s1, sum of squares s2), operation for operation:
    squared error, or w times 0.5 log of the regularised variance (`_half_logdet_cov` of a 1 x 1 block)."""
    if w <= 0.0:
        return 0.0
    if squared:
        return 0.0 + (s2 - s1 * s1 / w)
    m = s1 / w
    v = (s2 / w - m * m) + reg
    if v < reg:
        v = reg
    return 0.0 + w * (0.5 * math.log(v))


@njit(cache=True, inline="always")
def _score_one_target(cum, ccount, w_node, configs, squared, reg, min_samples_leaf, out, s,
                      c):  # pragma: no cover - numba
    """`_score_configs` for one-target regression rows (weight, sum, sum of squares), same gains."""
    k = cum.shape[0] - 2
    n_total = ccount[k + 1]
    w0 = cum[k + 1, 0]
    s10 = cum[k + 1, 1]
    s20 = cum[k + 1, 2]
    parent = _one_target_impurity(w0, s10, s20, squared, reg)
    for g in range(configs.shape[0]):
        i = configs[g, 0]
        j = configs[g, 1]
        n_left = ccount[j] - ccount[i]
        if n_left < min_samples_leaf or n_total - n_left < min_samples_leaf:
            continue
        wl = cum[j, 0] - cum[i, 0]
        s1l = cum[j, 1] - cum[i, 1]
        s2l = cum[j, 2] - cum[i, 2]
        child = _one_target_impurity(wl, s1l, s2l, squared, reg)
        child += _one_target_impurity(w0 - wl, s10 - s1l, s20 - s2l, squared, reg)
        out[s, c, g] = (parent - child) / w_node


@njit(cache=True, inline="always")
def _one_target_threshold_gain(vals, n, t, targets, a, squared, reg, min_samples_leaf):  # pragma: no cover - numba
    """Gain of the test f <= t on a node's gathered responses vals[:n] (one target, unit weights), or -inf when a
    child would hold fewer than min_samples_leaf points.

    Each side's sums in registers, point after point in the order the bin table adds them (a side's sum adds a
    signed zero for the other side's points, which leaves it unchanged), then `_score_one_target`'s arithmetic on
    the one-threshold table: the same gains, bit for bit. A scalar result: small nodes score many candidates, and
    a view of the caller's gain table per candidate cost more than the scan of a few points.
    """
    n_right = 0
    l1 = 0.0
    l2 = 0.0
    r1 = 0.0
    r2 = 0.0
    for m in range(n):
        g = t < vals[m]
        n_right += g
        y = targets[a + m, 0]
        yy = y * y
        gr = np.float64(g)
        gl = 1.0 - gr
        r1 += gr * y
        r2 += gr * yy
        l1 += gl * y
        l2 += gl * yy
    n_left = n - n_right
    if n_left < min_samples_leaf or n_right < min_samples_leaf:
        return -np.inf
    wl = np.float64(n_left)
    w0 = wl + np.float64(n_right)
    s10 = r1 + l1
    s20 = r2 + l2
    parent = _one_target_impurity(w0, s10, s20, squared, reg)
    child = _one_target_impurity(wl, l1, l2, squared, reg)
    child += _one_target_impurity(w0 - wl, s10 - l1, s20 - l2, squared, reg)
    return (parent - child) / w0


def row_gain_table(F, P, rows, u, order, wts, unit_weights, f_start, f_end, configs, criterion, labels, targets,
                   per_position, n_blocks, q, n_stats, reg, min_samples_leaf):
    """Gain of every (node, candidate, configuration) and the candidates' sorted thresholds.

    Parameters
    ----------
    F : (n_rows, n_points) float32, feature-major training matrix
    P : (n_points, n_rows) float32, the same matrix point-major (C-contiguous)
    rows : (n_nodes, rho) int32 or int64, the row of F each candidate reads
    u : (n_nodes, rho, K) float64 uniforms; thresholds are lo + u (hi - lo) over the node's response range
    order, wts : the trainer's global point order (int32) and weights (float64)
    unit_weights : every weight is 1 (no bagging or sample weights): the scan skips reading them
    f_start, f_end : (n_nodes,) int64, node s owns order[f_start[s]:f_end[s]]
    configs : (B, 2) int64 from `partition_configs`
    labels, targets : per position (aligned with `order`) when `per_position`, else per point

    Returns
    -------
    gain : (n_nodes, rho, B) float64, -inf where a child is too small
    thresholds : (n_nodes, rho, K) float32, ascending
    """
    n_nodes, rho, k = u.shape
    n_cfg = configs.shape[0]
    out = np.full((n_nodes, rho, n_cfg), -np.inf)
    thresholds = np.empty((n_nodes, rho, k), dtype=np.float32)
    n_pairs = n_nodes * rho
    # Large nodes' pairs grouped by row: a thread then reads one row of F (L2-sized) for a long stretch. Small nodes'
    # points are scattered over every row: their pairs go node by node, reading P, so that a node's data is read
    # once rather than once per candidate.
    sizes = f_end - f_start
    n_work = min(n_pairs, N_WORK_BLOCKS)
    perm, bounds = _visit_order(rows, sizes > POINT_ORDER_MAX, sizes, n_work, PAIR_COST)
    # both matrices flat: one gather loop reads either (a second loop doubled the kernels' compile time)
    common = (bounds, perm, F.reshape(-1), P.reshape(-1), F.shape[0], rows, u, order, f_start, f_end, configs)
    # The two commonest tasks, classification and one-target regression, each take a kernel of their own: a first
    # fit in a new environment compiles only its task's (the generic kernel holds every criterion's code).
    # Extremely randomized trees without weights take scans with no bin tables: their arithmetic is the bin table's
    # + `_score_configs`' for one threshold, term by term (same gains).
    one_threshold = bool(unit_weights and k == 1 and n_cfg == 1 and configs[0, 0] == 0 and configs[0, 1] == 1)
    if per_position and criterion <= GINI:
        two_class_ert = one_threshold and n_stats == 2
        if n_stats > 2:
            # Deep nodes hold a few of many classes: tables and impurities run over the present ones only.
            classes = node_classes(labels, f_start, f_end, n_stats, criterion == GINI, unit_weights)
        else:  # two classes: the labels as they are (and a binary first fit compiles no renumbering)
            classes = (labels, np.full(n_nodes, n_stats, dtype=np.int64), np.full(n_nodes, np.nan))
        run_ranges(_class_gain_blocks, n_work, *common, wts, bool(unit_weights), labels, *classes, n_stats,
                   criterion == GINI, min_samples_leaf, two_class_ert, out, thresholds,
                   chunks_per_thread=CHUNKS_PER_THREAD)
    elif per_position and n_blocks == 1 and q == 1 and criterion != MIXED:
        run_ranges(_one_target_gain_blocks, n_work, *common, wts, bool(unit_weights), targets,
                   criterion == SQUARED_ERROR, float(reg[0]), min_samples_leaf, one_threshold, out, thresholds,
                   chunks_per_thread=CHUNKS_PER_THREAD)
    else:
        run_ranges(_row_gain_blocks, n_work, *common, wts, criterion, labels, targets, bool(per_position), n_blocks,
                   q, n_stats, reg, min_samples_leaf, out, thresholds, chunks_per_thread=CHUNKS_PER_THREAD)
    return out, thresholds


@njit(cache=True, inline="always")
def _block_pairs(blk, bounds, perm, rho, f_start, f_end):  # pragma: no cover - numba
    """Work block blk: its pairs perm[p0:p1] and a gather buffer for the largest node among them."""
    p0 = bounds[blk]
    p1 = bounds[blk + 1]
    size = 1
    for pp in range(p0, p1):
        s = perm[pp] // rho
        size = max(size, f_end[s] - f_start[s])
    return p0, p1, np.empty(size, dtype=np.float32)


@njit(cache=True, inline="always")
def _next_pair(pp, perm, rho, F, P, n_rows, rows, u, order, f_start, f_end, vals, thr,
               thresholds):  # pragma: no cover - numba
    """Pair perm[pp]: its node s, candidate c, the node's first position a and size n; the node's responses
    gathered into vals[:n] and the candidate's thresholds drawn into thr (and recorded in thresholds[s, c])."""
    s = perm[pp] // rho
    c = perm[pp] % rho
    a = f_start[s]
    n = f_end[s] - a
    r = rows[s, c]
    src, stride, offset = _response_layout(F, P, n_rows, r, n)
    _gather_and_draw(src, stride, offset, order, a, n, u[s, c], vals, thr)
    for j in range(thr.shape[0]):
        thresholds[s, c, j] = thr[j]
    return s, c, a, n


@njit(cache=True, nogil=True)
def _class_gain_blocks(blk0, blk1, bounds, perm, F, P, n_rows, rows, u, order, f_start, f_end, configs, wts,
                       unit_weights, labels, clab, width, parent, n_classes, gini, min_samples_leaf, two_class_ert,
                       out, thresholds):  # pragma: no cover - numba
    """`row_gain_table`'s work blocks blk0..blk1 for class labels per position (`node_classes`' tables:
    clab .. parent)."""
    rho = u.shape[1]
    k = u.shape[2]
    for blk in range(blk0, blk1):
        p0, p1, vals = _block_pairs(blk, bounds, perm, rho, f_start, f_end)
        cum = np.empty((k + 2, n_classes))
        ccount = np.empty(k + 2, dtype=np.int64)
        total = np.empty(n_classes)
        left = np.empty(n_classes)
        right = np.empty(n_classes)
        thr = np.empty(k, dtype=np.float32)
        for pp in range(p0, p1):
            s, c, a, n = _next_pair(pp, perm, rho, F, P, n_rows, rows, u, order, f_start, f_end, vals, thr, thresholds)
            if two_class_ert:
                _score_two_class(vals, n, thr[0], labels, a, gini, min_samples_leaf, out, s, c)
                continue
            w_cls = width[s]
            cum[:, :w_cls] = 0.0
            ccount[:] = 0
            w_node = 0.0
            for m in range(n):
                v = vals[m]
                b = 1
                for j in range(k):  # branch-free bin count, as in `_bin_pair`
                    b += thr[j] < v
                w = 1.0 if unit_weights else wts[a + m]
                cum[b, np.uint64(clab[a + m])] += w
                ccount[b] += 1
                w_node += w
            _prefix_sums(cum, ccount, w_cls)
            if w_node > 0.0:
                _score_classes(cum, ccount, w_node, configs, gini, min_samples_leaf, w_cls, parent[s], total, left,
                               right, out, s, c)


@njit(cache=True, nogil=True)
def _one_target_gain_blocks(blk0, blk1, bounds, perm, F, P, n_rows, rows, u, order, f_start, f_end, configs, wts,
                            unit_weights, targets, squared, reg, min_samples_leaf, one_threshold, out,
                            thresholds):  # pragma: no cover - numba
    """`row_gain_table`'s work blocks blk0..blk1 for one regression target per position."""
    rho = u.shape[1]
    k = u.shape[2]
    for blk in range(blk0, blk1):
        p0, p1, vals = _block_pairs(blk, bounds, perm, rho, f_start, f_end)
        cum = np.empty((k + 2, 3))
        ccount = np.empty(k + 2, dtype=np.int64)
        thr = np.empty(k, dtype=np.float32)
        for pp in range(p0, p1):
            s, c, a, n = _next_pair(pp, perm, rho, F, P, n_rows, rows, u, order, f_start, f_end, vals, thr, thresholds)
            if one_threshold:
                out[s, c, 0] = _one_target_threshold_gain(vals, n, thr[0], targets, a, squared, reg, min_samples_leaf)
                continue
            cum[:] = 0.0
            ccount[:] = 0
            w_node = 0.0
            for m in range(n):
                v = vals[m]
                b = 1
                for j in range(k):
                    b += thr[j] < v
                w = 1.0 if unit_weights else wts[a + m]
                y = targets[a + m, 0]
                wy = w * y
                cum[b, 0] += w
                cum[b, 1] += wy
                cum[b, 2] += wy * y
                ccount[b] += 1
                w_node += w
            _prefix_sums(cum, ccount)
            if w_node > 0.0:
                _score_one_target(cum, ccount, w_node, configs, squared, reg, min_samples_leaf, out, s, c)


@njit(cache=True, nogil=True)
def _row_gain_blocks(blk0, blk1, bounds, perm, F, P, n_rows, rows, u, order, f_start, f_end, configs, wts, criterion,
                     labels, targets, per_position, n_blocks, q, n_stats, reg, min_samples_leaf, out,
                     thresholds):  # pragma: no cover - numba
    """`row_gain_table`'s work blocks blk0..blk1 for any criterion (the generic statistics rows)."""
    rho = u.shape[1]
    k = u.shape[2]
    for blk in range(blk0, blk1):
        p0, p1, vals = _block_pairs(blk, bounds, perm, rho, f_start, f_end)
        cum = np.empty((k + 2, n_stats))
        ccount = np.empty(k + 2, dtype=np.int64)
        work = np.empty((max(q, 1), max(q, 1)))
        total = np.empty(n_stats)
        left = np.empty(n_stats)
        right = np.empty(n_stats)
        thr = np.empty(k, dtype=np.float32)
        for pp in range(p0, p1):
            s, c, a, n = _next_pair(pp, perm, rho, F, P, n_rows, rows, u, order, f_start, f_end, vals, thr, thresholds)
            w_node = _bin_node(vals, n, thr, a, order, per_position, wts, criterion, labels, targets, n_blocks, q,
                               cum, ccount)
            if w_node > 0.0:
                _score_configs(cum, ccount, w_node, configs, criterion, n_blocks, q, reg, min_samples_leaf, work,
                               total, left, right, out, s, c)


def partition_by_row(order, wts, move_weights, pos_labels, pos_targets, f_start, f_end, F, P, row, thr_lo, thr_hi,
                     split):
    """Stable in-place partition of each split node's points by F[row[s], point]: left-going (lo < f <= hi) first.

    `order` moves, `wts` too unless they are all equal (`move_weights` False), and so do `pos_labels` /
    `pos_targets` when they are non-empty (per-position copies).
    Returns the number of left points per node.
    """
    n_nodes = f_start.shape[0]
    n_left = np.zeros(n_nodes, dtype=np.int64)
    sizes = f_end - f_start
    n_work = min(n_nodes, N_WORK_BLOCKS)
    nodes, bounds = _visit_order(row.reshape(-1, 1), sizes > POINT_ORDER_MAX, sizes, n_work, PAIR_COST)
    run_ranges(_partition_blocks, n_work, bounds, nodes, order, wts, bool(move_weights), pos_labels, pos_targets,
               f_start, f_end, F.reshape(-1), P.reshape(-1), F.shape[0], row, thr_lo, thr_hi, split, n_left,
               chunks_per_thread=CHUNKS_PER_THREAD)
    return n_left


@njit(cache=True, nogil=True)
def _partition_blocks(blk0, blk1, bounds, nodes, order, wts, move_weights, pos_labels, pos_targets, f_start, f_end,
                      F, P, n_rows, row, thr_lo, thr_hi, split, n_left):  # pragma: no cover - numba
    """`partition_by_row`'s work blocks blk0..blk1 (nodes nodes[bounds[blk]:bounds[blk + 1]] each)."""
    move_labels = pos_labels.shape[0] > 0
    move_targets = pos_targets.shape[0] > 0
    for blk in range(blk0, blk1):
        s0 = bounds[blk]
        s1 = bounds[blk + 1]
        size = 1
        for i in range(s0, s1):
            size = max(size, f_end[nodes[i]] - f_start[nodes[i]])
        go = np.empty(size, dtype=np.bool_)
        tmp_o = np.empty(size, dtype=order.dtype)
        tmp_w = np.empty(size, dtype=wts.dtype)
        tmp_l = np.empty(size if move_labels else 0, dtype=pos_labels.dtype)
        tmp_t = np.empty((size if move_targets else 0, pos_targets.shape[1]), dtype=pos_targets.dtype)
        for i in range(s0, s1):
            s = nodes[i]
            if not split[s]:
                continue
            g0 = f_start[s]
            n = f_end[s] - g0
            lo = thr_lo[s]
            hi = thr_hi[s]
            nl = 0
            src, stride, offset = _response_layout(F, P, n_rows, row[s], n)
            for m in range(n):
                v = src[np.uint64(order[g0 + m]) * stride + offset]
                go[m] = v > lo and v <= hi
                nl += go[m]
            left = 0
            right = nl
            for m in range(n):
                d = left if go[m] else right
                tmp_o[d] = order[g0 + m]
                if move_weights:
                    tmp_w[d] = wts[g0 + m]
                if move_labels:
                    tmp_l[d] = pos_labels[g0 + m]
                if move_targets:  # column by column: a row assignment would compile numba's shape-error path
                    for j in range(pos_targets.shape[1]):
                        tmp_t[d, j] = pos_targets[g0 + m, j]
                if go[m]:
                    left += 1
                else:
                    right += 1
            for m in range(n):
                order[g0 + m] = tmp_o[m]
                if move_weights:
                    wts[g0 + m] = tmp_w[m]
                if move_labels:
                    pos_labels[g0 + m] = tmp_l[m]
                if move_targets:
                    for j in range(pos_targets.shape[1]):
                        pos_targets[g0 + m, j] = tmp_t[m, j]
            n_left[s] = nl

