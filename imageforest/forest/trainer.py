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

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np

from imageforest.forest import subtree_growth
from imageforest.forest.features import FeatureFamily
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
    grow_weighted_class_subtrees,
    grow_weighted_one_target_subtrees,
)
from imageforest.forest.threads import run_ranges
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


def _grow_levels(family: FeatureFamily, data: Any, n_points: int, objective: Objective | NodeObjectives,
                 sample_weight: np.ndarray, settings: GrowthSettings, rng: np.random.Generator) -> GrownForest:
    """`grow_forest`'s levels."""
    choose = None
    if isinstance(objective, NodeObjectives):
        objectives, choose = list(objective.objectives), objective.choose
        if not objectives:
            raise ValueError("NodeObjectives needs at least one objective")
        if settings.structure == "fern":
            raise ValueError("a fern shares one test per level: it cannot choose an objective per node")
        objective = objectives[0]
    else:
        objectives = [objective]
    T = settings.n_trees
    rho = int(settings.n_candidates)
    K = settings.n_thresholds
    fern = settings.structure == "fern"
    max_depth = np.iinfo(np.int32).max if settings.max_depth is None else int(settings.max_depth)
    msl = int(settings.min_samples_leaf)
    configs = partition_configs(K, settings.two_sided) if K is not None else None
    crit, n_blocks, q, n_stats = objective.criterion, objective.n_blocks, objective.q, objective.n_stats
    labels, targets, reg = objective.labels, objective.targets, objective.reg
    lifted = objective.lifted

    order, wts, bounds = _initial_samples(n_points, sample_weight, settings, rng)
    given, data = data, family.training_data(data)
    loss_labels = None
    if settings.loss is not None:
        loss_gradient(settings.loss, np.zeros(1))  # an unknown loss fails before growth
        if settings.bootstrap:
            raise ValueError("a global loss re-weights points, not bootstrap copies: grow without bootstrap")
        labelled = [o for o in objectives if o.criterion <= GINI]
        if not labelled:
            raise ValueError("a global loss needs a classification objective (the margins are of class labels)")
        loss_labels, loss_classes = labelled[0].labels, labelled[0].n_classes
        growing_margins = GrowingMargins(loss_labels, loss_classes, n_points, T)
    rows_matrix, per_position, unit_weights = None, False, False
    if (fused_search_applies(K, settings.structure, settings.threshold_sampling) and lifted is None
            and choose is None):
        rows_matrix = family.response_matrix(data)
    if rows_matrix is not None:
        if wts is not None:
            # counts would compile the fused search's kernels a second time; this path never needed them
            wts = wts.astype(np.float64, copy=False)
        points_matrix = family.point_matrix(given)
        if points_matrix is None:
            points_matrix = np.ascontiguousarray(rows_matrix.T)
        del given
        # Labels and few targets travel with the order, so the fused search reads them sequentially; labels as int8
        # when they fit, and unit weights neither read nor moved (fewer bytes per candidate scan: 5-15% on deep
        # levels of the 200k x 50 benchmark).
        small = labels.size and labels.min() >= np.iinfo(np.int8).min and labels.max() <= np.iinfo(np.int8).max
        pos_labels = labels.astype(np.int8 if small else labels.dtype)[order] if labels.size else labels[:0]
        unit_weights = wts is None and loss_labels is None  # a global loss changes them per level
        per_position = targets.shape[1] <= GATHER_MAX_OUTPUTS
        pos_targets = targets[order] if per_position and targets.size else targets[:0]
        src_labels, src_targets = (pos_labels, pos_targets) if per_position else (labels, targets)

    # Unit weights are read by no kernel of the class and one-target paths (statistics, search, partition): there
    # a fit holds no table of ones (8 bytes per point and tree); other paths get one.
    weights_read = not (unit_weights and (crit <= GINI or (n_blocks == 1 and q == 1 and crit != MIXED
                                                           and n_stats == 3)))
    weight_table = wts is not None or weights_read
    if wts is None:
        wts = np.ones(order.size if weights_read else 0)

    # Small nodes grow depth-first to their leaves (`subtree_growth`): axis-aligned responses (rows of one matrix,
    # drawn as distinct rows, a node's parameter being its row) with class or one-target statistics and unit
    # weights (no bagging, sample weights or global loss).
    subtree_points = subtree_growth.SUBTREE_POINTS
    large = rows_matrix is not None and (points_matrix.nbytes >= subtree_growth.SUBTREE_MIN_BYTES
                                         or order.size >= subtree_growth.SUBTREE_MIN_POSITIONS)
    binned_subtrees = (large and per_position and subtree_points > 0 and family.sample_draws(rho) is not None
                       and K is not None and K >= 1 and (crit <= GINI or (n_blocks == 1 and q == 1 and crit != MIXED)))
    subtrees = binned_subtrees and unit_weights
    # ... or with weights (bagging's counts, sample weights) but a global loss's, in kernels of their own
    weighted_subtrees = binned_subtrees and not unit_weights and loss_labels is None
    # ... and with every threshold searched (random-forest settings): axis-aligned responses read from the
    # feature-major matrix, class or one-target squared-error statistics, any weights but a global loss's (which
    # change level by level). Small fits too: sorting keeps a level-wise fit's per-level costs however small the
    # matrix (digits, 1,797 x 64 with 100 trees: 0.23 s level-wise, 0.11 s depth-first).
    sorted_matrix, sorted_points = None, subtree_growth.SORTED_SUBTREE_POINTS
    if (K is None and not fern and lifted is None and choose is None and loss_labels is None and sorted_points > 0
            and sorted_search_applies(crit, n_blocks, q) and family.sample_draws(rho) is not None):
        sorted_matrix = family.response_matrix(data)
        if sorted_matrix is not None and not (sorted_matrix.dtype == np.float32 and sorted_matrix.flags.c_contiguous):
            sorted_matrix = None

    # Frontier: node ids are contiguous per level, and ordered by tree.
    f_start = bounds[:-1].copy()
    f_end = bounds[1:].copy()
    f_tree = np.arange(T, dtype=np.int64)
    level_first_id = 0
    next_id = T
    depth = 0
    leaf_count = 0
    # A tree of m positions has at most 2m - 1 nodes and m leaves (children are never empty).
    node_table = _Tables(2 * order.size + T, params=(np.float64, family.param_width), thr_lo=np.float32,
                         thr_hi=np.float32, child=np.int32, depth=np.int32, gain=np.float32, weight=np.float64)
    leaf_table = _Tables(order.size + T, node=np.int32, tree=np.int32, start=np.int64, end=np.int64)

    while f_start.size:
        n_front = f_start.size
        if loss_labels is not None and depth > 0:
            # Alternating decision forests: the forest grown so far weighs the points for the next level.
            done = leaf_table.head(leaf_count)
            margin = growing_margins.margins(order, sample_weight, done["start"], done["end"], f_start, f_end,
                                             f_tree)
            grad = loss_gradient(settings.loss, margin)
            wts = loss_weights(order, sample_weight, grad / max(float(np.mean(grad)), 1e-300))
        crit, n_blocks, q, n_stats = objective.criterion, objective.n_blocks, objective.q, objective.n_stats
        labels, targets, reg, lifted = objective.labels, objective.targets, objective.reg, objective.lifted
        if rows_matrix is not None and per_position and unit_weights and crit <= GINI:
            stats, counts = segment_class_counts(pos_labels, f_start, f_end, n_stats)
        elif (rows_matrix is not None and per_position and unit_weights and n_blocks == 1 and q == 1
              and crit != MIXED and n_stats == 3):
            stats, counts = segment_one_target_stats(pos_targets, f_start, f_end)
        elif rows_matrix is not None and per_position:
            stats, counts = segment_stats(order, wts, f_start, f_end, crit, pos_labels, pos_targets, n_blocks, q,
                                          n_stats, True)
        else:
            stats, counts = segment_stats(order, wts, f_start, f_end, crit, labels, targets, n_blocks, q, n_stats)
        node_w = counts.astype(np.float64) if unit_weights else _segment_weight(wts, f_start, f_end)
        pure_by = [_node_purity(stats, counts, crit, n_blocks, q)]
        for other in objectives[1:]:  # pure only when pure for every objective a node might choose
            o_stats, _ = segment_stats(order, wts, f_start, f_end, other.criterion, other.labels, other.targets,
                                       other.n_blocks, other.q, other.n_stats)
            pure_by.append(_node_purity(o_stats, counts, other.criterion, other.n_blocks, other.q))
        pure = np.logical_and.reduce(pure_by)
        can_split = ((counts >= settings.min_samples_split) & (counts >= 2 * msl) & ~pure & (node_w > 0)
                     & (depth < max_depth))

        level = _LevelSplits.empty(n_front, family.param_width)
        # Nodes grown depth-first take the ids after this level's; the next level's nodes follow them.
        placed = 0
        root_child = np.full(n_front, -1, dtype=np.int64)
        if subtrees or weighted_subtrees or sorted_matrix is not None:
            roots = np.flatnonzero(can_split & (counts <= (sorted_points if sorted_matrix is not None
                                                           else subtree_points)))
            if roots.size:
                can_split[roots] = False
                seeds = rng.integers(0, np.iinfo(np.int64).max, size=roots.size).astype(np.uint64)
                for a, b in _chunks(counts[roots], 1, None, budget=SUBTREE_POSITIONS):
                    chunk = roots[a:b]
                    if subtrees:
                        sub = grow_subtrees(f_start[chunk], f_end[chunk], depth, seeds[a:b], points_matrix, order,
                                            pos_labels, pos_targets, crit <= GINI, n_stats, crit == GINI,
                                            crit == SQUARED_ERROR, float(reg[0]) if np.size(reg) else 0.0, rho, K,
                                            configs, settings.min_samples_split, msl, settings.min_gain, max_depth)
                    elif weighted_subtrees and crit <= GINI:
                        sub = grow_weighted_class_subtrees(f_start[chunk], f_end[chunk], depth, seeds[a:b],
                                                           points_matrix, order, wts, pos_labels, n_stats,
                                                           crit == GINI, rho, K, configs, settings.min_samples_split,
                                                           msl, settings.min_gain, max_depth)
                    elif weighted_subtrees:
                        sub = grow_weighted_one_target_subtrees(
                            f_start[chunk], f_end[chunk], depth, seeds[a:b], points_matrix, order, wts, pos_targets,
                            crit == SQUARED_ERROR, float(reg[0]) if np.size(reg) else 0.0, rho, K, configs,
                            settings.min_samples_split, msl, settings.min_gain, max_depth)
                    else:
                        sub = grow_sorted_subtrees(f_start[chunk], f_end[chunk], depth, seeds[a:b], sorted_matrix,
                                                   order, wts, labels, targets, crit, n_stats, rho,
                                                   settings.min_samples_split, msl, settings.min_gain, max_depth)
                    n_sub, n_sub_leaves = _place_subtrees(sub, chunk, f_tree, next_id + placed, leaf_count,
                                                          node_table, leaf_table, level, root_child, family)
                    placed += n_sub
                    leaf_count += n_sub_leaves
        finished = root_child >= 0

        sp = np.flatnonzero(can_split)
        if sp.size:
            if fern:
                # One test per tree and level: candidates drawn per tree, shared by the tree's nodes.
                trees_here, node_set = np.unique(f_tree[sp], return_inverse=True)
                n_sets, lazy = trees_here.size, False
            else:
                node_set = np.arange(sp.size)
                # drawn chunk by chunk where chunks take the nodes in order
                n_sets, lazy = sp.size, choose is None
            # with a response matrix, only the rows are drawn: the parameter rows of the chosen ones follow
            draw = family.sample_rows if rows_matrix is not None else family.sample
            cand = LevelRows(rng, n_sets, lambda g, n, draw=draw: draw(g, n, rho),
                             family.sample_draws(rho) if lazy else None)
            u = None
            if K is not None:
                u = LevelRows(rng, n_sets, lambda g, n: g.random((n, rho, K)), rho * K if lazy else None)
            tie_u = rng.random(sp.size)
            sp_counts = counts[sp]
            breaks = None
            if fern:
                breaks = np.ones(sp.size, dtype=bool)
                breaks[1:] = node_set[1:] != node_set[:-1]
            if rows_matrix is not None:
                # Responses are rows of one matrix: search in one fused pass (no response table), a bounded number
                # of (node, candidate) pairs at a time: a deep level's tables would take gigabytes of fresh memory.
                step = max(1, FUSED_PAIRS // rho)
                for a in range(0, sp.size, step):
                    sets = np.arange(a, min(a + step, sp.size))
                    nodes = sp[sets]
                    rows = cand.rows(sets)
                    table, thr = row_gain_table(rows_matrix, points_matrix, rows, u.rows(sets), order, wts,
                                                unit_weights, f_start[nodes], f_end[nodes], configs, crit, src_labels,
                                                src_targets, per_position, n_blocks, q, n_stats, reg, msl)
                    idx = np.arange(sets.size)
                    choice = _tie_broken_argmax(table.reshape(sets.size, -1), tie_u[sets])
                    best_gain, best_c, lo_b, hi_b = _best_configuration(table, thr, choice, configs)
                    ok = np.isfinite(best_gain) & (best_gain >= settings.min_gain)
                    nl = partition_by_row(order, wts, not unit_weights, pos_labels, pos_targets, f_start[nodes],
                                          f_end[nodes], rows_matrix, points_matrix, rows[idx, best_c], lo_b, hi_b, ok)
                    level.record(nodes, ok, nl, family.row_params(rows[idx, best_c]), lo_b, hi_b, best_gain)
            else:
                which = None if choose is None else np.asarray(choose(depth, sp.size, rng), dtype=np.int64)
                if which is not None and (which.shape != (sp.size,) or which.min() < 0
                                          or which.max() >= len(objectives)):
                    raise ValueError("NodeObjectives.choose must give one objective index per node")
                if which is not None and len(objectives) > 1:
                    # a node pure for its chosen objective has nothing to gain there: it takes the first other one
                    purity = np.stack(pure_by)[:, sp]
                    stuck = purity[which, np.arange(sp.size)]
                    which[stuck] = np.argmin(purity[:, stuck], axis=0)
                for g, obj in enumerate(objectives):
                    group = np.arange(sp.size) if which is None else np.flatnonzero(which == g)
                    crit, n_blocks, q, n_stats = obj.criterion, obj.n_blocks, obj.q, obj.n_stats
                    labels, targets, reg, lifted = obj.labels, obj.targets, obj.reg, obj.lifted
                    # per pair: K float64 uniforms, K float32 thresholds, B ~ K float64 gains, a float32 range
                    per_pair = 5 * K + 2 if K is not None else 4
                    for a, b in _chunks(sp_counts[group], rho, breaks if which is None else None, per_pair,
                                        min(RESPONSE_BUDGET, CHUNK_POSITIONS * rho)):
                        sel = group[a:b]
                        nodes = sp[sel]
                        idx = np.arange(b - a)
                        c_counts = sp_counts[sel]
                        seg_end = np.cumsum(c_counts)
                        seg_start = seg_end - c_counts
                        m_total = int(seg_end[-1]) if seg_end.size else 0
                        positions = np.repeat(f_start[nodes] - seg_start, c_counts) + np.arange(m_total)
                        samples = order[positions]
                        pos_node = np.repeat(np.arange(b - a, dtype=np.int32), c_counts)
                        sets = node_set[sel]
                        node_params = cand.rows(sets)
                        resp = family.responses(data, node_params, samples, pos_node)
                        w_pos = wts[positions].astype(np.float64, copy=False)  # the search kernels' one dtype
                        # Gathering targets once per chunk turns every candidate's scan into sequential reads.
                        if targets.shape[1] <= GATHER_MAX_OUTPUTS:
                            lab_c = labels[samples] if labels.size else labels
                            tgt_c = targets[samples] if targets.size else targets
                            rows = np.arange(m_total, dtype=np.int32)
                        else:
                            lab_c, tgt_c, rows = labels, targets, samples
                        if K is not None:
                            if settings.threshold_sampling == "data" and not fern:
                                # Responses of K random points of the node: thresholds follow the data's density
                                # (where a uniform draw over [min, max] would mostly land between clusters, e.g.
                                # air and tissue).
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
                                table = lifted_gain_table(resp, seg_start, seg_end, samples, w_pos, thr, configs, crit,
                                                          lifted, n_blocks, q, n_stats, reg, msl)
                            else:
                                table = binned_gain_table(resp, seg_start, seg_end, rows, w_pos, thr, configs, crit,
                                                          lab_c, tgt_c, n_blocks, q, n_stats, reg, msl)
                            flat = table.reshape(b - a, -1)
                            if fern:
                                choice = _fern_choice(flat, node_w[nodes], sets)
                            else:
                                choice = _tie_broken_argmax(flat, tie_u[sel])
                            best_gain, best_c, lo_b, hi_b = _best_configuration(table, thr, choice, configs)
                        else:
                            if lifted is None and sorted_search_applies(crit, n_blocks, q):
                                g_tab, t_tab = exhaustive_best_sorted(resp, seg_start, seg_end, rows, w_pos, crit,
                                                                      lab_c, tgt_c, n_stats, msl)
                            else:
                                g_tab, t_tab = exhaustive_best(resp, seg_start, seg_end, rows, w_pos, crit, lab_c,
                                                               tgt_c, n_blocks, q, n_stats, reg, msl)
                            best_c = _tie_broken_argmax(g_tab, tie_u[sel])
                            best_gain = g_tab[idx, best_c]
                            lo_b = np.full(b - a, -np.inf, dtype=np.float32)
                            hi_b = t_tab[idx, best_c]
                        ok = np.isfinite(best_gain) & (best_gain >= settings.min_gain)
                        nl = partition_segments(order, wts, f_start[nodes], resp, seg_start, seg_end,
                                                best_c.astype(np.int64), lo_b, hi_b, ok)
                        level.record(nodes, ok, nl, node_params[idx, best_c], lo_b, hi_b, best_gain)
                        # the next chunk's tables are built while these would still be referenced
                        del resp, positions, samples, pos_node, w_pos, lab_c, tgt_c, rows

        # Children of split nodes get consecutive ids (left, right); every other node becomes a leaf.
        child = np.empty(n_front, dtype=np.int32)
        split_idx = np.flatnonzero(level.split & ~finished)
        next_id += placed
        child[split_idx] = next_id + 2 * np.arange(split_idx.size)
        child[finished] = root_child[finished]
        leaf_idx = np.flatnonzero(~level.split)
        child[leaf_idx] = -(leaf_count + np.arange(leaf_idx.size)) - 1
        leaf_table.put(leaf_count, node=level_first_id + leaf_idx, tree=f_tree[leaf_idx], start=f_start[leaf_idx],
                       end=f_end[leaf_idx])
        leaf_count += leaf_idx.size
        node_table.put(level_first_id, params=level.params, thr_lo=level.thr_lo, thr_hi=level.thr_hi, child=child,
                       depth=depth, gain=level.gain, weight=node_w)

        mid = f_start[split_idx] + level.n_left[split_idx]
        new_start = np.empty(2 * split_idx.size, dtype=np.int64)
        new_end = np.empty(2 * split_idx.size, dtype=np.int64)
        new_start[0::2], new_end[0::2] = f_start[split_idx], mid
        new_start[1::2], new_end[1::2] = mid, f_end[split_idx]
        f_tree = np.repeat(f_tree[split_idx], 2)
        f_start, f_end = new_start, new_end
        level_first_id = next_id
        next_id += 2 * split_idx.size
        depth += 1

    # The training matrix and the per-position copies are done with: free them before the leaves are renumbered.
    data = rows_matrix = points_matrix = sorted_matrix = pos_labels = pos_targets = src_labels = src_targets = None
    n_nodes = level_first_id  # the last level split nothing: every id below this is a node
    node_arrays = node_table.head(n_nodes)
    leaf_arrays = leaf_table.head(leaf_count)
    forest = ForestArrays(**node_arrays, tree_root=np.arange(T, dtype=np.int32), leaf_node=leaf_arrays["node"],
                          leaf_tree=leaf_arrays["tree"])
    if loss_labels is not None:
        wts = sample_weight[order]  # leaf models estimate from the points as given, not from the loss weights
    return _leaves_in_tree_order(GrownForest(forest, order, wts if weight_table else None, leaf_arrays["start"],
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


class LevelRows:
    """A level's random table, n_rows rows of `draw(generator, n)`, as one ``draw(rng, n_rows)`` call makes it.

    With `row_draws` (the 64-bit draws one row takes; None when `draw` cannot be split into pieces) and a PCG64
    generator (numpy's default, which can jump ahead), rows are drawn as chunks ask for them and forgotten once a chunk
    starting further on asks; `rng` itself jumps past the whole table at once, so that later draws, and the model
    bytes, are those of the single call. Chunks must then ask for non-decreasing rows. A deep level of a large fit
    has hundreds of thousands of nodes: its candidates' and thresholds' tables would take gigabytes.
    """

    def __init__(self, rng: np.random.Generator, n_rows: int, draw, row_draws: int | None) -> None:
        self.n_rows, self._draw = n_rows, draw
        bits = rng.bit_generator
        # PCG64's jump counts 64-bit outputs, one per float64 uniform (Philox's counts blocks of four)
        if row_draws is not None and isinstance(bits, (np.random.PCG64, np.random.PCG64DXSM)):
            self._source = np.random.Generator(copy.deepcopy(bits))
            self._row_draws = int(row_draws)
            bits.advance(n_rows * self._row_draws)
            self._table = None
        else:
            self._source = None
            self._table = draw(rng, n_rows)
        self._first = 0  # row index of _rows[0]
        self._rows = None

    def whole(self) -> np.ndarray:
        """The whole table (when lazy, only before any `rows` call)."""
        if self._table is None:
            if self._rows is not None:
                raise RuntimeError("LevelRows.whole after rows")
            self._table = self._draw(self._source, self.n_rows)
        return self._table

    def rows(self, sets: np.ndarray) -> np.ndarray:
        """Rows `sets`, non-decreasing from one call to the next when lazy."""
        if self._table is not None:
            return self._table[sets]
        first, stop = int(sets[0]), int(sets[-1]) + 1
        if first < self._first:
            raise RuntimeError("LevelRows asked out of order")
        have = self._first if self._rows is None else self._first + self._rows.shape[0]
        keep = None if self._rows is None or first >= have else self._rows[first - self._first:]
        if first > have:  # rows nobody asks for still advance the source
            self._source.bit_generator.advance((first - have) * self._row_draws)
            have = first
        if stop > have:
            fresh = self._draw(self._source, stop - have)
            keep = fresh if keep is None else np.concatenate([keep, fresh])
        self._first, self._rows = first, keep
        return self._rows[sets - first]


class _Tables:
    """Named columns written level by level at known offsets, read back as their first n rows.

    Allocated once at an upper bound of the forest's size: pages a fit never writes are never touched, and the
    final arrays are views, not a concatenation of per-level pieces (on millions of nodes, writing every array
    twice cost about 0.5 s, mostly first-touch page faults). Columns grow by doubling should the bound be passed.
    """

    def __init__(self, capacity: int, **columns: Any) -> None:
        self.columns: dict[str, np.ndarray] = {}
        for name, spec in columns.items():
            dtype, width = spec if isinstance(spec, tuple) else (spec, None)
            shape = (capacity,) if width is None else (capacity, width)
            self.columns[name] = np.empty(shape, dtype=dtype)

    def put(self, offset: int, **values: Any) -> None:
        """Write each column's rows offset.. from `values` (arrays, or a scalar for the whole slice)."""
        n = max(np.shape(v)[0] for v in values.values() if np.ndim(v))
        for name, column in self.reserve(offset + n).items():
            column[offset:offset + n] = values[name]

    def head(self, n: int) -> dict[str, np.ndarray]:
        return {name: column[:n] for name, column in self.columns.items()}

    def reserve(self, n: int) -> dict[str, np.ndarray]:
        """The columns, grown (by doubling) to hold at least n rows, for a kernel to write in place."""
        for name, column in self.columns.items():
            if n > column.shape[0]:
                grown = np.empty((max(2 * column.shape[0], n), *column.shape[1:]), dtype=column.dtype)
                grown[:column.shape[0]] = column
                self.columns[name] = grown
        return self.columns


@dataclass
class _LevelSplits:
    """The tests chosen for one level's nodes (n_front of them): whether each splits, how many of its points
    go left, the weak learner's parameter row, the thresholds of the test thr_lo < f <= thr_hi and the gain."""

    split: np.ndarray
    n_left: np.ndarray
    params: np.ndarray
    thr_lo: np.ndarray
    thr_hi: np.ndarray
    gain: np.ndarray

    @classmethod
    def empty(cls, n_front: int, param_width: int) -> _LevelSplits:
        return cls(np.zeros(n_front, dtype=bool), np.zeros(n_front, dtype=np.int64),
                   np.zeros((n_front, param_width)), np.full(n_front, -np.inf, dtype=np.float32),
                   np.full(n_front, np.inf, dtype=np.float32), np.zeros(n_front, dtype=np.float32))

    def record(self, nodes: np.ndarray, ok: np.ndarray, n_left: np.ndarray, params: np.ndarray, lo: np.ndarray,
               hi: np.ndarray, gain: np.ndarray) -> None:
        """Store the best test of each of `nodes`; nodes where `ok` is False stay leaves."""
        self.split[nodes] = ok
        self.n_left[nodes] = n_left
        self.params[nodes] = np.where(ok[:, None], params, 0.0)
        self.thr_lo[nodes] = np.where(ok, lo, -np.inf)
        self.thr_hi[nodes] = np.where(ok, hi, np.inf)
        self.gain[nodes] = np.where(ok, gain, 0.0)


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
