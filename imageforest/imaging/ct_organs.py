"""Organs in CT scans: boxes, per-slice extents of label maps, and cases of a folder in the openkbp-hn layout.

Boxes are (n_organs, 6) float64 rows [x_lo, x_hi, y_lo, y_hi, z_lo, z_hi] in LPS millimetres at the outer faces of
the organ's extreme voxels (as ../shared/data/openkbp-hn/boxes.json); NaN rows are organs absent from the scan.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from imageforest.exceptions import InvalidInputError
from imageforest.imaging.io import Image

WALL_AXIS = np.array([0, 0, 1, 1, 2, 2])  # wall k of a box lies along physical axis WALL_AXIS[k]


def box_to_index(image: Image, box: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Inclusive voxel index bounds (x, y, z) of the voxels whose centres lie inside `box` (6,), clipped."""
    corners = np.array([[box[0], box[2], box[4]], [box[1], box[3], box[5]]])
    idx = image.physical_to_index(corners)
    lo = np.ceil(np.minimum(idx[0], idx[1]) - 1e-6)
    hi = np.floor(np.maximum(idx[0], idx[1]) + 1e-6)
    size = np.array(image.size)
    lo = np.clip(lo, 0, size - 1).astype(int)
    hi = np.clip(hi, 0, size - 1).astype(int)
    return lo, np.maximum(hi, lo)


def index_box_to_mm(image: Image, lo_xyz: np.ndarray, hi_xyz: np.ndarray) -> np.ndarray:
    """Outer faces (6,) in mm of the voxel block lo..hi (inclusive (x, y, z) indices) of `image`."""
    corners = np.array([[a, b, c] for a in (lo_xyz[0] - 0.5, hi_xyz[0] + 0.5)
                        for b in (lo_xyz[1] - 0.5, hi_xyz[1] + 0.5) for c in (lo_xyz[2] - 0.5, hi_xyz[2] + 0.5)])
    phys = image.index_to_physical(corners)
    lo, hi = phys.min(axis=0), phys.max(axis=0)
    return np.array([lo[0], hi[0], lo[1], hi[1], lo[2], hi[2]])


@dataclass
class OrganSlices:
    """Per-slice x/y index bounds of every organ of a label map, so that boxes of any z crop come cheaply.

    Attributes
    ----------
    bounds : (n_organs, nz, 4) int64, [x_min, x_max, y_min, y_max] per slice, -1 where the organ is absent
    image : the label map's geometry (array not kept)
    """

    bounds: np.ndarray
    image: Image

    @classmethod
    def from_labels(cls, labels: Image, label_values: list[int]) -> OrganSlices:
        arr = np.asarray(labels.array)
        if arr.ndim != 3:
            raise InvalidInputError(f"{labels.source}: a label map must be 3-D")
        nz = arr.shape[0]
        bounds = np.full((len(label_values), nz, 4), -1, dtype=np.int64)
        for k, value in enumerate(label_values):
            zz, yy, xx = np.nonzero(arr == value)
            if zz.size == 0:
                continue
            for z in np.unique(zz):
                sel = zz == z
                bounds[k, z] = [xx[sel].min(), xx[sel].max(), yy[sel].min(), yy[sel].max()]
        geometry = Image(np.zeros((1, 1, 1), np.uint8), labels.spacing, labels.origin, labels.direction,
                         labels.source)
        return cls(bounds, geometry)

    def boxes(self, z_range: tuple[int, int] | None = None) -> np.ndarray:
        """Boxes (n_organs, 6) in mm of the organs' voxels in slices z_range = [z0, z1) (all slices if None)."""
        z0, z1 = (0, self.bounds.shape[1]) if z_range is None else z_range
        out = np.full((self.bounds.shape[0], 6), np.nan)
        for k in range(self.bounds.shape[0]):
            b = self.bounds[k, z0:z1]
            present = np.flatnonzero(b[:, 0] >= 0)
            if present.size == 0:
                continue
            lo = np.array([b[present, 0].min(), b[present, 2].min(), z0 + present.min()], dtype=np.float64)
            hi = np.array([b[present, 1].max(), b[present, 3].max(), z0 + present.max()], dtype=np.float64)
            out[k] = index_box_to_mm(self.image, lo, hi)
        return out

    def slice_z_mm(self) -> np.ndarray:
        """(nz,) physical z in mm of the label map's slice centres."""
        nz = self.bounds.shape[1]
        return self.image.index_to_physical(np.c_[np.zeros(nz), np.zeros(nz), np.arange(nz)])[:, 2]

    def cross_sections(self, organ: int) -> tuple[np.ndarray, np.ndarray]:
        """Organ `organ`'s (0-based) extent in every slice of the label map.

        Returns
        -------
        z_mm : (nz,) physical z of the slice centres
        walls : (nz, 4) outer faces [x_lo, x_hi, y_lo, y_hi] in mm of the organ's voxels in that slice, NaN where
            the slice has none. Slices must be axial (the label map's third axis along physical z).
        """
        src = self.image
        if not np.allclose(np.abs(src.direction[:, 2]), [0.0, 0.0, 1.0], atol=1e-3):
            raise InvalidInputError(f"{src.source}: label map slices are not axial; per-slice extents need them")
        b = self.bounds[organ]
        walls = np.full((b.shape[0], 4), np.nan)
        for z in np.flatnonzero(b[:, 0] >= 0):
            box = index_box_to_mm(src, np.array([b[z, 0], b[z, 2], z]), np.array([b[z, 1], b[z, 3], z]))
            walls[z] = box[:4]
        return self.slice_z_mm(), walls


@dataclass
class Case:
    """One training or evaluation case: a scan and the truth for it (a label map or boxes)."""

    name: str
    scan: Path
    labels: Path | None = None
    boxes: np.ndarray | None = None  # (n_organs, 6) mm, NaN = absent


def openkbp_cases(folder: str | Path) -> tuple[list[Case], list[str]]:
    """Cases of a folder in the openkbp-hn format (`<case>_ct.nii.gz`, `<case>_organs.nii.gz`, `boxes.json`).

    Returns the cases (sorted by name) and the organ names in label order.
    """
    folder = Path(folder)
    meta_path = folder / "boxes.json"
    if not meta_path.is_file():
        raise InvalidInputError(f"{folder}: no boxes.json (expected the openkbp-hn layout)")
    meta = json.loads(meta_path.read_text())
    organ_labels = meta["organ_labels"]
    organs = sorted(organ_labels, key=lambda name: organ_labels[name])
    table = next(v for k, v in meta.items() if k not in ("coordinate_system", "organ_labels"))
    cases = []
    for name in sorted(table):
        boxes = np.full((len(organs), 6), np.nan)
        for k, organ in enumerate(organs):
            entry = table[name]["organs"].get(organ)
            if entry is not None:
                m = entry["box_mm_lps"]
                boxes[k] = [m["x"][0], m["x"][1], m["y"][0], m["y"][1], m["z"][0], m["z"][1]]
        labels = folder / f"{name}_organs.nii.gz"
        cases.append(Case(name, folder / f"{name}_ct.nii.gz", labels if labels.is_file() else None, boxes))
    return cases, organs
