"""Level-wise forest growth: every frontier node of every tree at one depth is one batch.

The trainer knows neither the task (the `Objective` scores partitions) nor the data (the `FeatureFamily` samples
weak-learner parameters and computes responses). Per level it:

1. computes each frontier node's statistics and decides which nodes may split;
2. draws rho candidate parameter rows per node (`n_candidates`; one shared set per tree for ferns) and K uniform
   numbers per candidate for the thresholds, from one seeded generator in a fixed order;
3. in memory-bounded chunks of nodes, asks the family for responses, scores splits (binned or exhaustive) and
   partitions each split node's points in place, left-going points first;
4. for large axis-aligned fits, first hands the nodes of few points (K thresholds) or of a few thousand (every
   threshold searched) to `subtree_growth`, which grows each of them depth-first to its leaves while its rows are
   in cache; their nodes take the ids after the level's.

All randomness is drawn in Python before the kernels run (a subtree's generator is seeded by a draw of the level),
and every kernel writes disjoint slots or reduces within one (node, candidate) serially, so the model bytes depend
on `random_state` only, never on the thread count.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from imageforest.forest import subtree_growth
from imageforest.forest.features import FeatureFamily
from imageforest.forest.level_tables import LevelRows, _LevelSplits, _Tables
from imageforest.forest.losses import GrowingMargins, loss_gradient, loss_weights
from imageforest.forest.memory_pages import small_pages
from imageforest.forest.objectives import GINI, MIXED, SQUARED_ERROR, NodeObjectives, Objective
from imageforest.forest.row_split_search import partition_by_row, row_gain_table
from imageforest.forest.split_search import (
    binned_gain_table,
    exhaustive_best,
    exhaustive_best_sorted,
    lifted_gain_table,
    partition_configs,
    partition_segments,
    segment_class_counts,
    segment_min_max,
    segment_one_target_stats,
    segment_stats,
    sorted_search_applies,
)
from imageforest.forest.storage import ForestArrays
from imageforest.forest.subtree_growth import (
    SubtreeNodes,
    grow_sorted_subtrees,
    grow_subtrees,
)
from imageforest.forest.threads import run_ranges
from imageforest.forest.weighted_subtrees import grow_weighted_class_subtrees, grow_weighted_one_target_subtrees
from imageforest.kernels import njit

# Responses materialised at once (positions x candidates); bounds the trainer's working memory to ~64 MB.
RESPONSE_BUDGET = 1 << 24
# Positions per chunk of responses: each also takes ~40 bytes of index, weight and label copies, which outweigh its
# responses when candidates are few (a random forest's sqrt(50) = 7: 150 MB per chunk with RESPONSE_BUDGET alone).
# 2^18 rather than 2^19: random forests' peaks 8-10% lower (2 classes, 100k x 50: 98-102 MB against 106-111) for
# 0-5% of the fit time (2^17 cost 15-35%: too few nodes per chunk to share between threads).
CHUNK_POSITIONS = 1 << 18
# (node, candidate) pairs the fused search takes at once: its tables (uniforms, thresholds, gains, visiting order)
# then stay a few MB each, small enough to be reused from the heap instead of being fresh pages every level.
FUSED_PAIRS = 1 << 19
# Positions grown depth-first per call (`grow_subtrees`): its node tables take about 100 bytes per position and are
# freed after the call. Small calls keep a fit's peak memory down (2 classes, 100k x 50, T = 50: 200 MB with 2^18
# positions, 180 with 2^16; freed pages are not all handed back), and the extra calls cost no measurable time.
SUBTREE_POSITIONS = 1 << 16
# Regression targets with at most this many outputs are copied per chunk rather than read indirectly.
GATHER_MAX_OUTPUTS = 8


@dataclass
class GrowthSettings:
    """Tree-growth hyper-parameters in the monograph's vocabulary (T, D, rho, K)."""

    n_trees: int = 100
    max_depth: int | None = None
    n_candidates: int = 1
    n_thresholds: int | None = 16
    min_samples_split: int = 2
    min_samples_leaf: int = 1
    min_gain: float = 0.0
    bootstrap: bool = False
    max_samples: int | None = None
    structure: str = "tree"
    two_sided: bool = False
    threshold_sampling: str = "range"  # "range": uniform in the node's [min, max]; "data": responses of K points
    loss: str | None = None  # a global loss (alternating decision forests): weights from the forest's margins
    progress: Any = None  # callable(str) told after every level how far growth has come
    samples: Any = None  # (order, weights or None, bounds) as `_initial_samples` gives: each tree's points, given


@dataclass
class GrownForest:
    """A grown forest plus where each leaf's training points ended up.

    Attributes
    ----------
    forest : ForestArrays
    order : (n_positions,) int32, point index at each position (all trees' samples, concatenated)
    position_weights : (n_positions,) weight at each position (bootstrap count x sample weight): float64, uint8
        when the weights are bootstrap counts alone (float32 should a count pass 255), or None when every position
        weighs 1 (no bagging, unit sample weights): a large fit then holds no such table
    leaf_start, leaf_end : (n_leaves,) int64, leaf l's points are order[leaf_start[l]:leaf_end[l]]
    """

    forest: ForestArrays
    order: np.ndarray
    position_weights: np.ndarray | None
    leaf_start: np.ndarray
    leaf_end: np.ndarray

    @property
    def wts(self) -> np.ndarray:
        """(n_positions,) float64 weight of every position: `position_weights`, or a float64 table made on the first
        call when that is None (ones) or counts, and kept, as callers read it once per output."""
        if self.position_weights is not None and self.position_weights.dtype == np.float64:
            return self.position_weights
        table = self.__dict__.get("_wts64")
        if table is None:
            table = self.__dict__["_wts64"] = (np.ones(self.order.size) if self.position_weights is None
                                               else self.position_weights.astype(np.float64))
        return table

    def leaf_members(self) -> tuple[np.ndarray, np.ndarray]:
        """Every leaf's training points, leaf after leaf: (leaf index, position in `order` / `wts`) per member,
        both (n_members,) int64, for leaf statistics by `np.bincount(leaf, ...)`."""
        lengths = self.leaf_end - self.leaf_start
        leaf = np.repeat(np.arange(lengths.size), lengths)
        positions = np.arange(lengths.sum()) + np.repeat(self.leaf_start - (np.cumsum(lengths) - lengths), lengths)
        return leaf, positions

    def leaf_moments(self, values: np.ndarray, weights: np.ndarray | None = None, covariance: str = "diagonal"
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Weighted count, mean and spread of per-point values over every leaf's training points.

        Parameters
        ----------
        values : (n_points, q) float64, indexed by point (as `order` holds them)
        weights : (n_positions,) weight of each position in `order`; None: each position's bagging weight `wts`
        covariance : "diagonal" (per-column variance, (n_leaves, q)), "full" ((n_leaves, q, q)) or "none"

        Returns
        -------
        count : (n_leaves,) summed weight; mean : (n_leaves, q) (0 in leaves of no weight); spread or None.
        Sums run over each leaf's points in `order`, so equal inputs give equal bytes.
        """
        n_leaves = self.leaf_start.size
        leaf, positions = self.leaf_members()
        rows = np.asarray(values, dtype=np.float64)[self.order[positions]]
        w = (self.wts if weights is None else np.asarray(weights, dtype=np.float64))[positions]
        q = rows.shape[1]
        count = np.bincount(leaf, weights=w, minlength=n_leaves)
        safe = np.maximum(count, 1e-300)[:, None]
        mean = np.stack([np.bincount(leaf, weights=w * rows[:, a], minlength=n_leaves) for a in range(q)], 1) / safe
        if covariance == "none":
            return count, mean, None
        resid = rows - mean[leaf]
        if covariance == "diagonal":
            spread = np.stack([np.bincount(leaf, weights=w * resid[:, a] ** 2, minlength=n_leaves)
                               for a in range(q)], 1) / safe
        elif covariance == "full":
            spread = np.empty((n_leaves, q, q))
            for a in range(q):
                for b in range(a, q):
                    spread[:, a, b] = spread[:, b, a] = np.bincount(leaf, weights=w * resid[:, a] * resid[:, b],
                                                                    minlength=n_leaves) / safe[:, 0]
        else:
            raise ValueError(f"covariance must be 'diagonal', 'full' or 'none', got {covariance!r}")
        return count, mean, spread


def _node_purity(stats: np.ndarray, counts: np.ndarray, criterion: int, n_blocks: int, q: int) -> np.ndarray:
    """True where a node's targets are all alike (one class, or zero variance in every block)."""
    pure = np.zeros(stats.shape[0], dtype=np.bool_)
    run_ranges(_node_purity_range, stats.shape[0], stats, criterion, n_blocks, q, pure)
    return pure


@njit(cache=True, nogil=True)
def _node_purity_range(s0, s1, stats, criterion, n_blocks, q, pure):  # pragma: no cover - numba
    stride = 1 + q + q * q
    offset = stats.shape[1] - n_blocks * stride  # class counts in front of semi-supervised rows
    for s in range(s0, s1):
        row = stats[s]
        if criterion <= GINI:
            # loops rather than row.sum() / row.max(): numpy's reductions cost a first fit 0.5 s of compilation
            total = 0.0
            biggest = -np.inf
            for j in range(row.shape[0]):
                total += row[j]
                biggest = max(biggest, row[j])
            pure[s] = biggest >= total * (1.0 - 1e-12)
        else:  # targets (or, semi-supervised, inputs) all alike
            spread = 0.0
            scale = 0.0
            for b in range(n_blocks):
                base = offset + b * stride
                w = row[base]
                if w <= 0.0:
                    continue
                for a in range(q):
                    m = row[base + 1 + a] / w
                    spread += row[base + 1 + q + a * q + a] / w - m * m
                    scale += row[base + 1 + q + a * q + a] / w
            pure[s] = spread <= 1e-12 * max(scale, 1e-300)


def _initial_samples(n_points: int, sample_weight: np.ndarray, settings: GrowthSettings,
                     rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """Each tree's points (bagging or not): order, weights (None when every one is 1; uint8 when they are
    bootstrap counts alone, float64 otherwise) and per-tree segment bounds.

    Points with zero weight are dropped. The arrays are filled in place, tree after tree, so the largest buffers
    of a fit exist once (building per-tree pieces and concatenating would hold them twice).
    """
    n_draw = n_points if settings.max_samples is None else int(settings.max_samples)
    T = settings.n_trees
    cap = T * min(n_draw, n_points)
    unit_sample = bool(np.all(sample_weight == 1.0))
    order = np.empty(cap, dtype=np.int32)
    # Bootstrap counts alone are small integers: a byte each, an eighth of a float64 table (37 MB less for 100
    # trees on 200k points; the fused search takes them as float64, every kernel sums them in float64). A count
    # beyond a byte (many more draws than points) turns the table to float32 once.
    wts = (None if unit_sample and not settings.bootstrap
           else np.empty(cap, dtype=np.uint8 if unit_sample else np.float64))
    bounds = np.zeros(T + 1, dtype=np.int64)
    every = np.flatnonzero(sample_weight > 0).astype(np.int32)
    for t in range(T):  # once per tree at start-up, not on a hot path
        if settings.bootstrap:
            counts = np.bincount(rng.integers(0, n_points, n_draw), minlength=n_points)
            idx = np.flatnonzero(counts * (sample_weight > 0))
            w = sample_weight[idx] * counts[idx]
        elif n_draw < n_points:
            idx = np.sort(rng.permutation(n_points)[:n_draw])
            idx = idx[sample_weight[idx] > 0]
            w = sample_weight[idx]
        else:
            idx = every
            w = sample_weight[idx]
        a = bounds[t]
        bounds[t + 1] = a + idx.size
        order[a:bounds[t + 1]] = idx
        if wts is not None:
            if wts.dtype == np.uint8 and w.size and w.max() > np.iinfo(np.uint8).max:
                wts = wts.astype(np.float32)
            wts[a:bounds[t + 1]] = w
    return order[:bounds[-1]], None if wts is None else wts[:bounds[-1]], bounds


def _chunks(counts: np.ndarray, rho: int, breaks: np.ndarray | None, per_node: int = 0,
            budget: int | None = None) -> list[tuple[int, int]]:
    """Split the frontier into consecutive node ranges whose responses fit the budget (one node at least).

    `breaks` (bool per node) marks nodes a chunk may start at (ferns: first node of a tree). `per_node`: float32
    values each (node, candidate) pair holds besides its responses (thresholds, uniforms, gains), which outweigh the
    responses on deep levels' few-point nodes. `budget`: RESPONSE_BUDGET unless given (with rho = 1 and a budget of
    positions, the same cut serves subtree roots).
    """
    budget = RESPONSE_BUDGET if budget is None else budget
    ends = np.cumsum((counts + per_node) * rho)
    starts_ok = np.flatnonzero(breaks) if breaks is not None else None
    out = []
    a, n = 0, counts.size
    while a < n:
        base = ends[a - 1] if a else 0
        b = max(int(np.searchsorted(ends, base + budget, side="right")), a + 1)
        if starts_ok is not None and b < n and not breaks[b]:
            nxt = np.searchsorted(starts_ok, b)
            b = int(starts_ok[nxt]) if nxt < starts_ok.size else n
        out.append((a, min(b, n)))
        a = b
    return out


def fused_search_applies(n_thresholds: int | None, structure: str, threshold_sampling: str) -> bool:
    """Whether these settings search K uniform thresholds over rows of one response matrix in the fused pass, which
    reads the matrix both feature-major and point-major (for families with such a matrix, and objectives whose
    statistics are not lifted or chosen per node). Otherwise the generic path gathers each candidate's responses:
    for axis-aligned tests, one feature of a node's points at a time, from the feature-major matrix alone."""
    return n_thresholds is not None and structure != "fern" and threshold_sampling == "range"


def grow_forest(family: FeatureFamily, data: Any, n_points: int, objective: Objective | NodeObjectives,
                sample_weight: np.ndarray, settings: GrowthSettings, rng: np.random.Generator) -> GrownForest:
    """Grow `settings.n_trees` trees level by level (their tables in small pages: `memory_pages`).

    Parameters
    ----------
    family : feature family bound to nothing; `data` is passed to its `responses`
    n_points : number of training points
    objective : statistics and impurity of the task, or `NodeObjectives` to let each node choose one
    sample_weight : (n_points,) float64
    rng : the only source of randomness
    """
    with small_pages():
        return _grow_levels(family, data, n_points, objective, sample_weight, settings, rng)


@dataclass
class _Growth:
    """A level-wise fit's state, shared by its phases (`_grow_levels`): the settings, the training tables the
    searches read, the frontier (the nodes of the level being grown, contiguous segments of `order`) and the node
    and leaf tables written so far."""

    family: FeatureFamily
    data: Any
    objective: Objective  # the first (or only) objective: the one every level's statistics are taken with
    objectives: list[Objective]
    choose: Any  # NodeObjectives.choose, or None
    settings: GrowthSettings
    rng: np.random.Generator
    sample_weight: np.ndarray
    order: np.ndarray
    wts: np.ndarray | None
    T: int
    rho: int
    K: int | None
    fern: bool
    max_depth: int
    msl: int
    configs: np.ndarray | None
    loss_labels: np.ndarray | None = None
    growing_margins: GrowingMargins | None = None
    rows_matrix: np.ndarray | None = None
    points_matrix: np.ndarray | None = None
    per_position: bool = False
    unit_weights: bool = False
    pos_labels: np.ndarray | None = None
    pos_targets: np.ndarray | None = None
    src_labels: np.ndarray | None = None
    src_targets: np.ndarray | None = None
    weight_table: bool = True
    subtree_points: int = 0
    subtrees: bool = False
    weighted_subtrees: bool = False
    sorted_matrix: np.ndarray | None = None
    sorted_points: int = 0
    f_start: np.ndarray | None = None
    f_end: np.ndarray | None = None
    f_tree: np.ndarray | None = None
    level_first_id: int = 0
    next_id: int = 0
    depth: int = 0
    leaf_count: int = 0
    node_table: _Tables | None = None
    leaf_table: _Tables | None = None


def _grow_levels(family: FeatureFamily, data: Any, n_points: int, objective: Objective | NodeObjectives,
                 sample_weight: np.ndarray, settings: GrowthSettings, rng: np.random.Generator) -> GrownForest:
    """`grow_forest`'s levels: statistics, small nodes' subtrees, the others' search, their children next."""
    g = _start_growth(family, data, n_points, objective, sample_weight, settings, rng)
    t0 = time.perf_counter()
    while g.f_start.size:
        counts, node_w, pure_by, can_split = _level_statistics(g)
        level = _LevelSplits.empty(g.f_start.size, family.param_width)
        placed, root_child = _grow_level_subtrees(g, can_split, counts, level)
        sp = np.flatnonzero(can_split)
        if sp.size:
            _search_level(g, sp, counts, node_w, pure_by, level)
        _close_level(g, level, root_child, placed, node_w)
        if settings.progress is not None:
            _say_progress(g, time.perf_counter() - t0)
    return _grown_forest(g)


def _say_progress(g: _Growth, elapsed: float) -> None:
    """One line after a level: the depth reached and the share of the points in finished leaves (100%: done)."""
    done = g.leaf_table.head(g.leaf_count)
    share = float((done["end"] - done["start"]).sum()) / max(g.order.size, 1)
    limit = "" if g.settings.max_depth is None else f" of at most {g.settings.max_depth}"
    g.settings.progress(f"growing {g.T} trees: depth {g.depth}{limit}, {share:.0%} of the points in finished "
                        f"leaves ({elapsed:.0f} s)")


def _start_growth(family: FeatureFamily, data: Any, n_points: int, objective: Objective | NodeObjectives,
                  sample_weight: np.ndarray, settings: GrowthSettings, rng: np.random.Generator) -> _Growth:
    """The fit's state before its first level: the points each tree draws, the tables the searches read, which
    nodes grow depth-first, the roots as the first frontier and the empty node and leaf tables."""
    choose = None
    if isinstance(objective, NodeObjectives):
        objectives, choose = list(objective.objectives), objective.choose
        if not objectives or settings.structure == "fern":
            raise ValueError("NodeObjectives needs at least one objective, and trees (a fern shares one test per "
                             "level: it cannot choose an objective per node)")
        objective = objectives[0]
    else:
        objectives = [objective]
    K = settings.n_thresholds
    order, wts, bounds = settings.samples or _initial_samples(n_points, sample_weight, settings, rng)
    given = data
    g = _Growth(family=family, data=family.training_data(data), objective=objective, objectives=objectives,
                choose=choose, settings=settings, rng=rng, sample_weight=sample_weight, order=order, wts=wts,
                T=settings.n_trees, rho=int(settings.n_candidates), K=K, fern=settings.structure == "fern",
                max_depth=np.iinfo(np.int32).max if settings.max_depth is None else int(settings.max_depth),
                msl=int(settings.min_samples_leaf),
                configs=partition_configs(K, settings.two_sided) if K is not None else None)
    crit, n_blocks, q, n_stats = objective.criterion, objective.n_blocks, objective.q, objective.n_stats
    labels, targets, lifted = objective.labels, objective.targets, objective.lifted
    if settings.loss is not None:
        loss_gradient(settings.loss, np.zeros(1))  # an unknown loss fails before growth
        if settings.bootstrap:
            raise ValueError("a global loss re-weights points, not bootstrap copies: grow without bootstrap")
        labelled = [o for o in objectives if o.criterion <= GINI]
        if not labelled:
            raise ValueError("a global loss needs a classification objective (the margins are of class labels)")
        g.loss_labels = labelled[0].labels
        g.growing_margins = GrowingMargins(g.loss_labels, labelled[0].n_classes, n_points, g.T)
    if fused_search_applies(K, settings.structure, settings.threshold_sampling) and lifted is None and choose is None:
        g.rows_matrix = family.response_matrix(g.data)
    if g.rows_matrix is not None:
        if g.wts is not None:
            # counts would compile the fused search's kernels a second time; this path never needed them
            g.wts = g.wts.astype(np.float64, copy=False)
        g.points_matrix = family.point_matrix(given)
        if g.points_matrix is None:
            g.points_matrix = np.ascontiguousarray(g.rows_matrix.T)
        del given
        # Labels and few targets travel with the order, so the fused search reads them sequentially; labels as int8
        # when they fit, and unit weights neither read nor moved (fewer bytes per candidate scan: 5-15% on deep
        # levels of the 200k x 50 benchmark).
        small = labels.size and labels.min() >= np.iinfo(np.int8).min and labels.max() <= np.iinfo(np.int8).max
        g.pos_labels = labels.astype(np.int8 if small else labels.dtype)[order] if labels.size else labels[:0]
        g.unit_weights = g.wts is None and g.loss_labels is None  # a global loss changes them per level
        g.per_position = targets.shape[1] <= GATHER_MAX_OUTPUTS
        g.pos_targets = targets[order] if g.per_position and targets.size else targets[:0]
        g.src_labels, g.src_targets = (g.pos_labels, g.pos_targets) if g.per_position else (labels, targets)

    # Unit weights are read by no kernel of the class and one-target paths (statistics, search, partition): there
    # a fit holds no table of ones (8 bytes per point and tree); other paths get one.
    weights_read = not (g.unit_weights and (crit <= GINI or (n_blocks == 1 and q == 1 and crit != MIXED
                                                             and n_stats == 3)))
    g.weight_table = g.wts is not None or weights_read
    if g.wts is None:
        g.wts = np.ones(order.size if weights_read else 0)

    # Small nodes grow depth-first to their leaves (`subtree_growth`): axis-aligned responses (rows of one matrix,
    # drawn as distinct rows, a node's parameter being its row) with class or one-target statistics and unit
    # weights (no bagging, sample weights or global loss).
    g.subtree_points = subtree_growth.SUBTREE_POINTS
    large = g.rows_matrix is not None and (g.points_matrix.nbytes >= subtree_growth.SUBTREE_MIN_BYTES
                                           or order.size >= subtree_growth.SUBTREE_MIN_POSITIONS)
    binned_subtrees = (large and g.per_position and g.subtree_points > 0 and family.sample_draws(g.rho) is not None
                       and K is not None and K >= 1 and (crit <= GINI or (n_blocks == 1 and q == 1 and crit != MIXED)))
    g.subtrees = binned_subtrees and g.unit_weights
    # ... or with weights (bagging's counts, sample weights) but a global loss's, in kernels of their own
    g.weighted_subtrees = binned_subtrees and not g.unit_weights and g.loss_labels is None
    # ... and with every threshold searched (random-forest settings): axis-aligned responses read from the
    # feature-major matrix, class or one-target squared-error statistics, any weights but a global loss's (which
    # change level by level). Small fits too: sorting keeps a level-wise fit's per-level costs however small the
    # matrix (digits, 1,797 x 64 with 100 trees: 0.23 s level-wise, 0.11 s depth-first).
    g.sorted_points = subtree_growth.SORTED_SUBTREE_POINTS
    if (K is None and not g.fern and lifted is None and choose is None and g.loss_labels is None
            and g.sorted_points > 0 and sorted_search_applies(crit, n_blocks, q)
            and family.sample_draws(g.rho) is not None):
        g.sorted_matrix = family.response_matrix(g.data)
        if g.sorted_matrix is not None and not (g.sorted_matrix.dtype == np.float32
                                                and g.sorted_matrix.flags.c_contiguous):
            g.sorted_matrix = None

    # Frontier: node ids are contiguous per level, and ordered by tree.
    g.f_start = bounds[:-1].copy()
    g.f_end = bounds[1:].copy()
    g.f_tree = np.arange(g.T, dtype=np.int64)
    g.next_id = g.T
    # A tree of m positions has at most 2m - 1 nodes and m leaves (children are never empty).
    g.node_table = _Tables(2 * order.size + g.T, params=(np.float64, family.param_width), thr_lo=np.float32,
                           thr_hi=np.float32, child=np.int32, depth=np.int32, gain=np.float32, weight=np.float64)
    g.leaf_table = _Tables(order.size + g.T, node=np.int32, tree=np.int32, start=np.int64, end=np.int64)
    return g


def _level_statistics(g: _Growth) -> tuple[np.ndarray, np.ndarray, list[np.ndarray], np.ndarray]:
    """The frontier's point counts, weights, purity per objective and which nodes may split; with a global loss,
    the points' weights for this level first."""
    f_start, f_end, order = g.f_start, g.f_end, g.order
    if g.loss_labels is not None and g.depth > 0:
        # Alternating decision forests: the forest grown so far weighs the points for the next level.
        done = g.leaf_table.head(g.leaf_count)
        margin = g.growing_margins.margins(order, g.sample_weight, done["start"], done["end"], f_start, f_end,
                                           g.f_tree)
        grad = loss_gradient(g.settings.loss, margin)
        g.wts = loss_weights(order, g.sample_weight, grad / max(float(np.mean(grad)), 1e-300))
    obj = g.objective
    crit, n_blocks, q, n_stats = obj.criterion, obj.n_blocks, obj.q, obj.n_stats
    if g.rows_matrix is not None and g.per_position and g.unit_weights and crit <= GINI:
        stats, counts = segment_class_counts(g.pos_labels, f_start, f_end, n_stats)
    elif (g.rows_matrix is not None and g.per_position and g.unit_weights and n_blocks == 1 and q == 1
          and crit != MIXED and n_stats == 3):
        stats, counts = segment_one_target_stats(g.pos_targets, f_start, f_end)
    elif g.rows_matrix is not None and g.per_position:
        stats, counts = segment_stats(order, g.wts, f_start, f_end, crit, g.pos_labels, g.pos_targets, n_blocks, q,
                                      n_stats, True)
    else:
        stats, counts = segment_stats(order, g.wts, f_start, f_end, crit, obj.labels, obj.targets, n_blocks, q,
                                      n_stats)
    node_w = counts.astype(np.float64) if g.unit_weights else _segment_weight(g.wts, f_start, f_end)
    pure_by = [_node_purity(stats, counts, crit, n_blocks, q)]
    for other in g.objectives[1:]:  # pure only when pure for every objective a node might choose
        o_stats, _ = segment_stats(order, g.wts, f_start, f_end, other.criterion, other.labels, other.targets,
                                   other.n_blocks, other.q, other.n_stats)
        pure_by.append(_node_purity(o_stats, counts, other.criterion, other.n_blocks, other.q))
    pure = np.logical_and.reduce(pure_by)
    can_split = ((counts >= g.settings.min_samples_split) & (counts >= 2 * g.msl) & ~pure & (node_w > 0)
                 & (g.depth < g.max_depth))
    return counts, node_w, pure_by, can_split


def _grow_level_subtrees(g: _Growth, can_split: np.ndarray, counts: np.ndarray, level: _LevelSplits
                         ) -> tuple[int, np.ndarray]:
    """Grow the small nodes of the frontier depth-first to their leaves (they split no more level-wise); their
    nodes take the ids after this level's. Returns the nodes placed and each frontier node's left child id (-1
    where it did not grow a subtree)."""
    n_front = g.f_start.size
    placed = 0
    root_child = np.full(n_front, -1, dtype=np.int64)
    if not (g.subtrees or g.weighted_subtrees or g.sorted_matrix is not None):
        return placed, root_child
    roots = np.flatnonzero(can_split & (counts <= (g.sorted_points if g.sorted_matrix is not None
                                                   else g.subtree_points)))
    if not roots.size:
        return placed, root_child
    s, obj, f_start, f_end = g.settings, g.objective, g.f_start, g.f_end
    crit, n_stats, reg = obj.criterion, obj.n_stats, obj.reg
    can_split[roots] = False
    seeds = g.rng.integers(0, np.iinfo(np.int64).max, size=roots.size).astype(np.uint64)
    for a, b in _chunks(counts[roots], 1, None, budget=SUBTREE_POSITIONS):
        chunk = roots[a:b]
        if g.subtrees:
            sub = grow_subtrees(f_start[chunk], f_end[chunk], g.depth, seeds[a:b], g.points_matrix, g.order,
                                g.pos_labels, g.pos_targets, crit <= GINI, n_stats, crit == GINI,
                                crit == SQUARED_ERROR, float(reg[0]) if np.size(reg) else 0.0, g.rho, g.K,
                                g.configs, s.min_samples_split, g.msl, s.min_gain, g.max_depth)
        elif g.weighted_subtrees and crit <= GINI:
            sub = grow_weighted_class_subtrees(f_start[chunk], f_end[chunk], g.depth, seeds[a:b], g.points_matrix,
                                               g.order, g.wts, g.pos_labels, n_stats, crit == GINI, g.rho, g.K,
                                               g.configs, s.min_samples_split, g.msl, s.min_gain, g.max_depth)
        elif g.weighted_subtrees:
            sub = grow_weighted_one_target_subtrees(
                f_start[chunk], f_end[chunk], g.depth, seeds[a:b], g.points_matrix, g.order, g.wts, g.pos_targets,
                crit == SQUARED_ERROR, float(reg[0]) if np.size(reg) else 0.0, g.rho, g.K, g.configs,
                s.min_samples_split, g.msl, s.min_gain, g.max_depth)
        else:
            sub = grow_sorted_subtrees(f_start[chunk], f_end[chunk], g.depth, seeds[a:b], g.sorted_matrix, g.order,
                                       g.wts, obj.labels, obj.targets, crit, n_stats, g.rho, s.min_samples_split,
                                       g.msl, s.min_gain, g.max_depth)
        n_sub, n_sub_leaves = _place_subtrees(sub, chunk, g.f_tree, g.next_id + placed, g.leaf_count, g.node_table,
                                              g.leaf_table, level, root_child, g.family)
        placed += n_sub
        g.leaf_count += n_sub_leaves
    return placed, root_child


def _search_level(g: _Growth, sp: np.ndarray, counts: np.ndarray, node_w: np.ndarray, pure_by: list[np.ndarray],
                  level: _LevelSplits) -> None:
    """Draw the candidates of the frontier nodes `sp` that split level-wise, search them and partition their
    points, recording each node's test in `level`."""
    if g.fern:
        # One test per tree and level: candidates drawn per tree, shared by the tree's nodes.
        trees_here, node_set = np.unique(g.f_tree[sp], return_inverse=True)
        n_sets, lazy = trees_here.size, False
    else:
        node_set = np.arange(sp.size)
        # drawn chunk by chunk where chunks take the nodes in order
        n_sets, lazy = sp.size, g.choose is None
    # with a response matrix, only the rows are drawn: the parameter rows of the chosen ones follow
    family, rho, K = g.family, g.rho, g.K
    draw = family.sample_rows if g.rows_matrix is not None else family.sample
    cand = LevelRows(g.rng, n_sets, lambda r, n, draw=draw: draw(r, n, rho),
                     family.sample_draws(rho) if lazy else None)
    u = None
    if K is not None:
        u = LevelRows(g.rng, n_sets, lambda r, n: r.random((n, rho, K)), rho * K if lazy else None)
    tie_u = g.rng.random(sp.size)
    if g.rows_matrix is not None:
        _search_fused(g, sp, cand, u, tie_u, level)
    else:
        _search_gathered(g, sp, node_set, counts[sp], node_w, pure_by, cand, u, tie_u, level)


def _search_fused(g: _Growth, sp: np.ndarray, cand: LevelRows, u: LevelRows, tie_u: np.ndarray,
                  level: _LevelSplits) -> None:
    """The search when responses are rows of one matrix: one fused pass (no response table), a bounded number of
    (node, candidate) pairs at a time (a deep level's tables would take gigabytes of fresh memory)."""
    obj = g.objective
    step = max(1, FUSED_PAIRS // g.rho)
    for a in range(0, sp.size, step):
        sets = np.arange(a, min(a + step, sp.size))
        nodes = sp[sets]
        rows = cand.rows(sets)
        table, thr = row_gain_table(g.rows_matrix, g.points_matrix, rows, u.rows(sets), g.order, g.wts,
                                    g.unit_weights, g.f_start[nodes], g.f_end[nodes], g.configs, obj.criterion,
                                    g.src_labels, g.src_targets, g.per_position, obj.n_blocks, obj.q, obj.n_stats,
                                    obj.reg, g.msl)
        idx = np.arange(sets.size)
        choice = _tie_broken_argmax(table.reshape(sets.size, -1), tie_u[sets])
        best_gain, best_c, lo_b, hi_b = _best_configuration(table, thr, choice, g.configs)
        ok = np.isfinite(best_gain) & (best_gain >= g.settings.min_gain)
        nl = partition_by_row(g.order, g.wts, not g.unit_weights, g.pos_labels, g.pos_targets, g.f_start[nodes],
                              g.f_end[nodes], g.rows_matrix, g.points_matrix, rows[idx, best_c], lo_b, hi_b, ok)
        level.record(nodes, ok, nl, g.family.row_params(rows[idx, best_c]), lo_b, hi_b, best_gain)


def _search_gathered(g: _Growth, sp: np.ndarray, node_set: np.ndarray, sp_counts: np.ndarray, node_w: np.ndarray,
                     pure_by: list[np.ndarray], cand: LevelRows, u: LevelRows | None, tie_u: np.ndarray,
                     level: _LevelSplits) -> None:
    """The generic search: each chunk of nodes gathers its candidates' responses from the feature family, then
    scores K thresholds per candidate (or every one), by the objective each node chose."""
    rng, rho, K, fern, choose, objectives = g.rng, g.rho, g.K, g.fern, g.choose, g.objectives
    breaks = None
    if fern:
        breaks = np.ones(sp.size, dtype=bool)
        breaks[1:] = node_set[1:] != node_set[:-1]
    which = None if choose is None else np.asarray(choose(g.depth, sp.size, rng), dtype=np.int64)
    if which is not None and (which.shape != (sp.size,) or which.min() < 0 or which.max() >= len(objectives)):
        raise ValueError("NodeObjectives.choose must give one objective index per node")
    if which is not None and len(objectives) > 1:
        # a node pure for its chosen objective has nothing to gain there: it takes the first other one
        purity = np.stack(pure_by)[:, sp]
        stuck = purity[which, np.arange(sp.size)]
        which[stuck] = np.argmin(purity[:, stuck], axis=0)
    for k, obj in enumerate(objectives):
        group = np.arange(sp.size) if which is None else np.flatnonzero(which == k)
        # per pair: K float64 uniforms, K float32 thresholds, B ~ K float64 gains, a float32 range
        per_pair = 5 * K + 2 if K is not None else 4
        for a, b in _chunks(sp_counts[group], rho, breaks if which is None else None, per_pair,
                            min(RESPONSE_BUDGET, CHUNK_POSITIONS * rho)):
            sel = group[a:b]
            _search_chunk(g, obj, sp[sel], sp_counts[sel], node_set[sel], tie_u[sel], node_w, cand, u, level)


def _search_chunk(g: _Growth, obj: Objective, nodes: np.ndarray, c_counts: np.ndarray, sets: np.ndarray,
                  tie_u: np.ndarray, node_w: np.ndarray, cand: LevelRows, u: LevelRows | None,
                  level: _LevelSplits) -> None:
    """Search one chunk of frontier `nodes` (their point counts, candidate sets and tie-breaking uniforms) with
    objective `obj`, partition their points and record their tests."""
    rho, K, fern = g.rho, g.K, g.fern
    crit, n_blocks, q, n_stats = obj.criterion, obj.n_blocks, obj.q, obj.n_stats
    labels, targets, reg, lifted = obj.labels, obj.targets, obj.reg, obj.lifted
    n = nodes.size
    idx = np.arange(n)
    seg_end = np.cumsum(c_counts)
    seg_start = seg_end - c_counts
    m_total = int(seg_end[-1]) if seg_end.size else 0
    positions = np.repeat(g.f_start[nodes] - seg_start, c_counts) + np.arange(m_total)
    samples = g.order[positions]
    pos_node = np.repeat(np.arange(n, dtype=np.int32), c_counts)
    node_params = cand.rows(sets)
    resp = g.family.responses(g.data, node_params, samples, pos_node)
    w_pos = g.wts[positions].astype(np.float64, copy=False)  # the search kernels' one dtype
    # Gathering targets once per chunk turns every candidate's scan into sequential reads.
    if targets.shape[1] <= GATHER_MAX_OUTPUTS:
        lab_c = labels[samples] if labels.size else labels
        tgt_c = targets[samples] if targets.size else targets
        rows = np.arange(m_total, dtype=np.int32)
    else:
        lab_c, tgt_c, rows = labels, targets, samples
    if K is not None:
        if g.settings.threshold_sampling == "data" and not fern:
            # Responses of K random points of the node: thresholds follow the data's density (where a uniform draw
            # over [min, max] would mostly land between clusters, e.g. air and tissue).
            share = u.rows(sets) * c_counts[:, None, None]
            pick = seg_start[:, None, None] + share.astype(np.int64)
            thr = resp[np.arange(rho)[None, :, None], pick]
        else:
            lo, hi = segment_min_max(resp, seg_start, seg_end)
            if fern:
                lo, hi = _per_set_range(lo, hi, sets)
            thr = (lo[:, :, None] + u.rows(sets) * (hi - lo)[:, :, None]).astype(np.float32)
        thr.sort(axis=2)
        if lifted is not None:  # whole statistics rows per point, read in place
            table = lifted_gain_table(resp, seg_start, seg_end, samples, w_pos, thr, g.configs, crit, lifted,
                                      n_blocks, q, n_stats, reg, g.msl)
        else:
            table = binned_gain_table(resp, seg_start, seg_end, rows, w_pos, thr, g.configs, crit, lab_c, tgt_c,
                                      n_blocks, q, n_stats, reg, g.msl)
        flat = table.reshape(n, -1)
        choice = _fern_choice(flat, node_w[nodes], sets) if fern else _tie_broken_argmax(flat, tie_u)
        best_gain, best_c, lo_b, hi_b = _best_configuration(table, thr, choice, g.configs)
    else:
        if lifted is None and sorted_search_applies(crit, n_blocks, q):
            g_tab, t_tab = exhaustive_best_sorted(resp, seg_start, seg_end, rows, w_pos, crit, lab_c, tgt_c,
                                                  n_stats, g.msl)
        else:
            g_tab, t_tab = exhaustive_best(resp, seg_start, seg_end, rows, w_pos, crit, lab_c, tgt_c, n_blocks, q,
                                           n_stats, reg, g.msl)
        best_c = _tie_broken_argmax(g_tab, tie_u)
        best_gain = g_tab[idx, best_c]
        lo_b = np.full(n, -np.inf, dtype=np.float32)
        hi_b = t_tab[idx, best_c]
    ok = np.isfinite(best_gain) & (best_gain >= g.settings.min_gain)
    nl = partition_segments(g.order, g.wts, g.f_start[nodes], resp, seg_start, seg_end, best_c.astype(np.int64),
                            lo_b, hi_b, ok)
    level.record(nodes, ok, nl, node_params[idx, best_c], lo_b, hi_b, best_gain)


def _close_level(g: _Growth, level: _LevelSplits, root_child: np.ndarray, placed: int, node_w: np.ndarray) -> None:
    """Write the level's nodes and leaves to the tables; the children of split nodes (consecutive ids, left then
    right) become the next frontier, and every other node a leaf."""
    finished = root_child >= 0
    n_front = g.f_start.size
    child = np.empty(n_front, dtype=np.int32)
    split_idx = np.flatnonzero(level.split & ~finished)
    g.next_id += placed
    child[split_idx] = g.next_id + 2 * np.arange(split_idx.size)
    child[finished] = root_child[finished]
    leaf_idx = np.flatnonzero(~level.split)
    child[leaf_idx] = -(g.leaf_count + np.arange(leaf_idx.size)) - 1
    g.leaf_table.put(g.leaf_count, node=g.level_first_id + leaf_idx, tree=g.f_tree[leaf_idx],
                     start=g.f_start[leaf_idx], end=g.f_end[leaf_idx])
    g.leaf_count += leaf_idx.size
    g.node_table.put(g.level_first_id, params=level.params, thr_lo=level.thr_lo, thr_hi=level.thr_hi, child=child,
                     depth=g.depth, gain=level.gain, weight=node_w)

    mid = g.f_start[split_idx] + level.n_left[split_idx]
    new_start = np.empty(2 * split_idx.size, dtype=np.int64)
    new_end = np.empty(2 * split_idx.size, dtype=np.int64)
    new_start[0::2], new_end[0::2] = g.f_start[split_idx], mid
    new_start[1::2], new_end[1::2] = mid, g.f_end[split_idx]
    g.f_tree = np.repeat(g.f_tree[split_idx], 2)
    g.f_start, g.f_end = new_start, new_end
    g.level_first_id = g.next_id
    g.next_id += 2 * split_idx.size
    g.depth += 1


def _grown_forest(g: _Growth) -> GrownForest:
    """The forest once no node splits: its arrays, and each leaf's training points in tree order."""
    # The training matrix and the per-position copies are done with: free them before the leaves are renumbered.
    g.data = g.rows_matrix = g.points_matrix = g.sorted_matrix = None
    g.pos_labels = g.pos_targets = g.src_labels = g.src_targets = None
    n_nodes = g.level_first_id  # the last level split nothing: every id below this is a node
    node_arrays = g.node_table.head(n_nodes)
    leaf_arrays = g.leaf_table.head(g.leaf_count)
    forest = ForestArrays(**node_arrays, tree_root=np.arange(g.T, dtype=np.int32), leaf_node=leaf_arrays["node"],
                          leaf_tree=leaf_arrays["tree"])
    wts = g.wts
    if g.loss_labels is not None:
        wts = g.sample_weight[g.order]  # leaf models estimate from the points as given, not from the loss weights
    order = g.order
    g.node_table = g.leaf_table = None
    return _leaves_in_tree_order(GrownForest(forest, order, wts if g.weight_table else None, leaf_arrays["start"],
                                             leaf_arrays["end"]), tiled=True)


def _place_subtrees(sub: SubtreeNodes, roots: np.ndarray, f_tree: np.ndarray, first_id: int, first_leaf: int,
                    node_table: _Tables, leaf_table: _Tables, level: _LevelSplits, root_child: np.ndarray,
                    family: FeatureFamily) -> tuple[int, int]:
    """Write the nodes grown below `roots` (frontier indices) to the tables, taking node ids from `first_id` and
    leaf ids from `first_leaf`; record each root's own test in `level` and its left child's id in `root_child`.
    Returns the nodes and leaves written."""
    n_below = sub.used - 1
    node_first = first_id + np.cumsum(n_below) - n_below
    leaf_first = first_leaf + np.cumsum(sub.n_leaves) - sub.n_leaves
    n_nodes, n_leaves = int(n_below.sum()), int(sub.n_leaves.sum())
    nodes = node_table.reserve(first_id + n_nodes)
    leaves = leaf_table.reserve(first_leaf + n_leaves)
    sub.place(node_first, leaf_first, f_tree[roots].astype(np.int32), nodes["params"], nodes["thr_lo"],
              nodes["thr_hi"], nodes["child"], nodes["depth"], nodes["gain"], nodes["weight"], leaves["node"],
              leaves["tree"], leaves["start"], leaves["end"])
    split = np.flatnonzero(sub.used > 1)
    top = sub.cap_start[split]
    level.record(roots[split], np.ones(split.size, dtype=bool), np.zeros(split.size, dtype=np.int64),
                 family.row_params(sub.row[top]), sub.thr_lo[top], sub.thr_hi[top], sub.gain[top])
    root_child[roots[split]] = node_first[split]
    return n_nodes, n_leaves


def _leaves_in_tree_order(grown: GrownForest, tiled: bool = False) -> GrownForest:
    """Renumber leaves depth-first within each tree, trees one after another.

    Growth numbers leaves level by level across all trees, which scatters one tree's rows through every leaf-model
    table; in tree order, reading a tree's leaf models after `apply` stays within one region of memory. The order
    comes from the forest's preorder walk, which `apply`'s traversal table needs anyway (cached, and still valid
    after renumbering: the tree shapes do not change).

    `tiled`: the leaves' position ranges tile the order, tree after tree, a left child's before the right one's (as
    the trainer's in-place partitions leave them). Depth-first, each leaf then ends where the next one starts, and
    the renumbering needs no copies: on the 10 M leaves of a large regression fit, gathered copies were 160 MB at
    the fit's peak.
    """
    perm = renumber_leaves_depth_first(grown.forest)
    if not tiled:
        return GrownForest(grown.forest, grown.order, grown.position_weights, grown.leaf_start[perm],
                           grown.leaf_end[perm])
    start, end = grown.leaf_start, grown.leaf_end
    # the new starts, in the old ends' storage ("clip": numpy buffers `out` in its default mode, a copy of it all)
    np.take(start, perm, out=end, mode="clip")
    start[:] = end
    end[:-1] = start[1:]
    if end.size:
        end[-1] = grown.order.size
    return grown


def renumber_leaves_depth_first(forest: ForestArrays) -> np.ndarray:
    """Number the leaves of `forest` depth first within each tree, trees one after another (in place).

    Returns the permutation: new leaf id l was leaf ``perm[l]`` before, so per-leaf tables follow as
    ``table[perm]``.
    """
    nodes = forest.leaves_depth_first()
    perm = -forest.child[nodes] - 1  # their ids before, int32 as leaf ids are
    forest.child[nodes] = -np.arange(nodes.size, dtype=np.int32) - 1
    forest.leaf_node = nodes
    forest.leaf_tree = forest.leaf_tree[perm]
    return perm


def _segment_weight(wts: np.ndarray, seg_start: np.ndarray, seg_end: np.ndarray) -> np.ndarray:
    """(n_seg,) total weight of each segment of the order."""
    out = np.zeros(seg_start.shape[0])
    run_ranges(_segment_weight_range, seg_start.shape[0], wts, seg_start, seg_end, out)
    return out


@njit(cache=True, nogil=True)
def _segment_weight_range(s0, s1, wts, seg_start, seg_end, out):  # pragma: no cover - numba
    for s in range(s0, s1):
        acc = 0.0
        for m in range(seg_start[s], seg_end[s]):
            acc += wts[m]
        out[s] = acc


def _tie_broken_argmax(table: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Per row, the index of a best entry, chosen uniformly (by `u`) among entries tied for the best.

    Equally good splits (every threshold inside an empty gap, say) must be picked at random, not always the
    lowest: that is what makes forest posteriors ramp linearly across a gap (Criminisi et al. 2012, sec. 3.4).
    Rows without a finite entry give 0.
    """
    table = np.ascontiguousarray(table, dtype=np.float64)
    out = np.zeros(table.shape[0], dtype=np.int64)
    run_ranges(_tie_broken_argmax_range, table.shape[0], table, u, out)
    return out


@njit(cache=True, nogil=True)
def _tie_broken_argmax_range(r0, r1, table, u, out):  # pragma: no cover - numba
    width = table.shape[1]
    for r in range(r0, r1):
        best = -np.inf
        for j in range(width):
            best = max(best, table[r, j])
        floor = best - 1e-9 * abs(best)
        n_tied = 0
        for j in range(width):
            v = table[r, j]
            if v >= floor and np.isfinite(v):
                n_tied += 1
        if n_tied == 0:
            continue
        k = min(int(u[r] * n_tied), n_tied - 1)
        for j in range(width):
            v = table[r, j]
            if v >= floor and np.isfinite(v):
                if k == 0:
                    out[r] = j
                    break
                k -= 1


def _best_configuration(table: np.ndarray, thr: np.ndarray, choice: np.ndarray,
                        configs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Gain, candidate and the (lo, hi] band of each node's chosen (candidate, configuration).

    table : (n, rho, B) gains; thr : (n, rho, K) sorted thresholds; choice : (n,) flat index into rho x B.
    """
    n = table.shape[0]
    idx = np.arange(n)
    best_gain = table.reshape(n, -1)[idx, choice]
    best_c, best_g = np.divmod(choice, configs.shape[0])
    padded = np.concatenate([np.full((n, 1), -np.inf, np.float32), thr[idx, best_c],
                             np.full((n, 1), np.inf, np.float32)], axis=1)
    return best_gain, best_c, padded[idx, configs[best_g, 0]], padded[idx, configs[best_g, 1]]


def _per_set_range(lo: np.ndarray, hi: np.ndarray, sets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Response range over all nodes sharing a parameter set (a fern level), broadcast back to the nodes."""
    n_sets = int(sets.max()) + 1
    set_lo = np.full((n_sets, lo.shape[1]), np.inf, dtype=np.float32)
    set_hi = np.full((n_sets, lo.shape[1]), -np.inf, dtype=np.float32)
    np.minimum.at(set_lo, sets, lo)
    np.maximum.at(set_hi, sets, hi)
    return set_lo[sets], set_hi[sets]


def _fern_choice(flat: np.ndarray, node_w: np.ndarray, sets: np.ndarray) -> np.ndarray:
    """Per node, the index of its set's test maximising the weight-summed gain over the set's nodes."""
    contrib = np.where(np.isfinite(flat), flat, 0.0) * node_w[:, None]
    n_sets = int(sets.max()) + 1
    score = np.zeros((n_sets, flat.shape[1]))
    np.add.at(score, sets, contrib)
    return np.argmax(score, axis=1)[sets]
