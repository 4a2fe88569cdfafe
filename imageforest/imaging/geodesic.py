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
from imageforest.kernels import njit

# Half of the 26-neighbourhood: the neighbours a forward raster scan has already visited (dz, dy, dx).
_HALF = np.array([(dz, dy, dx) for dz in (-1, 0) for dy in (-1, 0, 1) for dx in (-1, 0, 1)
                  if (dz, dy, dx) < (0, 0, 0)], dtype=np.int64)


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
    (z, y, x) or (y, x) float64
    """
    feat = np.asarray(intensity, dtype=np.float32)
    mask = np.asarray(seeds, dtype=bool)
    planar = mask.ndim == 2
    if feat.ndim != mask.ndim + 1 or feat.shape[:-1] != mask.shape:
        raise InvalidInputError(f"intensity {feat.shape} must be the seeds' shape {mask.shape} plus channels")
    if planar:
        feat, mask = feat[None], mask[None]
    sp = np.ones(3) if spacing is None else np.asarray(spacing, dtype=np.float64)
    if planar and spacing is not None:
        sp = np.r_[1.0, sp]
    if sp.shape != (3,) or not np.all(sp > 0):
        raise InvalidInputError(f"spacing must be positive, one value per axis, got {spacing!r}")
    dist = np.where(mask, 0.0, np.inf)
    if mask.any():
        half = _HALF[_HALF[:, 0] == 0] if feat.shape[0] == 1 else _HALF  # one slice: its own 4 neighbours
        _raster_scans(np.ascontiguousarray(feat), dist, half, sp, float(gamma) ** 2, int(passes))
    return dist[0] if planar else dist


@njit(cache=True, nogil=True)
def _raster_scans(feat, dist, half, spacing, gamma2, passes):  # pragma: no cover - numba
    nz, ny, nx, nc = feat.shape
    n_off = half.shape[0]
    step2 = np.empty(n_off)
    for k in range(n_off):
        step2[k] = ((half[k, 0] * spacing[0]) ** 2 + (half[k, 1] * spacing[1]) ** 2
                    + (half[k, 2] * spacing[2]) ** 2)
    for _ in range(passes):
        for sign in (1, -1):  # forward: neighbours already visited lie at -offset; backward: at +offset
            z0, z1 = (0, nz) if sign == 1 else (nz - 1, -1)
            y0, y1 = (0, ny) if sign == 1 else (ny - 1, -1)
            x0, x1 = (0, nx) if sign == 1 else (nx - 1, -1)
            for z in range(z0, z1, sign):
                for y in range(y0, y1, sign):
                    for x in range(x0, x1, sign):
                        best = dist[z, y, x]
                        for k in range(n_off):
                            zz = z + sign * half[k, 0]
                            yy = y + sign * half[k, 1]
                            xx = x + sign * half[k, 2]
                            if zz < 0 or zz >= nz or yy < 0 or yy >= ny or xx < 0 or xx >= nx:
                                continue
                            d_other = dist[zz, yy, xx]
                            if d_other >= best:
                                continue
                            s = 0.0
                            for c in range(nc):
                                diff = feat[z, y, x, c] - feat[zz, yy, xx, c]
                                s += diff * diff
                            cand = d_other + np.sqrt(step2[k] + gamma2 * s)
                            if cand < best:
                                best = cand
                        dist[z, y, x] = best
