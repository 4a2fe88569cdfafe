"""Consistent regression trees: Denil, Matheson & de Freitas, "Narrowing the Gap: Random Forests In Theory and In
Practice" (ICML 2014), and the two theoretical forests it compares with, Biau, Devroye & Lugosi (2008) and Biau
(2012).

Each tree sees the training points in two roles. *Structure* points choose the split dimensions and split points;
*estimation* points only travel down the finished tree and fit the leaf models. The partition is drawn per tree
("tree"), once for the whole forest ("forest") or not at all (None: every point plays both roles). The three ways of
splitting a leaf:

- ``denil``: min(1 + Poisson(lambda), D) distinct candidate dimensions; in each, split points are searched between
  consecutive structure points, but only inside the range spanned by m structure points drawn from the leaf (which
  keeps trees roughly balanced); the squared-error reduction on the structure points picks the split, and no child
  may keep fewer than k_n estimation points. Leaves are expanded depth first; a leaf that has no valid split stays.
- ``biau12``: breadth first until the tree has its target number of leaves; each leaf draws a fixed number of
  candidate dimensions (with replacement), each cut at the midpoint of the leaf's cell; the squared-error
  reduction on the structure points picks among them.
- ``biau08``: a leaf picked uniformly at random, a dimension uniformly at random, and a split after the I smallest
  of the leaf's N structure points with I uniform in {0, ..., N}; until the target number of leaves.

A leaf without estimation points (possible for the Biau forests, whose cuts ignore where the data are) predicts from
its nearest ancestor that has some. The trees are written in the engine's flat storage with axis-aligned tests, so
prediction, leaf models, importances and model files are the same as for every other forest.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from imageforest.forest.random_streams import _below, _uniform
from imageforest.forest.storage import ForestArrays
from imageforest.forest.threads import run_ranges
from imageforest.forest.trainer import GrownForest, _leaves_in_tree_order
from imageforest.kernels import njit

VARIANTS = ("denil", "biau08", "biau12")
DATA_SPLITS = ("tree", "forest", None)
_MODE = {"denil": 0, "biau12": 1, "biau08": 2}
_DEPTH_FIRST, _BREADTH_FIRST, _AT_RANDOM = 0, 1, 2


@dataclass
class ConsistentSettings:
    """How the trees of a consistent forest grow.

    Attributes
    ----------
    variant : "denil", "biau08" or "biau12"
    data_split : "tree", "forest" or None (see the module docstring)
    n_trees : T
    n_candidates : denil: mean number of candidate dimensions (1 + Poisson(n_candidates - 1), at most D);
        biau12: candidate dimensions drawn with replacement; unused by biau08
    range_points : m, the structure points that bound each candidate dimension's search (denil)
    min_samples_leaf : k_n, the fewest estimation points a child of a split may keep (denil); the Biau forests aim
        at n_points / min_samples_leaf leaves, the size the paper gives them
    max_depth : D, or None
    """

    variant: str = "denil"
    data_split: str | None = "tree"
    n_trees: int = 100
    n_candidates: int = 1
    range_points: int = 1000
    min_samples_leaf: int = 5
    max_depth: int | None = None


def grow_consistent(Xt: np.ndarray, Y: np.ndarray, sample_weight: np.ndarray, settings: ConsistentSettings,
                    rng: np.random.Generator) -> GrownForest:
    """Grow a consistent regression forest.

    Parameters
    ----------
    Xt : (n_features, n_points) float32, feature-major inputs
    Y : (n_points, n_outputs) float64 targets (the squared error sums over outputs)
    sample_weight : (n_points,) float64; points of weight 0 take no part
    settings : ConsistentSettings
    rng : the only source of randomness (the model bytes depend on it alone, not on the thread count)

    Returns
    -------
    GrownForest
        Axis-aligned trees (parameter row: the dimension) and, per leaf, its estimation points.
    """
    if settings.variant not in _MODE:
        raise ValueError(f"variant must be one of {VARIANTS}, got {settings.variant!r}")
    if settings.data_split not in DATA_SPLITS:
        raise ValueError(f"data_split must be 'tree', 'forest' or None, got {settings.data_split!r}")
    D, n = Xt.shape
    T = int(settings.n_trees)
    k = int(settings.min_samples_leaf)
    live = np.flatnonzero(sample_weight > 0).astype(np.int32)
    if settings.data_split == "tree":
        roles = rng.random((T, live.size)) < 0.5
    elif settings.data_split == "forest":
        roles = np.broadcast_to(rng.random(live.size) < 0.5, (T, live.size))
    else:
        roles = None
    seeds = rng.integers(1, np.iinfo(np.int64).max, size=T, dtype=np.int64)

    if roles is None:
        struct = np.tile(live, T)
        est = struct.copy()
        s_bounds = e_bounds = np.arange(T + 1, dtype=np.int64) * live.size
    else:
        struct = np.concatenate([live[r] for r in roles])  # once per tree at start-up
        est = np.concatenate([live[~r] for r in roles])
        s_bounds = np.r_[0, np.cumsum(roles.sum(axis=1))].astype(np.int64)
        e_bounds = np.r_[0, np.cumsum((~roles).sum(axis=1))].astype(np.int64)

    mode = _MODE[settings.variant]
    if mode == 0:
        max_leaves = np.maximum(np.diff(e_bounds) // k, 1)
    else:
        max_leaves = np.full(T, max(1, live.size // k), dtype=np.int64)
    caps = 2 * max_leaves + 1
    node_off = np.r_[0, np.cumsum(caps)].astype(np.int64)
    total = int(node_off[-1])
    dim = np.zeros(total, dtype=np.int32)
    thr = np.full(total, np.inf, dtype=np.float32)
    child = np.full(total, -1, dtype=np.int32)
    parent = np.full(total, -1, dtype=np.int32)
    depth = np.zeros(total, dtype=np.int32)
    gain = np.zeros(total, dtype=np.float32)
    weight = np.zeros(total, dtype=np.float64)
    e_lo = np.zeros(total, dtype=np.int64)
    e_hi = np.zeros(total, dtype=np.int64)
    n_nodes = np.zeros(T, dtype=np.int64)
    cell_lo = Xt.min(axis=1).astype(np.float32) if n else np.zeros(D, np.float32)
    cell_hi = Xt.max(axis=1).astype(np.float32) if n else np.zeros(D, np.float32)
    order_by = {0: _DEPTH_FIRST, 1: _BREADTH_FIRST, 2: _AT_RANDOM}[mode]
    target = -1 if mode == 0 else int(max_leaves[0])
    max_depth = np.iinfo(np.int32).max if settings.max_depth is None else int(settings.max_depth)
    lam = max(float(settings.n_candidates) - 1.0, 0.0)
    run_ranges(_grow_trees_range, T, Xt, np.ascontiguousarray(Y, dtype=np.float64),
               np.ascontiguousarray(sample_weight, dtype=np.float64), struct, s_bounds, est, e_bounds, mode, order_by,
               lam, int(settings.n_candidates), int(settings.range_points), k, max_depth, target, seeds, cell_lo,
               cell_hi, node_off, dim, thr, child, parent, depth, gain, weight, e_lo, e_hi, n_nodes)
    return _assemble(node_off, n_nodes, dim, thr, child, depth, gain, weight, e_lo, e_hi, est, sample_weight)


def _assemble(node_off, n_nodes, dim, thr, child, depth, gain, weight, e_lo, e_hi, est, sample_weight) -> GrownForest:
    """The per-tree node buffers as one `ForestArrays` (trees one after another) and its leaves' point ranges."""
    T = n_nodes.size
    keep = np.concatenate([np.arange(node_off[t], node_off[t] + n_nodes[t]) for t in range(T)])
    tree_of = np.repeat(np.arange(T, dtype=np.int32), n_nodes)
    new_root = np.r_[0, np.cumsum(n_nodes)[:-1]].astype(np.int64)
    kid = child[keep].astype(np.int64)
    is_split = kid >= 0
    leaf_pos = np.flatnonzero(~is_split)
    new_child = np.where(is_split, kid + new_root[tree_of], 0)  # local child ids, shifted by the tree's offset
    new_child[leaf_pos] = -np.arange(leaf_pos.size) - 1
    params = np.zeros((keep.size, 1))
    params[is_split, 0] = dim[keep][is_split]
    forest = ForestArrays(
        params=params, thr_lo=np.full(keep.size, -np.inf, dtype=np.float32),
        thr_hi=np.where(is_split, thr[keep], np.float32(np.inf)).astype(np.float32),
        child=new_child.astype(np.int32), depth=depth[keep].copy(), gain=np.where(is_split, gain[keep], 0.0
                                                                                 ).astype(np.float32),
        weight=weight[keep].copy(), tree_root=new_root.astype(np.int32), leaf_node=leaf_pos.astype(np.int32),
        leaf_tree=tree_of[leaf_pos])
    forest.validate()
    leaves = keep[leaf_pos]
    return _leaves_in_tree_order(GrownForest(forest, est, np.asarray(sample_weight, np.float64)[est],
                                             e_lo[leaves].copy(), e_hi[leaves].copy()))


@njit(cache=True, nogil=True)
def _poisson(state, lam):  # pragma: no cover - numba
    """Poisson(lam) by Knuth's product of uniforms, in pieces of mean at most 30 (exp(-lam) stays representable)."""
    total = 0
    while lam > 0.0:
        part = min(lam, 30.0)
        lam -= part
        limit = np.exp(-part)
        p = _uniform(state)
        while p > limit:
            total += 1
            p *= _uniform(state)
    return total


@njit(cache=True, nogil=True)
def _threshold_between(a, b):  # pragma: no cover - numba
    """A float32 threshold t with a <= t < b (go left when x <= t): their midpoint, or a when rounding reaches b."""
    t = np.float32((np.float64(a) + np.float64(b)) * 0.5)
    if t >= b:
        t = a
    return t


@njit(cache=True, nogil=True)
def _sse(sw, swy, swyy, q):  # pragma: no cover - numba
    """Weighted sum of squared deviations from the mean, summed over q outputs."""
    if sw <= 0.0:
        return 0.0
    acc = 0.0
    for a in range(q):
        acc += swyy[a] - swy[a] * swy[a] / sw
    return acc


@njit(cache=True, nogil=True)
def _add_point(Y, w, i, swy, swyy):  # pragma: no cover - numba
    """Add point i's weighted targets and squares to the running sums; returns its weight."""
    wi = w[i]
    for a in range(Y.shape[1]):
        v = Y[i, a]
        swy[a] += wi * v
        swyy[a] += wi * v * v
    return wi


@njit(cache=True, nogil=True)
def _node_sums(Y, w, idx, lo, hi, swy, swyy):  # pragma: no cover - numba
    """Weight, and per-output weighted sums of targets and squares, of the points idx[lo:hi]."""
    swy[:] = 0.0
    swyy[:] = 0.0
    sw = 0.0
    for p in range(lo, hi):
        sw += _add_point(Y, w, idx[p], swy, swyy)
    return sw


@njit(cache=True, nogil=True)
def _partition(Xt, d, t, idx, lo, hi):  # pragma: no cover - numba
    """Stable in-place partition of idx[lo:hi] by Xt[d, i] <= t; returns the count going left."""
    n = hi - lo
    tmp = np.empty(n, dtype=idx.dtype)
    left = 0
    for p in range(lo, hi):
        if Xt[d, idx[p]] <= t:
            tmp[left] = idx[p]
            left += 1
    right = left
    for p in range(lo, hi):
        if Xt[d, idx[p]] > t:
            tmp[right] = idx[p]
            right += 1
    for p in range(n):
        idx[lo + p] = tmp[p]
    return left


@njit(cache=True, nogil=True)
def _split_denil(Xt, Y, w, struct, s_lo, s_hi, est, e_lo, e_hi, lam, m, k, state, dims, pick):  # pragma: no cover
    """Denil et al.'s split of one leaf: (dimension, threshold, squared-error reduction), dimension -1 if none."""
    D = Xt.shape[0]
    q = Y.shape[1]
    ns = s_hi - s_lo
    ne = e_hi - e_lo
    if ns < 2 or ne < 2 * k:
        return -1, np.float32(0.0), 0.0
    n_dims = min(1 + _poisson(state, lam), D)
    for j in range(D):
        dims[j] = j
    for j in range(n_dims):  # partial Fisher-Yates: the first n_dims entries are distinct random dimensions
        r = j + _below(state, D - j)
        dims[j], dims[r] = dims[r], dims[j]
    n_pick = min(m, ns)
    for j in range(ns):
        pick[j] = s_lo + j
    for j in range(n_pick):
        r = j + _below(state, ns - j)
        pick[j], pick[r] = pick[r], pick[j]
    swy = np.empty(q)
    swyy = np.empty(q)
    sw = _node_sums(Y, w, struct, s_lo, s_hi, swy, swyy)
    parent_sse = _sse(sw, swy, swyy, q)
    lwy = np.empty(q)
    lwyy = np.empty(q)
    rwy = np.empty(q)
    rwyy = np.empty(q)
    vals = np.empty(ns, dtype=np.float32)
    evals = np.empty(ne, dtype=np.float32)
    best_dim = -1
    best_thr = np.float32(0.0)
    best_gain = -np.inf
    for c in range(n_dims):
        d = dims[c]
        a = np.float32(np.inf)
        b = np.float32(-np.inf)
        for j in range(n_pick):
            v = Xt[d, struct[pick[j]]]
            a = min(a, v)
            b = max(b, v)
        if not a < b:
            continue
        for p in range(ns):
            vals[p] = Xt[d, struct[s_lo + p]]
        srt = np.argsort(vals, kind="mergesort")
        for p in range(ne):
            evals[p] = Xt[d, est[e_lo + p]]
        evals.sort()
        lw = 0.0
        lwy[:] = 0.0
        lwyy[:] = 0.0
        je = 0
        for r in range(ns - 1):
            lw += _add_point(Y, w, struct[s_lo + srt[r]], lwy, lwyy)
            v0 = vals[srt[r]]
            v1 = vals[srt[r + 1]]
            if v0 == v1 or v0 < a or v1 > b:
                continue
            t = _threshold_between(v0, v1)
            while je < ne and evals[je] <= t:
                je += 1
            if je < k or ne - je < k:
                continue
            for a_ in range(q):
                rwy[a_] = swy[a_] - lwy[a_]
                rwyy[a_] = swyy[a_] - lwyy[a_]
            g = parent_sse - _sse(lw, lwy, lwyy, q) - _sse(sw - lw, rwy, rwyy, q)
            if g > best_gain:
                best_gain = g
                best_dim = d
                best_thr = t
    if best_dim < 0:
        return -1, np.float32(0.0), 0.0
    return best_dim, best_thr, max(best_gain, 0.0)


@njit(cache=True, nogil=True)
def _cell(node, d, dim, thr, child, parent, lo0, hi0):  # pragma: no cover - numba
    """The [lo, hi] extent of a node's cell along dimension d, from the tests on its path to the root."""
    lo = lo0
    hi = hi0
    j = node
    while parent[j] >= 0:
        p = parent[j]
        if dim[p] == d:
            if child[p] == j:
                hi = min(hi, thr[p])
            else:
                lo = max(lo, thr[p])
        j = p
    return lo, hi


@njit(cache=True, nogil=True)
def _split_biau12(Xt, Y, w, struct, s_lo, s_hi, n_cand, state, node, base, dim, thr, child, parent, cell_lo,
                  cell_hi):  # pragma: no cover - numba
    """Biau's (2012) split: candidate dimensions with replacement, each cut at its cell's midpoint; the best
    squared-error reduction on the structure points wins (ties to the first drawn)."""
    D = Xt.shape[0]
    q = Y.shape[1]
    swy = np.empty(q)
    swyy = np.empty(q)
    lwy = np.empty(q)
    lwyy = np.empty(q)
    sw = _node_sums(Y, w, struct, s_lo, s_hi, swy, swyy)
    parent_sse = _sse(sw, swy, swyy, q)
    best_dim = -1
    best_thr = np.float32(0.0)
    best_gain = -np.inf
    for _ in range(n_cand):
        d = _below(state, D)
        lo, hi = _cell(node - base, d, dim[base:], thr[base:], child[base:], parent[base:], cell_lo[d], cell_hi[d])
        t = np.float32((np.float64(lo) + np.float64(hi)) * 0.5)
        lw = 0.0
        lwy[:] = 0.0
        lwyy[:] = 0.0
        for p in range(s_lo, s_hi):
            if Xt[d, struct[p]] <= t:
                lw += _add_point(Y, w, struct[p], lwy, lwyy)
        g = parent_sse - _sse(lw, lwy, lwyy, q) - _sse(sw - lw, swy - lwy, swyy - lwyy, q)
        if g > best_gain:
            best_gain = g
            best_dim = d
            best_thr = t
    return best_dim, best_thr, max(best_gain, 0.0)


@njit(cache=True, nogil=True)
def _split_biau08(Xt, struct, s_lo, s_hi, state):  # pragma: no cover - numba
    """Biau et al.'s (2008) split: a random dimension, and a cut after the I smallest of the N structure points,
    I uniform in {0, ..., N} (I = 0 or N leaves one child empty)."""
    D = Xt.shape[0]
    ns = s_hi - s_lo
    d = _below(state, D)
    vals = np.empty(ns, dtype=np.float32)
    for p in range(ns):
        vals[p] = Xt[d, struct[s_lo + p]]
    vals.sort()
    i = _below(state, ns + 1)
    if i == 0:
        t = np.nextafter(vals[0], np.float32(-np.inf))
    elif i == ns:
        t = vals[ns - 1]
    else:
        t = _threshold_between(vals[i - 1], vals[i]) if vals[i - 1] < vals[i] else vals[i - 1]
    return d, t


@njit(cache=True, nogil=True)
def _grow_trees_range(t0, t1, Xt, Y, w, struct, s_bounds, est, e_bounds, mode, order_by, lam, n_cand, m, k,
                      max_depth, target, seeds, cell_lo, cell_hi, node_off, dim, thr, child, parent, depth, gain,
                      weight, e_lo, e_hi, n_nodes):  # pragma: no cover - numba
    D = Xt.shape[0]
    q = Y.shape[1]
    swy = np.empty(q)
    swyy = np.empty(q)
    dims = np.empty(D, dtype=np.int64)
    state = np.zeros(1, dtype=np.uint64)
    for t in range(t0, t1):
        state[0] = np.uint64(seeds[t])
        base = node_off[t]
        cap = node_off[t + 1] - base
        ns_tree = s_bounds[t + 1] - s_bounds[t]
        pick = np.empty(max(ns_tree, 1), dtype=np.int64)
        s_lo = np.empty(cap, dtype=np.int64)
        s_hi = np.empty(cap, dtype=np.int64)
        open_ids = np.empty(cap, dtype=np.int64)
        s_lo[0] = s_bounds[t]
        s_hi[0] = s_bounds[t + 1]
        e_lo[base] = e_bounds[t]
        e_hi[base] = e_bounds[t + 1]
        depth[base] = 0
        parent[base] = -1
        used = 1
        head = 0
        tail = 1
        open_ids[0] = 0
        n_closed = 0
        while tail > head:
            if target > 0 and n_closed + (tail - head) >= target:
                break
            if order_by == _DEPTH_FIRST:
                tail -= 1
                j = open_ids[tail]
            elif order_by == _BREADTH_FIRST:
                j = open_ids[head]
                head += 1
            else:
                r = head + _below(state, tail - head)
                j = open_ids[r]
                tail -= 1
                open_ids[r] = open_ids[tail]
            g = base + j
            weight[g] = _node_sums(Y, w, struct, s_lo[j], s_hi[j], swy, swyy)
            ns = s_hi[j] - s_lo[j]
            d = -1
            tv = np.float32(0.0)
            gn = 0.0
            if depth[g] < max_depth and used + 2 <= cap:
                if mode == 0:
                    d, tv, gn = _split_denil(Xt, Y, w, struct, s_lo[j], s_hi[j], est, e_lo[g], e_hi[g], lam, m, k,
                                             state, dims, pick)
                elif mode == 1:
                    d, tv, gn = _split_biau12(Xt, Y, w, struct, s_lo[j], s_hi[j], n_cand, state, g, base, dim,
                                              thr, child, parent, cell_lo, cell_hi)
                elif ns >= 1:
                    d, tv = _split_biau08(Xt, struct, s_lo[j], s_hi[j], state)
            if d < 0:
                n_closed += 1
                continue
            dim[g] = d
            thr[g] = tv
            gain[g] = gn / weight[g] if weight[g] > 0 else 0.0
            child[g] = used
            n_left_s = _partition(Xt, d, tv, struct, s_lo[j], s_hi[j])
            n_left_e = _partition(Xt, d, tv, est, e_lo[g], e_hi[g])
            for side in range(2):
                c = used + side
                gc = base + c
                parent[gc] = j
                depth[gc] = depth[g] + 1
                child[gc] = -1
                if side == 0:
                    s_lo[c], s_hi[c] = s_lo[j], s_lo[j] + n_left_s
                    e_lo[gc], e_hi[gc] = e_lo[g], e_lo[g] + n_left_e
                else:
                    s_lo[c], s_hi[c] = s_lo[j] + n_left_s, s_hi[j]
                    e_lo[gc], e_hi[gc] = e_lo[g] + n_left_e, e_hi[g]
                open_ids[tail] = c
                tail += 1
            used += 2
        # Leaves left open when the target was reached: their weight still has to be recorded.
        for r in range(head, tail):
            j = open_ids[r]
            weight[base + j] = _node_sums(Y, w, struct, s_lo[j], s_hi[j], swy, swyy)
        # A leaf without estimation points predicts from its nearest ancestor that has some.
        for j in range(used):
            g = base + j
            if child[g] < 0 and e_hi[g] == e_lo[g]:
                a = parent[g]
                while a >= 0 and e_hi[base + a] == e_lo[base + a]:
                    a = parent[base + a]
                if a >= 0:
                    e_lo[g] = e_lo[base + a]
                    e_hi[g] = e_hi[base + a]
        n_nodes[t] = used
