"""Online forests: trees that grow as points stream in (Saffari et al., "On-line random forests", 2009; Denil,
Matheson & de Freitas, "Consistency of online random forests", 2013).

Every leaf keeps the statistics of the points that reached it (class counts, or weight, sums and cross-products of
the targets) and, while it may still split, rho candidate tests drawn when the leaf was made: a random dimension
each, whose threshold is that dimension's value at one of the leaf's first arriving points (its *source*; candidate
r takes the (r mod S)-th point, S = number of sources). Each candidate counts the statistics of the points on its
left since its source arrived. Once a leaf has seen `min_points` points, its best candidate splits it if the gain
reaches `min_gain` with at least `min_samples_leaf` weight on each side; the children start from that candidate's
left and right statistics (plus the leaf's older statistics, shared out in the proportions the test saw) and
draw their own candidates. Online bagging (Oza & Russell 2001): each point counts
Poisson(1) times in each tree.

Points arrive in mini-batches: all trees route and count a batch in parallel (one thread per range of trees), then
the leaves the batch reached decide their splits. All random draws happen in Python in a fixed order, so the model
bytes depend on the seed and the order of the data, never on the thread count. The forest is exported to the
engine's flat storage after each call, so it predicts, saves and loads like any other.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from imageforest.forest.objectives import ENTROPY, GINI, SQUARED_ERROR
from imageforest.forest.storage import ForestArrays
from imageforest.forest.threads import run_ranges
from imageforest.forest.trainer import renumber_leaves_depth_first
from imageforest.forest.weak_learners import partial_shuffle
from imageforest.kernels import njit

MINI_BATCH = 64  # points routed between two split decisions: a tree can grow one level per mini-batch


@dataclass
class OnlineSettings:
    """How online trees grow.

    Attributes
    ----------
    n_trees : T
    n_candidates : rho, candidate tests per leaf
    n_sources : S, arriving points whose values set the candidates' thresholds (at most rho)
    min_points : points a leaf must see before it may split (Saffari's alpha)
    min_samples_leaf : weight each side of a split must hold
    min_gain : gain a split must reach (Saffari's beta); splits must gain something in any case
    max_depth : D, or None
    criterion : ENTROPY or GINI (class counts) or SQUARED_ERROR (regression sums)
    bagging : online bagging, Poisson(1) copies of each point per tree
    """

    n_trees: int = 100
    n_candidates: int = 1
    n_sources: int = 1
    min_points: int = 40
    min_samples_leaf: int = 1
    min_gain: float = 0.0
    max_depth: int | None = None
    criterion: int = ENTROPY
    bagging: bool = False


class OnlineGrowth:
    """The growing trees of an online forest, and everything they need to keep growing.

    Parameters
    ----------
    settings : OnlineSettings
    n_features : input dimension D
    stat_len : L, the length of a point's statistics row (classes; or 1 + q + q*q for q regression outputs)
    rng : the only source of randomness
    """

    def __init__(self, settings: OnlineSettings, n_features: int, stat_len: int, rng: np.random.Generator) -> None:
        self.settings = settings
        self.n_features = int(n_features)
        self.stat_len = int(stat_len)
        self.rng = rng
        T = settings.n_trees
        self.R = int(settings.n_candidates)
        self.S = max(1, min(int(settings.n_sources), self.R))
        self.max_depth = np.iinfo(np.int32).max if settings.max_depth is None else int(settings.max_depth)
        self.n_nodes = T
        self.n_slots = 0
        self.free_slots: list[int] = []
        self._alloc_nodes(max(4 * T, 1024))
        self._alloc_slots(max(2 * T, 256))
        self.node_tree[:T] = np.arange(T)
        slots = [self._take_slot() for _ in range(T)] if self.max_depth > 0 else [-1] * T
        self.slot[:T] = slots
        self._draw_candidates(np.array([s for s in slots if s >= 0], dtype=np.int64))

    # -- storage ------------------------------------------------------------------------------------------
    def _alloc_nodes(self, cap: int) -> None:
        old = getattr(self, "child", None)
        n = 0 if old is None else self.n_nodes
        fresh = {"dim": (np.int32, 0), "thr": (np.float32, np.inf), "child": (np.int32, -1), "depth": (np.int32, 0),
                 "slot": (np.int32, -1), "seen": (np.int64, 0), "gain": (np.float32, 0.0),
                 "node_w": (np.float64, 0.0), "node_tree": (np.int32, 0)}
        for name, (dtype, fill) in fresh.items():
            arr = np.full(cap, fill, dtype=dtype)
            if old is not None:
                arr[:n] = getattr(self, name)[:n]
            setattr(self, name, arr)
        stats = np.zeros((cap, self.stat_len))
        if old is not None:
            stats[:n] = self.stats[:n]
        self.stats = stats

    def _alloc_slots(self, cap: int) -> None:
        old = getattr(self, "cand_dim", None)
        n = 0 if old is None else self.n_slots
        arrays = {"cand_dim": np.zeros((cap, self.R), dtype=np.int32),
                  "cand_thr": np.full((cap, self.R), np.nan, dtype=np.float32),
                  "left": np.zeros((cap, self.R, self.stat_len), dtype=np.float32),
                  "since": np.zeros((cap, self.S, self.stat_len), dtype=np.float32)}
        for name, arr in arrays.items():
            if old is not None:
                arr[:n] = getattr(self, name)[:n]
            setattr(self, name, arr)

    def _take_slot(self) -> int:
        if self.free_slots:
            return self.free_slots.pop()
        if self.n_slots == self.cand_dim.shape[0]:
            self._alloc_slots(2 * self.n_slots)
        self.n_slots += 1
        return self.n_slots - 1

    def _draw_candidates(self, slots: np.ndarray) -> None:
        """Fresh candidate dimensions for `slots` (distinct while rho <= D), thresholds unset, counts zero."""
        if slots.size == 0:
            return
        D, R = self.n_features, self.R
        k = min(R, D)
        dims = partial_shuffle(self.rng.random((slots.size, k)), D)
        if k < R:
            dims = np.tile(dims, (1, -(-R // k)))[:, :R]
        self.cand_dim[slots] = dims
        self.cand_thr[slots] = np.nan
        self.left[slots] = 0.0
        self.since[slots] = 0.0

    # -- growth -------------------------------------------------------------------------------------------
    def update(self, X: np.ndarray, rows: np.ndarray) -> None:
        """Let the trees see points X (n, D) float32 with statistics rows (n, L) float64, in order."""
        s = self.settings
        for a in range(0, X.shape[0], MINI_BATCH):
            xb = np.ascontiguousarray(X[a:a + MINI_BATCH])
            rb = np.ascontiguousarray(rows[a:a + MINI_BATCH])
            if s.bagging:
                copies = self.rng.poisson(1.0, (xb.shape[0], s.n_trees)).astype(np.float64)
            else:
                copies = np.ones((xb.shape[0], s.n_trees))
            leaf_of = np.full((xb.shape[0], s.n_trees), -1, dtype=np.int64)
            run_ranges(_route_and_count_range, s.n_trees, xb, rb, copies, self.child, self.dim, self.thr,
                       self.slot, self.seen, self.stats, self.node_w, self.cand_dim, self.cand_thr, self.left,
                       self.since, self._weight_index(), leaf_of)
            reached = np.unique(leaf_of[leaf_of >= 0])
            ready = reached[(self.slot[reached] >= 0) & (self.seen[reached] >= s.min_points)]
            if ready.size:
                self._split(ready)

    def _weight_index(self) -> int:
        """Column of a statistics row holding the point's weight; -1: the row sums to the weight (class counts)."""
        return 0 if self.settings.criterion == SQUARED_ERROR else -1

    def _split(self, ready: np.ndarray) -> None:
        s = self.settings
        best = np.full(ready.size, -1, dtype=np.int64)
        gain = np.zeros(ready.size)
        run_ranges(_best_candidate_range, ready.size, ready, self.slot, self.left, self.since, s.criterion,
                   float(s.min_samples_leaf), float(s.min_gain), best, gain)
        ok = best >= 0
        parents, best, gain = ready[ok], best[ok], gain[ok]
        n = parents.size
        if n == 0:
            return
        need = self.n_nodes + 2 * n
        if need > self.child.shape[0]:
            self._alloc_nodes(max(need, 2 * self.child.shape[0]))
        kids = self.n_nodes + 2 * np.arange(n)
        parent_slot = self.slot[parents].astype(np.int64)
        grows = self.depth[parents] + 1 < self.max_depth
        left_slot = np.where(grows, parent_slot, -1)
        right_slot = np.array([self._take_slot() if g else -1 for g in grows], dtype=np.int64)
        _apply_splits(parents, best, gain, kids, left_slot, right_slot, self.child, self.dim, self.thr, self.slot,
                      self.seen, self.stats, self.node_w, self.depth, self.gain, self.node_tree, self.cand_dim,
                      self.cand_thr, self.left, self.since, self._weight_index())
        self.free_slots.extend(parent_slot[~grows].tolist())  # reusable from the next mini-batch on
        self._draw_candidates(np.r_[left_slot[grows], right_slot[grows]])
        self.n_nodes = need

    # -- export -------------------------------------------------------------------------------------------
    def export(self) -> tuple[ForestArrays, np.ndarray]:
        """The trees in the engine's flat storage, leaves numbered depth first per tree, and each leaf's
        statistics row (n_leaves, L) float64."""
        n = self.n_nodes
        is_split = self.child[:n] >= 0
        leaves = np.flatnonzero(~is_split)
        child = self.child[:n].copy()
        child[leaves] = -np.arange(leaves.size, dtype=np.int32) - 1
        forest = ForestArrays(
            params=np.where(is_split, self.dim[:n], 0).astype(np.float64)[:, None],
            thr_lo=np.full(n, -np.inf, dtype=np.float32),
            thr_hi=np.where(is_split, self.thr[:n], np.float32(np.inf)).astype(np.float32), child=child,
            depth=self.depth[:n].copy(), gain=self.gain[:n].copy(), weight=self.node_w[:n].copy(),
            tree_root=np.arange(self.settings.n_trees, dtype=np.int32), leaf_node=leaves.astype(np.int32),
            leaf_tree=self.node_tree[leaves].copy())
        forest.validate()
        renumber_leaves_depth_first(forest)
        return forest, self.stats[forest.leaf_node]


@njit(cache=True, nogil=True)
def _route_and_count_range(t0, t1, X, rows, copies, child, dim, thr, slot, seen, stats, node_w, cand_dim, cand_thr,
                           left, since, w_col, leaf_of):  # pragma: no cover - numba
    n, L = rows.shape
    R = cand_dim.shape[1]
    S = since.shape[1]
    for t in range(t0, t1):
        for i in range(n):
            c = copies[i, t]
            if c == 0.0:
                continue
            j = t
            while child[j] >= 0:
                j = child[j] + (1 if X[i, dim[j]] > thr[j] else 0)
            leaf_of[i, t] = j
            w = 0.0
            for a in range(L):
                stats[j, a] += c * rows[i, a]
                w += rows[i, a]
            node_w[j] += c * (rows[i, w_col] if w_col >= 0 else w)
            s = slot[j]
            if s >= 0:
                k = seen[j]
                if k < S:
                    for r in range(k, R, S):
                        cand_thr[s, r] = X[i, cand_dim[s, r]]
                top = min(k, S - 1)
                for src in range(top + 1):
                    for a in range(L):
                        since[s, src, a] += c * rows[i, a]
                for r in range(R):
                    if r % S <= top and X[i, cand_dim[s, r]] <= cand_thr[s, r]:
                        for a in range(L):
                            left[s, r, a] += c * rows[i, a]
            seen[j] += 1


@njit(cache=True, nogil=True)
def _impurity(row, criterion):  # pragma: no cover - numba
    """(weight, impurity) of a statistics row: entropy or Gini of class counts, or the variance (trace) of
    regression sums laid out as [w, w*y (q), w*y*y^T (q*q)]."""
    L = row.shape[0]
    if criterion == SQUARED_ERROR:
        w = float(row[0])
        if w <= 0.0:
            return 0.0, 0.0
        q = int(np.sqrt(L - 1 + 0.25) - 0.5 + 1e-9)  # L = 1 + q + q*q
        var = 0.0
        for a in range(q):
            m = row[1 + a] / w
            var += row[1 + q + a * q + a] / w - m * m
        return w, max(var, 0.0)
    w = 0.0
    for a in range(L):
        w += row[a]
    if w <= 0.0:
        return 0.0, 0.0
    acc = 0.0
    for a in range(L):
        p = row[a] / w
        if p > 0.0:
            acc += p * p if criterion == GINI else -p * np.log(p)
    return w, (1.0 - acc) if criterion == GINI else acc


@njit(cache=True, nogil=True)
def _best_candidate_range(k0, k1, ready, slot, left, since, criterion, min_leaf, min_gain, best,
                          gain):  # pragma: no cover - numba
    R = left.shape[1]
    S = since.shape[1]
    L = left.shape[2]
    right = np.empty(L)
    lrow = np.empty(L)
    prow = np.empty(L)
    for k in range(k0, k1):
        s = slot[ready[k]]
        top = -np.inf
        for r in range(R):
            src = r % S
            for a in range(L):
                prow[a] = since[s, src, a]
                lrow[a] = left[s, r, a]
                right[a] = prow[a] - lrow[a]
            w, h = _impurity(prow, criterion)
            wl, hl = _impurity(lrow, criterion)
            wr, hr = _impurity(right, criterion)
            if w <= 0.0 or wl < min_leaf or wr < min_leaf:
                continue
            g = h - (wl / w) * hl - (wr / w) * hr
            if g > top:
                top = g
                best[k] = r
        if best[k] >= 0 and (top <= 1e-12 or top < min_gain):
            best[k] = -1
        gain[k] = max(top, 0.0)


@njit(cache=True)
def _apply_splits(parents, best, gain, kids, left_slot, right_slot, child, dim, thr, slot, seen, stats, node_w,
                  depth, node_gain, node_tree, cand_dim, cand_thr, left, since, w_col):  # pragma: no cover - numba
    L = stats.shape[1]
    S = since.shape[1]
    for k in range(parents.shape[0]):
        p = parents[k]
        s = slot[p]
        r = best[k]
        lc = kids[k]
        rc = lc + 1
        dim[p] = cand_dim[s, r]
        thr[p] = cand_thr[s, r]
        child[p] = lc
        node_gain[p] = gain[k]
        for c in (lc, rc):
            child[c] = -1
            depth[c] = depth[p] + 1
            seen[c] = 0
            node_tree[c] = node_tree[p]
        # The test saw only the points since its source arrived; the leaf's other statistics (inherited from its
        # parent, or older than the source) are shared out in the proportions the test saw (per class for
        # counts, by weight for regression sums), so that no point is lost from the tree's leaves.
        src = r % S
        w_seen = 0.0
        w_left = 0.0
        for a in range(L):
            if w_col < 0 or a == w_col:
                w_seen += since[s, src, a]
                w_left += left[s, r, a]
        share = w_left / w_seen if w_seen > 0.0 else 0.5
        wl = 0.0
        wr = 0.0
        for a in range(L):
            lv = float(left[s, r, a])
            tv = float(since[s, src, a])
            rv = tv - lv
            if w_col < 0:
                rv = max(rv, 0.0)
                frac = lv / tv if tv > 0.0 else share
            else:
                frac = share
            rest = stats[p, a] - tv
            stats[lc, a] = lv + frac * rest
            stats[rc, a] = rv + (1.0 - frac) * rest
            wl += stats[lc, a]
            wr += stats[rc, a]
        node_w[lc] = stats[lc, w_col] if w_col >= 0 else wl
        node_w[rc] = stats[rc, w_col] if w_col >= 0 else wr
        slot[p] = -1
        slot[lc] = left_slot[k]
        slot[rc] = right_slot[k]
