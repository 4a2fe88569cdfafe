"""Online forests: trees that grow as points stream in (Saffari et al., "On-line random forests", 2009; Denil,
Matheson & de Freitas, "Consistency of online random forests", 2013).

Every leaf keeps the statistics of the points that reached it (class counts, or weight, sums and cross-products of
the targets). Once a leaf has seen `min_points` points it splits on its best test if the gain reaches `min_gain`
with at least `min_samples_leaf` weight on each side. Where that test comes from depends on `memory`:

- Without memory (Saffari et al.), a leaf that may still split holds rho candidate tests drawn when it was made:
  a random dimension each, whose threshold is that dimension's value at one of the leaf's first arriving points
  (its *source*; candidate r takes the (r mod S)-th point, S = number of sources). Each candidate counts the
  statistics of the points on its left since its source arrived. The children start from the chosen candidate's
  left and right statistics (plus the leaf's older statistics, shared out in the proportions the test saw) and
  draw their own candidates. A deep leaf's test is then decided by the few points that arrive after it is made.
- With memory, a leaf keeps its first `memory` points (stored once for all trees in a `PointStore`) and chooses
  its test from them as a batch tree would: rho distinct dimensions, K uniform thresholds each, drawn from the
  leaf's own generator (seeded by the forest and the node). The kept points are handed on to the children, which
  may split at once. When the forest is exported, each leaf holding kept points is completed by a small batch
  tree grown on them (the growing trees are left as they are), so the leaves the user predicts with are as
  fine as a batch tree's. Memory is one copy of each kept point, (D + L) float32, plus 8 bytes per leaf and kept
  point; a leaf that fills up forgets nothing it counted but keeps no more points.

Online bagging (Oza & Russell 2001): each point counts Poisson(1) times in each tree.

Points arrive in mini-batches: all trees route and count a batch in parallel (one thread per range of trees), then
the leaves the batch reached decide their splits. Random draws happen in Python in a fixed order, or from a
node's own generator, so the model bytes depend on the seed and the order of the data, never on the thread count.
`export` gives the trees in the engine's flat storage (the estimators call it when the forest is first read after
an update), so an online forest predicts, saves and loads like any other.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from imageforest.forest.objectives import ENTROPY, GINI, SQUARED_ERROR
from imageforest.forest.random_streams import _below, _uniform
from imageforest.forest.split_search import _sort_small
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
    memory : points a leaf that may still split keeps, handed on to its children when it splits (0: none)
    n_thresholds : K, uniform thresholds per candidate dimension when a test is chosen from kept points
        (0: every value)
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
    memory: int = 0
    n_thresholds: int = 16


class PointStore:
    """The points that leaves keep, each stored once for all trees: inputs (cap, D) float32, statistics rows
    (cap, L) float32 and how many leaves hold each. A point no leaf holds is forgotten, its row reused."""

    def __init__(self, n_features: int, stat_len: int) -> None:
        self.x = np.zeros((256, n_features), dtype=np.float32)
        self.row = np.zeros((256, stat_len), dtype=np.float32)
        self.refs = np.zeros(256, dtype=np.int32)
        self.free = np.empty(0, dtype=np.int32)
        self.n_used = 0

    @property
    def n_held(self) -> int:
        """Points held by at least one leaf."""
        return self.n_used - self.free.size

    def add(self, x: np.ndarray, row: np.ndarray) -> np.ndarray:
        """Store points x (n, D) with rows (n, L), held by no leaf yet; returns their ids (n,) int32."""
        n = x.shape[0]
        reuse = min(n, self.free.size)
        ids = np.empty(n, dtype=np.int32)
        ids[:reuse] = self.free[self.free.size - reuse:]
        self.free = self.free[:self.free.size - reuse]
        fresh = n - reuse
        if self.n_used + fresh > self.refs.size:
            cap = max(2 * self.refs.size, self.n_used + fresh)
            for name in ("x", "row", "refs"):
                old = getattr(self, name)
                grown = np.zeros((cap, *old.shape[1:]), dtype=old.dtype)
                grown[:self.n_used] = old[:self.n_used]
                setattr(self, name, grown)
        ids[reuse:] = np.arange(self.n_used, self.n_used + fresh, dtype=np.int32)
        self.n_used += fresh
        self.x[ids] = x
        self.row[ids] = row
        self.refs[ids] = 0
        return ids

    def hold(self, ids: np.ndarray, counts: np.ndarray) -> None:
        """Points `ids` (distinct) are now held by `counts` more leaves; those held by none are forgotten."""
        self.refs[ids] += counts
        self._forget(ids[self.refs[ids] == 0])

    def release(self, kept: np.ndarray, n_kept: np.ndarray) -> None:
        """Leaves let go of their kept points: row k of `kept` (k, M) lists n_kept[k] point ids."""
        ids = kept[np.arange(kept.shape[1]) < n_kept[:, None]]
        if ids.size == 0:
            return
        np.subtract.at(self.refs, ids, 1)
        ids = np.unique(ids)
        self._forget(ids[self.refs[ids] == 0])

    def _forget(self, ids: np.ndarray) -> None:
        if ids.size:
            self.free = np.concatenate([self.free, ids.astype(np.int32)])


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
        self.M = max(0, int(settings.memory))
        self.rho = int(settings.n_candidates)
        # Leaves with memory choose their tests from kept points and count nothing: one candidate row, written
        # when the test is chosen, carries it to `_apply_splits`.
        self.R = 1 if self.M else self.rho
        self.S = max(1, min(int(settings.n_sources), self.R))
        self.n_thr = int(settings.n_thresholds)
        # Seed of every leaf's own generator (its test chosen from kept points, its completion subtree): drawn
        # once, so that these draws depend on the seed and the node, not on the threads or how often the forest
        # is read.
        self.leaf_seed = int(rng.integers(1 << 62)) if self.M > 0 else 0
        self.store = PointStore(self.n_features, self.stat_len)
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
                  "since": np.zeros((cap, self.S, self.stat_len), dtype=np.float32),
                  "kept": np.zeros((cap, self.M), dtype=np.int32),
                  "kept_c": np.zeros((cap, self.M), dtype=np.float32),
                  "n_kept": np.zeros(cap, dtype=np.int32)}
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
        """Fresh candidate dimensions for `slots` (distinct while rho <= D), thresholds unset, counts zero. With
        memory a leaf's candidates are drawn from its own generator when it chooses its test."""
        if slots.size == 0:
            return
        self.n_kept[slots] = 0
        if self.M:
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
            ids = self.store.add(xb, rb) if self.M else np.zeros(xb.shape[0], dtype=np.int32)
            held = np.zeros((xb.shape[0], s.n_trees), dtype=np.uint8)
            run_ranges(_route_and_count_range, s.n_trees, xb, rb, copies, self.child, self.dim, self.thr,
                       self.slot, self.seen, self.stats, self.node_w, self.cand_dim, self.cand_thr, self.left,
                       self.since, ids, self.kept, self.kept_c, self.n_kept, self.M == 0, self._weight_index(),
                       leaf_of, held)
            if self.M:
                self.store.hold(ids, held.sum(axis=1, dtype=np.int32))
            ready = np.unique(leaf_of[leaf_of >= 0])
            # Replayed points may make new leaves ready at once: split until none is.
            while ready.size:
                ready = ready[(self.slot[ready] >= 0) & (self.seen[ready] >= s.min_points)]
                ready = self._split(ready) if ready.size else ready

    def _weight_index(self) -> int:
        """Column of a statistics row holding the point's weight; -1: the row sums to the weight (class counts)."""
        return 0 if self.settings.criterion == SQUARED_ERROR else -1

    def _split(self, ready: np.ndarray) -> np.ndarray:
        """Split the leaves `ready` whose best candidate gains enough; returns the new leaves that replayed kept
        points (which may be ready in turn)."""
        s = self.settings
        best = np.full(ready.size, -1, dtype=np.int64)
        gain = np.zeros(ready.size)
        if self.M:
            # The test is chosen from the kept points as a batch tree would choose it.
            run_ranges(_best_kept_range, ready.size, ready, self.slot, self.store.x, self.store.row, self.kept,
                       self.kept_c, self.n_kept, min(self.rho, self.n_features), self.n_thr, s.criterion,
                       float(s.min_samples_leaf), float(s.min_gain), self.leaf_seed, self.cand_dim,
                       self.cand_thr, self.left, self.since, best, gain)
        else:
            run_ranges(_best_candidate_range, ready.size, ready, self.slot, self.left, self.since, s.criterion,
                       float(s.min_samples_leaf), float(s.min_gain), best, gain)
        ok = best >= 0
        parents, best, gain = ready[ok], best[ok], gain[ok]
        n = parents.size
        if n == 0:
            return parents
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
        n_parent_kept = self.n_kept[parent_slot].copy()
        if self.M:
            # Children at the depth limit keep nothing: their parents' kept points go.
            self.store.release(self.kept[parent_slot[~grows]], n_parent_kept[~grows])
        self._draw_candidates(np.r_[left_slot[grows], right_slot[grows]])
        self.n_nodes = need
        if self.M == 0:
            return parents[:0]
        replay = grows & (n_parent_kept > 0)
        _replay_kept(parents[replay], parent_slot[replay], n_parent_kept[replay], self.child, self.dim, self.thr,
                     self.slot, self.seen, self.store.x, self.kept, self.kept_c, self.n_kept)
        return np.r_[kids[replay], kids[replay] + 1]

    # -- export -------------------------------------------------------------------------------------------
    def export(self) -> tuple[ForestArrays, np.ndarray]:
        """The trees in the engine's flat storage, leaves numbered depth first per tree, and each leaf's
        statistics row (n_leaves, L) float64. With memory, every leaf holding kept points is completed by a small
        batch tree grown on them (the growing trees themselves are left as they are)."""
        n = self.n_nodes
        nodes = {"dim": self.dim[:n], "thr": self.thr[:n], "child": self.child[:n], "depth": self.depth[:n],
                 "gain": self.gain[:n], "node_w": self.node_w[:n], "node_tree": self.node_tree[:n],
                 "stats": self.stats[:n]}
        if self.M > 0:
            nodes = self._completed(nodes)
        child = nodes["child"].copy()
        is_split = child >= 0
        leaves = np.flatnonzero(~is_split)
        child[leaves] = -np.arange(leaves.size, dtype=np.int32) - 1
        forest = ForestArrays(
            params=np.where(is_split, nodes["dim"], 0).astype(np.float64)[:, None],
            thr_lo=np.full(child.size, -np.inf, dtype=np.float32),
            thr_hi=np.where(is_split, nodes["thr"], np.float32(np.inf)).astype(np.float32), child=child,
            depth=nodes["depth"].astype(np.int32), gain=nodes["gain"].astype(np.float32),
            weight=nodes["node_w"].astype(np.float64), tree_root=np.arange(self.settings.n_trees, dtype=np.int32),
            leaf_node=leaves.astype(np.int32), leaf_tree=nodes["node_tree"][leaves].astype(np.int32))
        forest.validate()
        renumber_leaves_depth_first(forest)
        return forest, nodes["stats"][forest.leaf_node]

    def _completed(self, nodes: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """`nodes` with a batch subtree grown on the kept points of every leaf that holds at least two. A leaf
        that saw no point since the last export keeps the subtree it had, so an export costs what the points
        since the last one touched, not the whole forest."""
        n = nodes["child"].size
        slot = self.slot[:n]
        cand = np.flatnonzero((nodes["child"] < 0) & (slot >= 0))
        cand = cand[self.n_kept[slot[cand]] >= 2]
        seen = self.seen[cand]
        old = self.__dict__.get("_subtrees")
        reuse = np.zeros(cand.size, dtype=bool)
        at = np.zeros(cand.size, dtype=np.int64)
        if old is not None and old["node"].size:
            at = np.minimum(np.searchsorted(old["node"], cand), old["node"].size - 1)
            reuse = (old["node"][at] == cand) & (old["seen"][at] == seen)
        fresh = self._grow_subtrees(cand[~reuse], nodes)
        # Every subtree as a block of rows (its root first) in one pool: kept blocks, then fresh ones.
        length = np.zeros(cand.size, dtype=np.int64)
        start = np.zeros(cand.size, dtype=np.int64)
        if old is not None:
            length[reuse] = old["length"][at[reuse]]
            start[reuse] = old["start"][at[reuse]]
        n_old = 0 if old is None else old["dim"].size
        length[~reuse] = fresh["length"]
        start[~reuse] = n_old + fresh["start"]
        pool = {name: np.concatenate([old[name], fresh[name]]) if old is not None else fresh[name]
                for name in fresh if name not in ("length", "start")}
        owner = np.repeat(np.arange(cand.size), length)
        out_start = np.r_[0, np.cumsum(length)[:-1]]
        local = np.arange(owner.size) - out_start[owner]
        rows = start[owner] + local
        self._subtrees = {name: arr[rows] for name, arr in pool.items()}
        self._subtrees.update(node=cand, seen=seen, length=length, start=out_start)
        offs = n + np.r_[0, np.cumsum(length - 1)[:-1]]  # first new node id of each subtree
        new_id = np.where(local == 0, cand[owner], offs[owner] + local - 1)
        extra = int((length - 1).sum())
        out = {}
        for name, arr in nodes.items():
            grown = np.concatenate([arr, np.zeros((extra, *arr.shape[1:]), dtype=arr.dtype)])
            if name == "node_tree":
                grown[new_id] = arr[cand[owner]]
            else:
                vals = self._subtrees[name]
                if name == "child":
                    vals = np.where(vals >= 0, offs[owner] + vals - 1, -1)
                grown[new_id] = vals
            out[name] = grown
        return out

    def _grow_subtrees(self, leaves: np.ndarray, nodes: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Subtrees on the kept points of `leaves`: tables of their rows, each block's root (the leaf) first and
        children as local row numbers, with each block's start and length."""
        slots = self.slot[leaves].astype(np.int64)
        sizes = 2 * self.n_kept[slots].astype(np.int64) - 1
        base = np.r_[0, np.cumsum(sizes)[:-1]].astype(np.int64)
        total, L = int(sizes.sum()), self.stat_len
        sub = {"dim": np.zeros(total, np.int32), "thr": np.zeros(total, np.float32),
               "child": np.full(total, -1, np.int32), "depth": np.zeros(total, np.int32),
               "gain": np.zeros(total, np.float32), "node_w": np.zeros(total), "stats": np.zeros((total, L))}
        n_sub = np.zeros(leaves.size, dtype=np.int64)
        run_ranges(_complete_range, leaves.size, leaves.astype(np.int64), slots, nodes["depth"][leaves],
                   self.max_depth, self.store.x, self.store.row, self.kept, self.kept_c, self.n_kept,
                   nodes["stats"][leaves], min(self.rho, self.n_features), self.n_thr, self.settings.criterion,
                   float(self.settings.min_samples_leaf), self.leaf_seed, base, sub["dim"], sub["thr"],
                   sub["child"], sub["depth"], sub["gain"], sub["node_w"], sub["stats"], n_sub)
        owner = np.repeat(np.arange(leaves.size), sizes)
        keep = np.arange(total) - base[owner] < n_sub[owner]
        sub = {name: arr[keep] for name, arr in sub.items()}
        sub.update(length=n_sub, start=np.r_[0, np.cumsum(n_sub)[:-1]].astype(np.int64))
        return sub


@njit(cache=True, nogil=True)
def _route_and_count_range(t0, t1, X, rows, copies, child, dim, thr, slot, seen, stats, node_w, cand_dim, cand_thr,
                           left, since, ids, kept, kept_c, n_kept, count, w_col, leaf_of,
                           held):  # pragma: no cover - numba
    n, L = rows.shape
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
                if count:
                    _count_in_leaf(s, seen[j], X[i], rows[i], c, cand_dim, cand_thr, left, since)
                elif _keep(s, ids[i], c, kept, kept_c, n_kept):
                    held[i, t] = 1
            seen[j] += 1


@njit(cache=True, nogil=True, inline="always")
def _count_in_leaf(s, k, x, row, c, cand_dim, cand_thr, left, since):  # pragma: no cover - numba
    """Count the k-th point (x, row, c copies) to reach the leaf of slot s in its candidates."""
    R = cand_dim.shape[1]
    S = since.shape[1]
    L = row.shape[0]
    if k < S:
        for r in range(k, R, S):
            cand_thr[s, r] = x[cand_dim[s, r]]
    top = min(k, S - 1)
    for src in range(top + 1):
        for a in range(L):
            since[s, src, a] += c * row[a]
    for r in range(R):
        if r % S <= top and x[cand_dim[s, r]] <= cand_thr[s, r]:
            for a in range(L):
                left[s, r, a] += c * row[a]


@njit(cache=True, nogil=True, inline="always")
def _keep(s, point, c, kept, kept_c, n_kept):  # pragma: no cover - numba
    """Keep stored point `point` (c copies) in the leaf of slot s if it has room; whether it did."""
    m = n_kept[s]
    if m >= kept.shape[1]:
        return False
    kept[s, m] = point
    kept_c[s, m] = c
    n_kept[s] = m + 1
    return True


@njit(cache=True)
def _replay_kept(parents, parent_slot, n_parent_kept, child, dim, thr, slot, seen, store_x, kept, kept_c,
                 n_kept):  # pragma: no cover - numba
    """Replay each split leaf's kept points, in arrival order, into its children (which must have room for
    them). The left child holds its parent's slot: a point moves to a position at or before its own, so the kept
    lists are compacted in place without being overwritten before they are read."""
    for k in range(parents.shape[0]):
        p = parents[k]
        ps = parent_slot[k]
        lc = child[p]
        f = dim[p]
        t = thr[p]
        for m in range(n_parent_kept[k]):
            point = kept[ps, m]
            c = kept_c[ps, m]
            j = lc + (1 if store_x[point, f] > t else 0)
            _keep(slot[j], point, c, kept, kept_c, n_kept)
            seen[j] += 1


@njit(cache=True, nogil=True)
def _load_leaf(node, s, seed, state, store_row, kept, kept_c, n_kept, criterion, pid, flat_row, cols, idx,
               total):  # pragma: no cover - numba
    """Set up the search over the kept points of leaf `node` (slot s): its own generator in `state` (from the
    forest's seed and the node), the points' ids in the store in pid[:n] (inputs stay in the store: a search
    reads only rho of their D values), their statistics rows (times their copies) in flat_row as an (n, Lc) block
    over the columns cols[:Lc], idx[:n] = 0..n-1, and the rows' sum in total[:Lc]. Class counts keep only the
    classes the leaf holds (the search's cost goes with Lc); regression sums keep every column. Returns (n, Lc)."""
    state[0] = np.uint64(seed) ^ (np.uint64(node) * np.uint64(0xD1B54A32D192ED03))
    L = store_row.shape[1]
    n = np.int64(n_kept[s])
    Lc = np.int64(0)
    for a in range(L):
        held = criterion == SQUARED_ERROR
        for m in range(n):
            if store_row[kept[s, m], a] != 0.0:
                held = True
                break
        if held:
            cols[Lc] = a
            Lc += 1
    for c in range(Lc):
        total[c] = 0.0
    for m in range(n):
        p = kept[s, m]
        pid[m] = p
        idx[m] = m
        for c in range(Lc):
            v = kept_c[s, m] * store_row[p, cols[c]]
            flat_row[m * Lc + c] = v
            total[c] += v
    return n, Lc


@njit(cache=True, nogil=True)
def _best_kept_range(k0, k1, leaves, slot, store_x, store_row, kept, kept_c, n_kept, rho, n_thr, criterion, min_leaf,
                     min_gain, seed, cand_dim, cand_thr, left, since, best, gain):  # pragma: no cover - numba
    """For leaves[k], the best test on its kept points, written as the slot's candidate 0 with the kept points'
    statistics on its left and in all (so that `_apply_splits` takes it); best[k] = 0, or -1 if none gains
    enough. Its randomness is the leaf's own, as in `_complete_range`: the test is the root of the leaf's
    completion subtree."""
    L = store_row.shape[1]
    D = store_x.shape[1]
    M = kept.shape[1]
    pid = np.empty(M, dtype=np.int64)
    flat_row = np.empty(M * L)
    cols = np.empty(L, dtype=np.int64)
    idx = np.empty(M, dtype=np.int64)
    perm = np.empty(D, dtype=np.int64)
    state = np.zeros(1, dtype=np.uint64)
    row_buf = np.empty(L)
    lrow_buf = np.empty(L)
    rrow_buf = np.empty(L)
    for k in range(k0, k1):
        s = slot[leaves[k]]
        n, Lc = _load_leaf(leaves[k], s, seed, state, store_row, kept, kept_c, n_kept, criterion, pid, flat_row,
                           cols, idx, row_buf)
        kept_row = flat_row[:n * Lc].reshape((n, Lc))
        row = row_buf[:Lc]
        lrow = lrow_buf[:Lc]
        rrow = rrow_buf[:Lc]
        w, h = _impurity(row, criterion)
        if h <= 1e-12:  # pure: no test gains
            best[k] = -1
            gain[k] = 0.0
            continue
        f, t, g = _best_kept_test(store_x, pid, kept_row, idx, 0, n, row, w, h, state, perm, rho, n_thr, criterion,
                                  min_leaf, lrow, rrow)
        if f < 0 or g <= 1e-12 or g < min_gain:
            best[k] = -1
            gain[k] = 0.0
            continue
        best[k] = 0
        gain[k] = g
        cand_dim[s, 0] = f
        cand_thr[s, 0] = t
        for a in range(Lc):
            lrow[a] = 0.0
        for m in range(n):
            if store_x[pid[m], f] <= t:
                for a in range(Lc):
                    lrow[a] += kept_row[m, a]
        for a in range(left.shape[2]):
            left[s, 0, a] = 0.0
            since[s, 0, a] = 0.0
        for a in range(Lc):
            left[s, 0, cols[a]] = lrow[a]
            since[s, 0, cols[a]] = row[a]


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


@njit(cache=True, nogil=True)
def _complete_range(k0, k1, leaves, slots, depth0, max_depth, store_x, store_row, kept, kept_c, n_kept, leaf_stats,
                    rho, n_thr, criterion, min_leaf, seed, base, sub_dim, sub_thr, sub_child, sub_depth, sub_gain,
                    sub_w, sub_stats, n_sub):  # pragma: no cover - numba
    """Grow a small batch tree (`_best_kept_test` at every node, down to pure nodes) on each leaf's kept points.
    Leaf k's subtree takes rows base[k]... of the sub_* tables, its root (the leaf itself) first; a node's left
    child is a local index (-1 at leaves) and its right child follows it. The leaf's statistics not carried by
    kept points are shared out by weight, so the subtree's leaves sum to it."""
    L = store_row.shape[1]
    D = store_x.shape[1]
    M = kept.shape[1]
    pid = np.empty(M, dtype=np.int64)
    flat_row = np.empty(M * L)
    cols = np.empty(L, dtype=np.int64)
    perm = np.empty(D, dtype=np.int64)
    state = np.zeros(1, dtype=np.uint64)
    idx = np.empty(M, dtype=np.int64)
    stack = np.empty((2 * M, 4), dtype=np.int64)  # local node, first point, end, depth below the leaf
    row_buf = np.empty(L)
    lrow_buf = np.empty(L)
    rrow_buf = np.empty(L)
    total_buf = np.empty(L)
    rest = np.empty(L)  # the leaf's statistics not carried by kept points
    for k in range(k0, k1):
        s = slots[k]
        n, Lc = _load_leaf(leaves[k], s, seed, state, store_row, kept, kept_c, n_kept, criterion, pid, flat_row,
                           cols, idx, total_buf)
        kept_row = flat_row[:n * Lc].reshape((n, Lc))
        row = row_buf[:Lc]
        lrow = lrow_buf[:Lc]
        rrow = rrow_buf[:Lc]
        total = total_buf[:Lc]
        for a in range(L):
            rest[a] = leaf_stats[k, a]
        for a in range(Lc):
            rest[cols[a]] -= total[a]
        w_kept, _ = _impurity(total, criterion)
        b = base[k]
        used = 1
        top = 0
        stack[0, 0] = 0
        stack[0, 1] = 0
        stack[0, 2] = n
        stack[0, 3] = 0
        while top >= 0:
            node = stack[top, 0]
            lo = stack[top, 1]
            hi = stack[top, 2]
            below = stack[top, 3]
            top -= 1
            for a in range(Lc):
                row[a] = 0.0
            for m in range(lo, hi):
                for a in range(Lc):
                    row[a] += kept_row[idx[m], a]
            w, h = _impurity(row, criterion)
            g = b + node
            sub_depth[g] = depth0[k] + below
            share = w / w_kept if w_kept > 0.0 else 0.0
            for a in range(L):
                sub_stats[g, a] = share * rest[a]
            for a in range(Lc):
                sub_stats[g, cols[a]] += row[a]
            sub_w[g] = w
            sub_child[g] = -1
            sub_gain[g] = 0.0
            if hi - lo < 2 or h <= 1e-12 or sub_depth[g] >= max_depth:
                continue
            best_dim, best_thr, best_gain = _best_kept_test(store_x, pid, kept_row, idx, lo, hi, row, w, h, state, perm,
                                                            rho, n_thr, criterion, min_leaf, lrow, rrow)
            if best_dim < 0:
                continue
            i = lo
            j = hi - 1
            while i <= j:  # points at or below the threshold first
                if store_x[pid[idx[i]], best_dim] <= best_thr:
                    i += 1
                else:
                    tmp = idx[i]
                    idx[i] = idx[j]
                    idx[j] = tmp
                    j -= 1
            sub_dim[g] = best_dim
            sub_thr[g] = best_thr
            sub_gain[g] = best_gain
            sub_child[g] = used
            for c, c0, c1 in ((used, lo, i), (used + 1, i, hi)):
                top += 1
                stack[top, 0] = c
                stack[top, 1] = c0
                stack[top, 2] = c1
                stack[top, 3] = below + 1
            used += 2
        n_sub[k] = used


@njit(cache=True, nogil=True)
def _best_kept_test(store_x, pid, kept_row, idx, lo, hi, row, w, h, state, perm, rho, n_thr, criterion, min_leaf, lrow,
                    rrow):  # pragma: no cover - numba
    """The best axis test on kept points idx[lo:hi] (inputs store_x[pid] (M, D), statistics kept_row (M, L); their sum
    `row`, of weight w and impurity h), as the batch trees search: rho distinct random dimensions, n_thr uniform
    thresholds each within the points' range (at most n - 1 for n points; every value when n_thr <= 0).
    Randomness from the splitmix `state`. Returns (dimension, threshold, gain); dimension -1 when no test gains
    with min_leaf each side."""
    D = store_x.shape[1]
    L = row.shape[0]
    n = hi - lo
    # n points have at most n - 1 gaps: more uniform thresholds than that mostly repeat a partition.
    Q = min(n_thr, n - 1) if n_thr > 0 else n
    thr = np.empty(Q, dtype=np.float32)
    vals = np.empty(n, dtype=np.float32)
    hist = np.zeros((Q + 1, L))
    for f in range(D):
        perm[f] = f
    best_gain = 0.0
    best_dim = -1
    best_thr = np.float32(0.0)
    for r in range(min(rho, D)):
        pick = r + _below(state, D - r)
        f = perm[pick]
        perm[pick] = perm[r]
        perm[r] = f
        xmin = np.inf
        xmax = -np.inf
        for m in range(n):
            v = store_x[pid[idx[lo + m]], f]
            vals[m] = v
            xmin = min(xmin, v)
            xmax = max(xmax, v)
        if not xmax > xmin:
            continue
        if n_thr > 0:
            for q in range(Q):
                t = np.float32(xmin + _uniform(state) * (xmax - xmin))
                thr[q] = t if t < xmax else np.float32(xmin)
            nq = Q
        else:  # every value but the largest
            for m in range(n):
                thr[m] = vals[m]
            _sort_small(thr, n)
            nq = 0
            for m in range(n):
                if thr[m] < xmax and (nq == 0 or thr[m] > thr[nq - 1]):
                    thr[nq] = thr[m]
                    nq += 1
        _sort_small(thr, nq)
        # A point lies left of threshold q when it is at most thr[q]: bin b = the first such q, summed upwards.
        for q in range(nq + 1):
            for a in range(L):
                hist[q, a] = 0.0
        for m in range(n):
            b = _first_at_least(thr, nq, vals[m])
            for a in range(L):
                hist[b, a] += kept_row[idx[lo + m], a]
        for a in range(L):
            lrow[a] = 0.0
        for q in range(nq):
            for a in range(L):
                lrow[a] += hist[q, a]
                rrow[a] = row[a] - lrow[a]
            wl, hl = _impurity(lrow, criterion)
            wr, hr = _impurity(rrow, criterion)
            if wl < min_leaf or wr < min_leaf:
                continue
            gain = h - (wl / w) * hl - (wr / w) * hr
            if gain > best_gain:
                best_gain = gain
                best_dim = f
                best_thr = thr[q]
    return best_dim, best_thr, best_gain




@njit(cache=True, nogil=True)
def _first_at_least(a, n, v):  # pragma: no cover - numba
    """The first index i < n with a[i] >= v in sorted a[:n] (n if none)."""
    lo = 0
    hi = n
    while lo < hi:
        mid = (lo + hi) // 2
        if a[mid] < v:
            lo = mid + 1
        else:
            hi = mid
    return lo
