"""Integral images (summed-area tables) in 2-D and 3-D, and O(1) box sums.

The table has one extra leading row/column/slice of zeros: ``S[z, y, x]`` is the sum of ``J[:z, :y, :x]``, so the
sum over the half-open box [z0, z1) x [y0, y1) x [x0, x1) is eight look-ups. Tables are float64: every partial sum
of an integer volume below 2**53 is exact (a 512 x 512 x 300 int16 CT peaks near 2.6e12), so there is no float32
drift.

Border rule: a box is clipped to the image and its mean is taken over the voxels inside; a box entirely outside the
image reads the caller's fill value.
"""

from __future__ import annotations

import numpy as np

from imageforest.kernels import njit


def integral_image(image: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Summed-area table of a 2-D (y, x) or 3-D (z, y, x) array, shape + 1 in every axis, float64.

    Three numpy cumulative sums: as fast as a compiled loop (memory-bound) and nothing to compile, which keeps
    the command line's first run short. `out`, when given, is a float64 array of shape + 1 to fill (e.g. a view
    into a larger table, so that many tables are never held twice).
    """
    arr = np.asarray(image)
    if arr.ndim not in (2, 3):
        raise ValueError(f"integral images are 2-D or 3-D, got {arr.ndim}-D")
    shape = tuple(n + 1 for n in arr.shape)
    if out is None:
        out = np.zeros(shape)
    elif out.shape != shape or out.dtype != np.float64:
        raise ValueError(f"out must be float64 of shape {shape}, got {out.dtype} {out.shape}")
    else:
        out[0] = 0.0
        out[:, 0] = 0.0
        if arr.ndim == 3:
            out[:, :, 0] = 0.0
    inner = out[(slice(1, None),) * arr.ndim]
    np.cumsum(arr, axis=0, dtype=np.float64, out=inner)
    for axis in range(1, arr.ndim):
        np.cumsum(inner, axis=axis, out=inner)
    return out


@njit(cache=True, inline="always")
def box_sum(table, base, ny1, nx1, z0, z1, y0, y1, x0, x1):  # pragma: no cover - numba
    """Sum over [z0, z1) x [y0, y1) x [x0, x1) of the flat table starting at `base` with row length nx1 and
    slice size ny1 * nx1 (the table's padded y and x sizes). Indices must already lie within the table."""
    s = ny1 * nx1
    a = base + z1 * s
    b = base + z0 * s
    return (table[a + y1 * nx1 + x1] - table[a + y0 * nx1 + x1] - table[a + y1 * nx1 + x0]
            + table[a + y0 * nx1 + x0] - table[b + y1 * nx1 + x1] + table[b + y0 * nx1 + x1]
            + table[b + y1 * nx1 + x0] - table[b + y0 * nx1 + x0])


@njit(cache=True)
def clipped_box_mean(table, base, nz, ny, nx, z0, z1, y0, y1, x0, x1, fill):  # pragma: no cover - numba
    """Mean over the part of [z0, z1) x [y0, y1) x [x0, x1) inside an nz x ny x nx image; `fill` if none is."""
    z0 = max(z0, 0)
    y0 = max(y0, 0)
    x0 = max(x0, 0)
    z1 = min(z1, nz)
    y1 = min(y1, ny)
    x1 = min(x1, nx)
    if z1 <= z0 or y1 <= y0 or x1 <= x0:
        return fill
    n = (z1 - z0) * (y1 - y0) * (x1 - x0)
    return box_sum(table, base, ny + 1, nx + 1, z0, z1, y0, y1, x0, x1) / n
