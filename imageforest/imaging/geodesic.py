"""Geodesic distance transforms on images: distance from seed pixels along paths that avoid crossing edges.

The length of a step between neighbouring voxels p, q is sqrt(|p - q|^2 + gamma^2 |I(p) - I(q)|^2) (spatial
distance in mm, I a possibly multi-channel intensity), so a path that stays inside one region is short and a path
that crosses a strong edge is long. Computed by raster scans over the 26-neighbourhood (8 in 2-D), forward and
backward, a fixed number of times: the approach of Criminisi, Sharp and Blake, "GeoS: Geodesic image
segmentation", ECCV 2008, and Toivanen, "New geodesic distance transforms for gray-scale images", 1996. Two
passes reach paths that turn back once per axis; more passes converge to the exact distance.
"""

from __future__ import annotations

import numpy as np

from imageforest.exceptions import InvalidInputError
from imageforest.forest.threads import n_threads, run_ranges
from imageforest.kernels import njit

# Half of the 26-neighbourhood: the neighbours a forward raster scan has already visited (dz, dy, dx).
_HALF = np.array([(dz, dy, dx) for dz in (-1, 0) for dy in (-1, 0, 1) for dx in (-1, 0, 1)
                  if (dz, dy, dx) < (0, 0, 0)], dtype=np.int64)


def geodesic_distances(intensity: np.ndarray, seed_labels: np.ndarray, n_labels: int, spacing=None,
                       gamma: float = 1.0, passes: int = 2, start: np.ndarray | None = None) -> np.ndarray:
    """Geodesic distance of every voxel from the nearest seed of each label, all labels in one sweep.

    The step costs are shared by every label, so K labels cost little more than one.

    Parameters
    ----------
    intensity : (z, y, x, c) or (y, x, c) float
    seed_labels : (z, y, x) or (y, x) int, k in 0..n_labels-1 where the voxel seeds label k, -1 elsewhere
    n_labels : K
    spacing, gamma, passes : as for `geodesic_distance`
    start : None, or (z, y, x, K) / (y, x, K) distances already known (lengths of real paths, such as this
        function's answer for some of the seeds): the scans start from them instead of +inf, so seeds added to a
        label cost one sweep that only lowers what they reach, and the answer is never longer than a sweep from
        all the seeds alone

    Returns
    -------
    (z, y, x, K) or (y, x, K) float32; +inf for a label without seeds (or without a finite start)
    """
    labels = np.asarray(seed_labels)
    feat, _, sp, planar = _checked(intensity, labels, spacing)
    grid = labels.reshape(feat.shape[:3])
    if start is not None:
        start = np.asarray(start, dtype=np.float32)
        if start.size != grid.size * int(n_labels):
            raise InvalidInputError(f"start distances must have the seeds' shape plus {n_labels} labels")
        start = start.reshape(*grid.shape, int(n_labels))
    half = _HALF[_HALF[:, 0] == 0] if feat.shape[0] == 1 else _HALF
    # labels split into one group per thread, each group in its own array (threads never share a cache line)
    groups = [g for g in np.array_split(np.arange(int(n_labels)), min(n_threads(), int(n_labels))) if g.size]
    parts = []
    for group in groups:
        if start is None:
            part = np.full((*grid.shape, group.size), np.inf, dtype=np.float32)
        else:
            part = np.ascontiguousarray(start[..., group])
        for j, k in enumerate(group):
            part[..., j][grid == k] = 0.0
        parts.append(part)
    run_ranges(_groups_range, len(parts), feat, parts, half, sp, float(gamma) ** 2, int(passes))
    dist = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=-1)
    return dist[0] if planar else dist


def _groups_range(g0: int, g1: int, feat, parts, half, spacing, gamma2, passes) -> None:
    for g in range(g0, g1):
        _raster_scans(feat, parts[g], half, spacing, gamma2, passes)


def _checked(intensity, seeds, spacing) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """(z, y, x, c) float32 intensities, (z, y, x) seeds, (z, y, x) spacing, and whether the input was planar."""
    feat = np.asarray(intensity, dtype=np.float32)
    mask = np.asarray(seeds)
    planar = mask.ndim == 2
    if feat.ndim != mask.ndim + 1 or feat.shape[:-1] != mask.shape or mask.ndim not in (2, 3):
        raise InvalidInputError(f"intensity {feat.shape} must be the seeds' shape {mask.shape} plus channels")
    if planar:
        feat, mask = feat[None], mask[None]
    sp = np.ones(3) if spacing is None else np.asarray(spacing, dtype=np.float64)
    if planar and spacing is not None:
        sp = np.r_[1.0, sp]
    if sp.shape != (3,) or not np.all(sp > 0):
        raise InvalidInputError(f"spacing must be positive, one value per axis, got {spacing!r}")
    return np.ascontiguousarray(feat), mask, sp, planar


def geodesic_distance(intensity: np.ndarray, seeds: np.ndarray, spacing=None, gamma: float = 1.0,
                      passes: int = 2) -> np.ndarray:
    """Geodesic distance of every voxel from the nearest seed.

    Parameters
    ----------
    intensity : (z, y, x, c) or (y, x, c) float
        Per-voxel features the path length charges for changing (e.g. L*a*b* colour, scaled intensity).
    seeds : (z, y, x) or (y, x) bool
        Where the distance is 0. No seed gives +inf everywhere.
    spacing : (z, y, x) or (y, x) mm per voxel; None: 1
    gamma : weight of intensity change against spatial distance (0: Euclidean distance along the grid)
    passes : forward-backward raster-scan pairs

    Returns
    -------
    (z, y, x) or (y, x) float64 (computed in float32)
    """
    mask = np.asarray(seeds, dtype=bool)
    dist = geodesic_distances(intensity, np.where(mask, 0, -1), 1, spacing, gamma, passes)[..., 0]
    return dist.astype(np.float64)


@njit(cache=True, nogil=True)
def _raster_scans(feat, dist, half, spacing, gamma2, passes):  # pragma: no cover - numba
    """Forward and backward raster scans, `passes` times, over dist (z, y, x, K): K labels at once, each step's
    cost computed once for all of them. A voxel takes, per label, the smallest distance a visited neighbour offers
    plus the step's cost (forward: neighbours at -offset; backward: at +offset)."""
    nz, ny, nx, nc = feat.shape
    n_lab = dist.shape[3]
    f = feat.reshape(nz * ny * nx, nc)
    d = dist.reshape(nz * ny * nx, n_lab)
    n_off = half.shape[0]
    step2 = np.empty(n_off)
    step = np.empty(n_off)
    lin = np.empty(n_off, dtype=np.int64)
    z_margin = 0
    for k in range(n_off):
        step2[k] = ((half[k, 0] * spacing[0]) ** 2 + (half[k, 1] * spacing[1]) ** 2
                    + (half[k, 2] * spacing[2]) ** 2)
        step[k] = np.sqrt(step2[k])
        lin[k] = (half[k, 0] * ny + half[k, 1]) * nx + half[k, 2]
        if half[k, 0] != 0:
            z_margin = 1
    off = np.empty(n_off, dtype=np.int64)
    nbr = np.empty(n_off, dtype=np.int64)  # a voxel's neighbours' flat indices, -1 off the grid
    for _ in range(passes):
        for sign in (1, -1):
            for k in range(n_off):
                off[k] = sign * lin[k]
            z0, z1 = (0, nz) if sign == 1 else (nz - 1, -1)
            y0, y1 = (0, ny) if sign == 1 else (ny - 1, -1)
            x0, x1 = (0, nx) if sign == 1 else (nx - 1, -1)
            for z in range(z0, z1, sign):
                z_inside = z_margin <= z < nz - z_margin
                for y in range(y0, y1, sign):
                    row_inside = z_inside and 1 <= y < ny - 1
                    for x in range(x0, x1, sign):
                        i = (z * ny + y) * nx + x
                        # voxels off the border read their neighbours at fixed flat offsets; the border checks
                        if row_inside and 1 <= x < nx - 1:
                            for k in range(n_off):
                                nbr[k] = i + off[k]
                        else:
                            for k in range(n_off):
                                zz = z + sign * half[k, 0]
                                yy = y + sign * half[k, 1]
                                xx = x + sign * half[k, 2]
                                inside = 0 <= zz < nz and 0 <= yy < ny and 0 <= xx < nx
                                nbr[k] = (zz * ny + yy) * nx + xx if inside else -1
                        for k in range(n_off):
                            j = nbr[k]
                            if j < 0:
                                continue
                            # the step costs at least its length: skip the intensity terms when that already
                            # improves no label (most steps, once the distances have settled)
                            useful = False
                            for lab in range(n_lab):
                                if d[j, lab] + step[k] < d[i, lab]:
                                    useful = True
                                    break
                            if not useful:
                                continue
                            s = 0.0
                            for c in range(nc):
                                diff = f[i, c] - f[j, c]
                                s += diff * diff
                            cost = np.sqrt(step2[k] + gamma2 * s)
                            for lab in range(n_lab):
                                cand = d[j, lab] + cost
                                if cand < d[i, lab]:
                                    d[i, lab] = cand
