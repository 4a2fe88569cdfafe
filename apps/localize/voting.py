"""Wall votes: from the leaves a scan's voxels reached to robust box walls in mm (shared by both stages)."""

from __future__ import annotations

import numpy as np

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
    boxes = np.empty((len(keeps), 6))
    spreads = np.empty((len(keeps), 6))
    rank = np.empty(wall_var.shape[0], dtype=np.int64)  # each leaf's place in this wall's confidence order
    for k in range(6):
        order = np.argsort(wall_var[:, k], kind="stable")
        rank[order] = np.arange(order.size)
        lasts = np.searchsorted(np.cumsum(counts[order]), keeps)
        # One pass over all votes gathers the largest selection; the others are its prefixes in leaf rank.
        chosen = np.flatnonzero(rank[inverse] <= lasts.max())
        chosen_rank = rank[inverse[chosen]]
        votes_k = pos[point[chosen], WALL_AXIS[k]] + wall_mean[inverse[chosen], k]
        for s, last in enumerate(lasts):
            votes = votes_k[chosen_rank <= last]
            boxes[s, k] = np.median(votes)
            spreads[s, k] = 1.4826 * np.median(np.abs(votes - boxes[s, k]))
    return boxes, spreads
