"""The localizer's first step: the scan on its isotropic working grid, the body voxels that vote, and the faces
of the scan and of the body that later stages keep boxes within."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from imageforest.apps.localize.scans import body_edges, body_mask, voxel_positions, working_image
from imageforest.imaging.io import Image


@dataclass
class WorkingGrid:
    """A scan prepared for voting.

    scan : the scan as read (HU, LPS)
    work : the scan resampled to the working grid (isotropic spacing, axis-aligned)
    points : (n, 3) int64 z, y, x voxels of `work` that vote (body voxels, evenly thinned)
    positions : (n, 3) their positions in mm (x, y, z)
    extent : (2, 3) the scan's outer faces in mm (lower, upper; x, y, z)
    edges : (6,) the body's outer faces in mm, as box walls
    """

    scan: Image
    work: Image
    points: np.ndarray
    positions: np.ndarray
    extent: np.ndarray
    edges: np.ndarray


def working_grid(scan: Image, spacing_mm: float, vote_points: int) -> WorkingGrid:
    """`scan` on a grid of `spacing_mm` with at most `vote_points` voters."""
    work = working_image(scan, spacing_mm)
    mask = body_mask(work)
    points = grid_points(mask, vote_points)
    return WorkingGrid(scan, work, points, voxel_positions(work, points), extent(work), body_edges(mask, work))


def grid_points(mask: np.ndarray, target: int) -> np.ndarray:
    """At most `target` voxels of `mask`, (n, 3) z, y, x: all of them, or an evenly spaced selection in scan order
    (deterministic, so a scan always gets the same answer)."""
    zz, yy, xx = np.nonzero(mask)
    if zz.size > target:
        pick = np.linspace(0, zz.size - 1, target).round().astype(np.int64)
        zz, yy, xx = zz[pick], yy[pick], xx[pick]
    return np.c_[zz, yy, xx]


def extent(image: Image) -> np.ndarray:
    """(2, 3) lower and upper outer faces of the volume in mm, (x, y, z)."""
    size = np.array(image.size, dtype=np.float64)
    corners = np.array([[a, b, c] for a in (-0.5, size[0] - 0.5) for b in (-0.5, size[1] - 0.5)
                        for c in (-0.5, size[2] - 0.5)])
    phys = image.index_to_physical(corners)
    return np.stack([phys.min(axis=0), phys.max(axis=0)])


def inside(box: np.ndarray, extent: np.ndarray) -> np.ndarray:
    """A box (6,) mm with lo <= hi per axis and every wall pulled back inside the volume's extent (2, 3): an
    organ's contoured voxels lie inside the scan, so walls voted beyond its faces go back to them."""
    lo, hi = np.minimum(box[0::2], box[1::2]), np.maximum(box[0::2], box[1::2])
    return np.ravel(np.c_[np.clip(lo, extent[0], extent[1]), np.clip(hi, extent[0], extent[1])])


def visible_share(box: np.ndarray, extent: np.ndarray) -> float:
    """Least share, over the three axes, of a box's extent (6,) mm (lo, hi per axis, in either order) that lies
    inside the volume's extent (2, 3) mm: 1 for a box inside, 0 for one wholly beyond a face."""
    lo, hi = np.minimum(box[0::2], box[1::2]), np.maximum(box[0::2], box[1::2])
    seen = np.clip(hi, extent[0], extent[1]) - np.clip(lo, extent[0], extent[1])
    return float(np.min(seen / np.maximum(hi - lo, 1e-6)))
