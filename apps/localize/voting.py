"""Wall votes: from the leaves a scan's voxels reached to robust box walls in mm (shared by both stages)."""

from __future__ import annotations

import numpy as np
from numba import njit

WALL_AXIS = np.array([0, 0, 1, 1, 2, 2])  # wall k of a box lies along physical axis WALL_AXIS[k]


def group_votes(leaves: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Group the votes (n_points, T) by leaf: the distinct leaves `uniq`, `inverse` mapping every vote
    (point-major) to its place in `uniq`, each leaf's `counts`, and each vote's `point` (row of `leaves`).
    A scan's few thousand distinct leaves are then ranked instead of its n_points x T votes."""
    uniq, inverse, counts = np.unique(leaves.ravel(), return_inverse=True, return_counts=True)
    point = np.arange(leaves.size) // leaves.shape[1]
    return uniq, inverse.ravel(), counts, point


def confident_walls(wall_var: np.ndarray, wall_mean: np.ndarray, inverse: np.ndarray, counts: np.ndarray,
                    point: np.ndarray, pos: np.ndarray, keeps: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Each wall voted by the leaves most certain about it.

    Parameters
    ----------
    wall_var, wall_mean : (n_uniq, 6)
        Per reached leaf, the variance (mm^2; inf for leaves that must not vote) and mean (mm) of the
        displacement from a voxel to each wall.
    inverse, counts, point : as returned by `group_votes`
    pos : (n_points, 3) voxel positions in mm (x, y, z)
    keeps : vote counts to keep per wall; leaves are taken in order of increasing variance until they hold
        that many votes (the last one whole).

    Returns
    -------
    boxes, spreads : (len(keeps), 6)
        Per selection, the median wall positions (mm) and their robust spread (1.4826 MAD, mm).
    """
    # The votes of each leaf, contiguous (leaf after leaf): a wall's selection then reads only the votes it keeps.
    by_leaf = np.argsort(inverse, kind="stable")
    start = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=start[1:])
    return _confident_walls(np.ascontiguousarray(wall_var, dtype=np.float64),
                            np.ascontiguousarray(wall_mean, dtype=np.float64), start,
                            np.ascontiguousarray(point[by_leaf], dtype=np.int64),
                            np.ascontiguousarray(pos, dtype=np.float64), np.asarray(keeps, dtype=np.int64))


@njit(cache=True)
def _confident_walls(wall_var, wall_mean, start, vote_point, pos, keeps):  # pragma: no cover - numba
    n_sel = keeps.shape[0]
    boxes = np.empty((n_sel, 6))
    spreads = np.empty((n_sel, 6))
    most = keeps.max()
    for k in range(6):
        axis = WALL_AXIS[k]
        order = np.argsort(wall_var[:, k], kind="mergesort")
        # votes of the leaves in confidence order until the largest selection is held (the last leaf whole)
        total = 0
        for u in order:
            total += start[u + 1] - start[u]
            if total >= most:
                break
        buf = np.empty(total)
        ends = np.full(n_sel, total)  # where each selection's prefix ends in buf
        n = 0
        for u in order:
            for v in range(start[u], start[u + 1]):
                buf[n] = pos[vote_point[v], axis] + wall_mean[u, k]
                n += 1
            for s in range(n_sel):
                if ends[s] == total and n >= keeps[s]:
                    ends[s] = n
            if n >= total:
                break
        for s in range(n_sel):
            votes = buf[:ends[s]]
            med = np.median(votes)
            boxes[s, k] = med
            spreads[s, k] = 1.4826 * np.median(np.abs(votes - med))
    return boxes, spreads
