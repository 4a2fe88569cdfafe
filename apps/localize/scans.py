"""CT scans on the localizer's working grid, organ boxes, and training cases.

Boxes are (n_organs, 6) float64 rows [x_lo, x_hi, y_lo, y_hi, z_lo, z_hi] in LPS millimetres at the outer faces of
the organ's extreme voxels (as ../shared/data/openkbp-hn/boxes.json); NaN rows are organs absent from the scan.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import SimpleITK as sitk

from imageforest.exceptions import InvalidInputError
from imageforest.imaging.io import Image, read_image, resample

AIR_HU = -1024.0
BODY_HU = -500.0  # voxels denser than this are "body" (skin, tissue, bone; not air or lung core)
HU_RANGE = (-1024.0, 3071.0)
WALLS = ("x", "y", "z")
WALL_AXIS = np.array([0, 0, 1, 1, 2, 2])  # wall k of a box lies along physical axis WALL_AXIS[k]


def working_image(image: Image, spacing_mm: float) -> Image:
    """The scan resampled to isotropic `spacing_mm` voxels (float32 HU, clipped to the CT range).

    Fine scans are first block-averaged by the largest integer factor (BinShrink) so that linear resampling does
    not alias: a 0.8 mm slice stack would otherwise keep one voxel in five.
    """
    if image.ndim != 3:
        raise InvalidInputError(f"{image.source or 'image'}: a CT scan must be 3-D, got a {image.ndim}-D image")
    if image.array.ndim != 3:
        raise InvalidInputError(f"{image.source or 'image'}: a CT scan must hold one value per voxel")
    src = image.to_sitk()
    src = sitk.Cast(src, sitk.sitkFloat32)
    factors = [max(1, int(spacing_mm // s)) for s in image.spacing]
    if max(factors) > 1:
        src = sitk.BinShrink(src, factors)
    shrunk = Image.from_sitk(src, source=image.source)
    out = resample(shrunk, spacing_mm, "linear", fill=AIR_HU)
    out.array = np.clip(out.array, *HU_RANGE).astype(np.float32)
    out.notes = [*image.notes, f"working grid {spacing_mm} mm"]
    return out


MAX_SCAN_VOXELS = 1 << 29  # 537 million input voxels (1 GB of int16): a 512 x 512 x 2000 CT fits
MIN_EXTENT_MM = 20.0  # along every axis: less is not a scan of anatomy
MIN_BODY_ML = 50.0  # less tissue than this in view gets a warning (the smallest openkbp-hn scan shows 530 mL)


def max_working_voxels() -> int:
    """Voxels the 4 mm working grid may hold (default 2^24, a 1 m cube): set IMAGEFOREST_MAX_WORKING_VOXELS to
    raise it. The grid, its integral image and the votes take about 30 bytes a voxel."""
    try:
        return int(os.environ.get("IMAGEFOREST_MAX_WORKING_VOXELS", 1 << 24))
    except ValueError:
        return 1 << 24


def check_scan_size(path: Path, size_xyz, spacing_xyz, spacing_mm: float = 4.0) -> None:
    """Refuse a scan whose voxels or working grid would not fit in memory, from its size and spacing alone."""
    size = np.asarray(size_xyz, dtype=np.float64)
    extent = size * np.asarray(spacing_xyz, dtype=np.float64)
    if np.prod(size) > MAX_SCAN_VOXELS:
        raise InvalidInputError(f"{path}: {' x '.join(str(int(v)) for v in size)} voxels is over the "
                                f"{MAX_SCAN_VOXELS / 1e6:.0f} million this command reads")
    grid = float(np.prod(np.maximum(np.round(extent / spacing_mm), 1)))
    limit = max_working_voxels()
    if grid > limit:
        raise InvalidInputError(
            f"{path}: the scan covers {' x '.join(f'{v:.0f}' for v in extent)} mm, so its {spacing_mm:g} mm "
            f"working grid would hold {grid / 1e6:.0f} million voxels (limit {limit / 1e6:.1f} million; crop the "
            "scan or set IMAGEFOREST_MAX_WORKING_VOXELS)")


def _header_size(path: Path) -> tuple[tuple[int, ...], tuple[float, ...]] | None:
    """(size, spacing) in (x, y, z) from a file's header without reading its voxels; None for folders or when
    the header cannot be read (then `read_image` gives the reason)."""
    if not path.is_file():
        return None
    reader = sitk.ImageFileReader()
    reader.SetFileName(str(path))
    try:
        reader.ReadImageInformation()
    except RuntimeError:
        return None
    return tuple(reader.GetSize()), tuple(reader.GetSpacing())


def read_scan(path: str | Path) -> Image:
    """Read a CT scan (NIfTI, NRRD, MHA, DICOM folder) in LPS; 2-D or multi-component images are refused, and so
    are scans whose voxels or working grid would not fit in memory (checked from the header before reading)."""
    header = _header_size(Path(path))
    if header is not None and len(header[0]) == 3 and all(np.isfinite(header[1])) and min(header[1]) > 0:
        check_scan_size(Path(path), *header)
    image = read_image(path)
    if image.ndim != 3 or image.array.ndim != 3:
        raise InvalidInputError(f"{path}: a CT scan must be a 3-D volume, got shape {image.array.shape}")
    if min(image.array.shape) < 2:
        raise InvalidInputError(f"{path}: a CT scan needs at least two voxels along every axis, "
                                f"got shape {image.array.shape}")
    check_scan_size(Path(path), image.size, image.spacing)
    extent = np.asarray(image.size) * image.spacing
    if np.any(extent < MIN_EXTENT_MM):
        raise InvalidInputError(f"{path}: the scan covers only {' x '.join(f'{v:.1f}' for v in extent)} mm; "
                                f"a head-and-neck scan spans at least {MIN_EXTENT_MM:g} mm along every axis")
    lo, hi = float(image.array.min()), float(image.array.max())
    if lo == hi:
        raise InvalidInputError(f"{path}: every voxel is {lo:g}; a constant volume holds no anatomy")
    return image


def scan_warnings(image: Image) -> list[str]:
    """Why the answers for this scan may mean little, though it could be read: signs that it is not a CT in
    Hounsfield units, or that it holds hardly any body. The localizer still answers; the JSON lists these."""
    out = []
    values = image.array
    if float(values.min()) > -200.0:
        out.append("no voxel at or below -200: air reads about -1000 HU in CT, so this may be an MR scan or a CT "
                   "stored without its Hounsfield offset; organs reported absent may only mean that")
    dense = values > BODY_HU
    body = float(np.mean(dense))
    body_ml = float(dense.sum()) * float(np.prod(image.spacing)) / 1000.0
    if body_ml < MIN_BODY_ML:
        out.append(f"only {body_ml:.0f} mL of the scan is denser than {BODY_HU:g} HU: hardly any body in view")
    elif body > 0.98:
        out.append(f"{100 * body:.0f}% of the voxels are denser than {BODY_HU:g} HU: no air around the body, so "
                   "this may not be a CT in Hounsfield units")
    return out


def body_mask(work: Image) -> np.ndarray:
    """Voxels of the working grid inside the body, (z, y, x) bool."""
    return work.array > BODY_HU


def body_edges(mask: np.ndarray, work: Image) -> np.ndarray:
    """(6,) outer faces in mm of the body voxels `mask` (z, y, x) of a working-grid volume, [x_lo, x_hi, y_lo,
    y_hi, z_lo, z_hi]; the volume's own faces when it holds no body voxel."""
    lo_hi = []
    for axis in (2, 1, 0):  # x, y, z index axes of the (z, y, x) mask
        hit = np.flatnonzero(mask.any(axis=tuple(a for a in range(3) if a != axis)))
        lo_hi.append((hit[0], hit[-1]) if hit.size else (0, mask.shape[axis] - 1))
    lo = work.index_to_physical(np.array([[v[0] - 0.5 for v in lo_hi]]))[0]
    hi = work.index_to_physical(np.array([[v[1] + 0.5 for v in lo_hi]]))[0]
    return np.ravel(np.c_[np.minimum(lo, hi), np.maximum(lo, hi)])


def voxel_positions(image: Image, zyx: np.ndarray) -> np.ndarray:
    """Physical LPS positions (n, 3) in mm, (x, y, z) order, of voxel indices (n, 3) given as (z, y, x)."""
    return image.index_to_physical(np.asarray(zyx, dtype=np.float64)[:, ::-1])


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


def index_box_to_mm(image: Image, lo_xyz: np.ndarray, hi_xyz: np.ndarray) -> np.ndarray:
    """Outer faces (6,) in mm of the voxel block lo..hi (inclusive (x, y, z) indices) of `image`."""
    corners = np.array([[a, b, c] for a in (lo_xyz[0] - 0.5, hi_xyz[0] + 0.5)
                        for b in (lo_xyz[1] - 0.5, hi_xyz[1] + 0.5) for c in (lo_xyz[2] - 0.5, hi_xyz[2] + 0.5)])
    phys = image.index_to_physical(corners)
    lo, hi = phys.min(axis=0), phys.max(axis=0)
    return np.array([lo[0], hi[0], lo[1], hi[1], lo[2], hi[2]])


def crop_z(image: Image, z0: int, z1: int) -> Image:
    """Slices [z0, z1) of a volume with its geometry (the origin moves to slice z0)."""
    origin = image.index_to_physical(np.array([[0.0, 0.0, float(z0)]]))[0]
    return Image(np.ascontiguousarray(image.array[z0:z1]), image.spacing.copy(), origin, image.direction.copy(),
                 image.source, [*image.notes, f"slices {z0}:{z1}"])


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
