"""Wall votes: from the leaves a scan's voxels reached to robust box walls in mm (shared by both stages)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

WALL_AXIS = np.array([0, 0, 1, 1, 2, 2])  # wall k of a box lies along physical axis WALL_AXIS[k]


@dataclass
class Votes:
    """A scan's votes (n_points x T leaf ids) grouped by leaf.

    Attributes
    ----------
    uniq : (U,) distinct leaves reached;  counts : (U,) votes each received
    start : (U + 1,) int64, leaf u's votes are entries start[u]:start[u + 1] of `point`
    point : (n_points * T,) int64, the voxel (row of the leaf table) of every vote, leaf after leaf
    """

    uniq: np.ndarray
    counts: np.ndarray
    start: np.ndarray
    point: np.ndarray

    @classmethod
    def group(cls, leaves: np.ndarray) -> Votes:
        uniq, inverse, counts = np.unique(leaves.ravel(), return_inverse=True, return_counts=True)
        by_leaf = np.argsort(inverse.ravel(), kind="stable")
        start = np.zeros(counts.size + 1, dtype=np.int64)
        np.cumsum(counts, out=start[1:])
        return cls(uniq, counts, start, (by_leaf // leaves.shape[1]).astype(np.int64))

    def slots(self, n_leaves: int) -> np.ndarray:
        """(n_leaves,) int64: each leaf's place in `uniq`, -1 for leaves no vote reached."""
        slot = np.full(n_leaves, -1, dtype=np.int64)
        slot[self.uniq] = np.arange(self.uniq.size)
        return slot


def wall_order(wall_var: np.ndarray, voting: np.ndarray | None = None) -> np.ndarray:
    """(6, n_leaves) int64: per wall, the leaves by increasing variance of that wall's displacement (ties by
    leaf id). Leaves that must not vote (`voting` (n_leaves,) False, or an infinite variance) come last.

    Model files store variances as float16: non-negative float16 values order as their 16-bit patterns, which
    numpy's stable sort orders by radix (the default model's 7 organs at load: 0.13 -> 0.016 s).
    """
    if voting is not None:
        wall_var = np.where(voting[:, None], wall_var, wall_var.dtype.type(np.inf))
    if wall_var.dtype == np.float16 and not (wall_var < 0).any():
        return np.ascontiguousarray(np.argsort(np.ascontiguousarray(wall_var).view(np.uint16), axis=0,
                                               kind="stable").T)
    return np.ascontiguousarray(np.argsort(wall_var, axis=0, kind="stable").T)


def confident_walls(order: np.ndarray, wall_mean: np.ndarray, votes: Votes, slot: np.ndarray, pos: np.ndarray,
                    keeps: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Each wall voted by the leaves most certain about it.

    Parameters
    ----------
    order : (6, n_leaves) from `wall_order`
    wall_mean : (n_leaves, 6) float64, per leaf the mean displacement (mm) from a voxel to each wall
    votes, slot : the scan's votes and `votes.slots(n_leaves)`
    pos : (n_points, 3) voxel positions in mm (x, y, z)
    keeps : vote counts to keep per wall; the reached leaves are taken in `order` until they hold that many
        votes (the last one whole). The caller keeps no more votes than valid leaves hold.

    Returns
    -------
    boxes, spreads : (len(keeps), 6)
        Per selection, the median wall positions (mm) and their robust spread (1.4826 MAD, mm).
    """
    keeps = np.asarray(keeps, dtype=np.int64)
    capacity = int(keeps.max() + votes.counts.max())  # the last leaf is taken whole
    buf, ends = _gather_walls(order, wall_mean, votes.start, votes.point, slot,
                              np.ascontiguousarray(pos, dtype=np.float64), keeps, capacity)
    boxes = np.empty((keeps.size, 6))
    spreads = np.empty((keeps.size, 6))
    # medians in numpy: numba's would compile for seconds on the command line's first run
    for k in range(6):
        for s, end in enumerate(ends[k]):
            v = buf[k, :end]
            boxes[s, k] = np.median(v)
            spreads[s, k] = 1.4826 * np.median(np.abs(v - boxes[s, k]))
    return boxes, spreads


@njit(cache=True)
def _gather_walls(order, wall_mean, start, vote_point, slot, pos, keeps, capacity):  # pragma: no cover - numba
    """Per wall k, the votes of the reached leaves in `order[k]` until every selection is held: buf[k, :n] and,
    per selection s, the vote count ends[k, s] at which it is held (its last leaf whole)."""
    # A walk down the model's precomputed leaf order touches only the votes it keeps: no per-scan sort.
    n_sel = keeps.shape[0]
    most = keeps.max()
    buf = np.empty((6, capacity))
    ends = np.full((6, n_sel), -1, dtype=np.int64)
    for k in range(6):
        axis = WALL_AXIS[k]
        n = 0
        for leaf in order[k]:
            u = slot[leaf]
            if u < 0:
                continue
            shift = wall_mean[leaf, k]
            for v in range(start[u], start[u + 1]):
                buf[k, n] = pos[vote_point[v], axis] + shift
                n += 1
            for s in range(n_sel):
                if ends[k, s] < 0 and n >= keeps[s]:
                    ends[k, s] = n
            if n >= most:
                break
        for s in range(n_sel):
            if ends[k, s] < 0:  # fewer votes than asked for: all of them
                ends[k, s] = n
    return buf, ends
