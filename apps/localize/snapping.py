"""The localizer's last stage: every present organ's walls move to the outer faces of the scan's voxels.

This is the box the JSON schema describes and the one a label map can have: the reference boxes of openkbp-hn are
of this kind, so a wall voted within half a voxel of a face lands on it exactly.
"""

from __future__ import annotations

import numpy as np

from imageforest.apps.localize.results import OrganEstimate
from imageforest.imaging.ct_organs import box_to_index, index_box_to_mm
from imageforest.imaging.io import Image


def snap_to_voxel_faces(organs: list[OrganEstimate], scan: Image) -> None:
    """Keep each estimate's voted walls (`voted_box_mm`) and move a present organ's box to voxel faces (in place)."""
    for estimate in organs:
        estimate.voted_box_mm = estimate.box_mm
        if estimate.present:
            estimate.box_mm = voxel_box(scan, estimate.box_mm)


def voxel_box(image: Image, box: np.ndarray) -> np.ndarray:
    """`box` (6,) mm moved to the outer faces of the voxels of `image` whose centres it holds (`box_to_index`).

    Each wall moves to its nearest face (at most half a voxel), except that a box holding no voxel centre along
    an axis becomes the one voxel above its lower wall, and walls beyond the scan come back to its faces. For a
    grid whose axes are not along x, y, z, the box is returned as it was (its voxel faces are not planes of
    constant x, y or z).
    """
    box = np.asarray(box, dtype=np.float64)
    axis_aligned = np.allclose(np.abs(image.direction), np.abs(np.round(image.direction)), atol=1e-6)
    if not np.all(np.isfinite(box)) or not axis_aligned:
        return box.copy()
    return index_box_to_mm(image, *box_to_index(image, box))
