"""CT scans for every CT application: reading and checking a scan, its isotropic working grid, the body voxels.

A scan is an `imageforest.imaging.Image` in Hounsfield units with LPS geometry (array (z, y, x), spacing, origin
and direction in mm). `read_scan` refuses what is no CT volume or would not fit in memory, checked from the file's
header before its voxels are read; `scan_warnings` says why answers for a readable scan may mean little.
`working_grid` resamples a scan to an isotropic grid and picks the body voxels that vote; the box helpers
(`extent`, `inside`, `visible_share`) keep boxes of the layout of `imageforest.imaging.ct_organs` within a scan.
"""

from __future__ import annotations

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
MIN_VOXELS = 8  # along every axis: fewer is no CT volume (a 2 x 2 x 2 volume at 100 mm gave 6 of 7 organs "present")
MAX_SPACING_MM = 10.0  # along every axis: coarser voxels than any CT's slices
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
    if min(image.array.shape) < MIN_VOXELS:
        raise InvalidInputError(f"{path}: a CT scan needs at least {MIN_VOXELS} voxels along every axis, "
                                f"got shape {image.array.shape}")
    if float(np.max(image.spacing)) > MAX_SPACING_MM:
        raise InvalidInputError(f"{path}: voxels of {' x '.join(f'{v:g}' for v in image.spacing)} mm are coarser than "
                                f"any CT's ({MAX_SPACING_MM:g} mm at most along every axis)")
    check_scan_size(Path(path), image.size, image.spacing)
    extent = np.asarray(image.size) * image.spacing
    if np.any(extent < MIN_EXTENT_MM):
        raise InvalidInputError(f"{path}: the scan covers only {' x '.join(f'{v:.1f}' for v in extent)} mm; "
                                f"a CT scan of anatomy spans at least {MIN_EXTENT_MM:g} mm along every axis")
    lo, hi = float(image.array.min()), float(image.array.max())
    if lo == hi:
        raise InvalidInputError(f"{path}: every voxel is {lo:g}; a constant volume holds no anatomy")
    return image


def scan_warnings(image: Image) -> list[str]:
    """Why the answers for this scan may mean little, though it could be read: signs that it is not a CT in
    Hounsfield units, or that it holds hardly any body. A CT application still answers, and reports these."""
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


def crop_z(image: Image, z0: int, z1: int) -> Image:
    """Slices [z0, z1) of a volume with its geometry (the origin moves to slice z0)."""
    origin = image.index_to_physical(np.array([[0.0, 0.0, float(z0)]]))[0]
    return Image(np.ascontiguousarray(image.array[z0:z1]), image.spacing.copy(), origin, image.direction.copy(),
                 image.source, [*image.notes, f"slices {z0}:{z1}"])


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
