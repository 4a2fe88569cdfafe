"""Votes grouped by leaf, and robust estimates from the leaves most certain about each output.

A regression forest's leaves store mean displacements from a point to the things it votes for (a box wall, an
object centre, a joint); every point that reaches a leaf casts one vote at its own position plus the leaf's
displacement. The leaves with the smallest displacement variance are the most reliable voters (Criminisi et al.
2012, sec. 4.5): `ranked_order` ranks them once per model, `ranked_medians` takes the votes of the reached leaves in
that order until enough are gathered and returns their median and robust spread.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from imageforest.kernels import njit
from imageforest.voting.selection import median_and_spread


@dataclass
class Votes:
    """An image's votes (n_points x T leaf ids) grouped by leaf.

    Attributes
    ----------
    uniq : (U,) distinct leaves reached;  counts : (U,) votes each received
    start : (U + 1,) int64, leaf u's votes are entries start[u]:start[u + 1] of `point`
    point : (n_points * T,) int64, the point (row of the leaf table) of every vote, leaf after leaf
    """

    uniq: np.ndarray
    counts: np.ndarray
    start: np.ndarray
    point: np.ndarray

    @classmethod
    def group(cls, leaves: np.ndarray) -> Votes:
        # One stable sort of the leaf ids groups the votes, each leaf's in vote order (np.unique would sort too).
        flat = np.ascontiguousarray(leaves).ravel()
        by_leaf = np.argsort(flat, kind="stable")
        ordered = flat[by_leaf]
        first = np.ones(ordered.size, dtype=bool)
        np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
        start = np.append(np.flatnonzero(first), ordered.size).astype(np.int64)
        return cls(ordered[start[:-1]], np.diff(start), start,
                   (by_leaf // max(leaves.shape[1], 1)).astype(np.int64))

    def slots(self, n_leaves: int) -> np.ndarray:
        """(n_leaves,) int64: each leaf's place in `uniq`, -1 for leaves no vote reached."""
        slot = np.full(n_leaves, -1, dtype=np.int64)
        slot[self.uniq] = np.arange(self.uniq.size)
        return slot


def ranked_order(variance: np.ndarray, voting: np.ndarray | None = None) -> np.ndarray:
    """(n_outputs, n_leaves) int64: per output, the leaves by increasing variance of that output's displacement
    (ties by leaf id). Leaves that must not vote (`voting` (n_leaves,) False, or an infinite variance) come last.

    Parameters
    ----------
    variance : (n_leaves, n_outputs) float16/32/64
        Per leaf, the variance of each output's displacement.

    Model files may store variances as float16: non-negative float16 values order as their 16-bit patterns, which
    numpy's stable sort orders by radix (seven outputs' leaves of a 35,000-leaf forest: 0.13 -> 0.016 s).
    """
    if voting is not None:
        variance = np.where(voting[:, None], variance, variance.dtype.type(np.inf))
    if variance.dtype == np.float16 and not (variance < 0).any():
        return np.ascontiguousarray(np.argsort(np.ascontiguousarray(variance).view(np.uint16), axis=0,
                                               kind="stable").T)
    return np.ascontiguousarray(np.argsort(variance, axis=0, kind="stable").T)


def ranked_medians(order: np.ndarray, mean: np.ndarray, votes: Votes, slot: np.ndarray, pos: np.ndarray,
                   axis: np.ndarray, keeps: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Each output voted by the leaves most certain about it.

    Parameters
    ----------
    order : (n_outputs, n_leaves) from `ranked_order`
    mean : (n_leaves, n_outputs) float64, per leaf the mean displacement (mm) from a point to each output
    votes, slot : the image's votes and `votes.slots(n_leaves)`
    pos : (n_points, n_axes) point positions (mm)
    axis : (n_outputs,) int, the column of `pos` each output's displacement is added to
    keeps : vote counts to keep per output; the reached leaves are taken in `order` until they hold that many
        votes (the last one whole). Fewer votes than asked for: all of them.

    Returns
    -------
    medians, spreads : (len(keeps), n_outputs) float64
        Per selection, the median vote (mm) and its robust spread (1.4826 MAD, mm); NaN where no leaf voted.
    """
    keeps = np.asarray(keeps, dtype=np.int64)
    most = int(keeps.max())
    capacity = most + int(votes.counts.max()) if votes.counts.size else most  # the last leaf is taken whole
    return _ranked_medians(np.ascontiguousarray(order, dtype=np.int64), np.ascontiguousarray(mean, dtype=np.float64),
                           votes.start, votes.point, slot, np.ascontiguousarray(pos, dtype=np.float64),
                           np.ascontiguousarray(axis, dtype=np.int64), keeps, most, capacity)


@njit(cache=True, nogil=True)  # callers vote several outputs at once on threads
def _ranked_medians(order, mean, start, vote_point, slot, pos, axis, keeps, most,
                    capacity):  # pragma: no cover - numba
    """Per output k, the votes of the reached leaves in `order[k]` until every selection s holds keeps[s] votes
    (its last leaf whole), and per selection their median and 1.4826 MAD: two (n_sel, n_outputs) arrays."""
    # A walk down the model's precomputed leaf order touches only the votes it keeps: no per-image sort. Plain
    # loops and the shared selection (no np.full, np.median, array max): see `imageforest.voting.selection`.
    n_sel = keeps.shape[0]
    n_out = order.shape[0]
    boxes = np.empty((n_sel, n_out))
    spreads = np.empty((n_sel, n_out))
    buf = np.empty(capacity)
    work = np.empty(capacity)
    ends = np.empty(n_sel, dtype=np.int64)
    for k in range(n_out):
        ax = axis[k]
        for s in range(n_sel):
            ends[s] = -1
        n = 0
        for r in range(order.shape[1]):
            leaf = order[k, r]
            u = slot[leaf]
            if u < 0:
                continue
            shift = mean[leaf, k]
            for v in range(start[u], start[u + 1]):
                buf[n] = pos[vote_point[v], ax] + shift
                n += 1
            for s in range(n_sel):
                if ends[s] < 0 and n >= keeps[s]:
                    ends[s] = n
            if n >= most:
                break
        for s in range(n_sel):
            end = ends[s] if ends[s] >= 0 else n
            if end == 0:
                boxes[s, k] = np.nan
                spreads[s, k] = np.nan
                continue
            for i in range(end):
                work[i] = buf[i]
            boxes[s, k], spreads[s, k] = median_and_spread(work, end)
    return boxes, spreads
