"""What the segmentation forest sees of an image: per-pixel features and the guide that edges are measured on.

An image arrives as 2-D grey (y, x), 2-D colour (y, x, 3 or 4) or a 3-D volume (z, y, x) with a voxel spacing in mm.
It becomes a `PreparedImage`: the guide, (z, y, x, c) float32 intensities on a common scale (L*a*b* for colour,
grey and volumes stretched so that their 1st-99th percentiles span 0-100, like L*), and the feature matrix
(n_voxels, n_features) float32, computed once per image:

- every guide channel, raw and Gaussian-smoothed at each scale;
- on the first channel (lightness, grey, HU): gradient magnitude, Laplacian of Gaussian and the structure tensor's
  eigenvalues at each scale (the imaging layer's `FilterBank`);
- the voxel's position, in percent of the image's longest side (a 2-D image) or in mm from the volume's centre.

Scales are pixels for 2-D images and millimetres for volumes (`FilterBank` with the spacing).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from imageforest.exceptions import InvalidInputError
from imageforest.forest.threads import run_ranges
from imageforest.imaging.filters import FilterBank
from imageforest.imaging.io import Image
from imageforest.imaging.lab import rgb_to_lab

KINDS = ("grey", "rgb", "volume")
PLANAR_SCALES = (1.0, 2.0, 4.0, 8.0)  # pixels
VOLUME_SCALES_MM = (2.0, 4.0, 8.0, 16.0)
EDGE_FILTERS = ("gradient_magnitude", "laplacian_of_gaussian", "structure_tensor_eigenvalues")


@dataclass
class PreparedImage:
    """An image ready for segmentation.

    Attributes
    ----------
    kind : "grey", "rgb" or "volume"
    shape : spatial shape, (y, x) or (z, y, x)
    spacing : (z, y, x) mm per voxel (1, 1, 1 for pictures)
    guide : (z, y, x, c) float32, the intensities edges are measured on (z = 1 for pictures)
    features : (n_voxels, n_features) float32, C order over (z, y, x)
    """

    kind: str
    shape: tuple[int, ...]
    spacing: np.ndarray
    guide: np.ndarray
    features: np.ndarray

    @property
    def n_channels(self) -> int:
        return self.guide.shape[-1]


def image_kind(array: np.ndarray, rgb: bool | None = None) -> str:
    """"grey", "rgb" or "volume" for an array; `rgb` None guesses as scikit-image does (last axis 3 or 4)."""
    if array.ndim == 2:
        if rgb:
            raise InvalidInputError(f"an RGB image needs a colour axis, got shape {array.shape}")
        return "grey"
    if array.ndim == 3:
        colour = array.shape[-1] in (3, 4) if rgb is None else bool(rgb)
        if colour and array.shape[-1] not in (3, 4):
            raise InvalidInputError(f"an RGB image has 3 or 4 values per pixel, got shape {array.shape}")
        return "rgb" if colour else "volume"
    raise InvalidInputError(f"segmentation takes a 2-D image (grey or RGB) or a 3-D volume, got shape "
                            f"{array.shape} ({array.ndim} dimensions)")


def stretch_bounds(values: np.ndarray) -> tuple[float, float]:
    """(lo, hi) that `_stretch` maps to 0 and 100: the 1st and 99th percentiles (min and max when they agree)."""
    lo, hi = np.percentile(values, [1.0, 99.0])
    if not hi > lo:
        lo, hi = float(values.min()), float(values.max())
    return float(lo), float(hi)


def _stretch(values: np.ndarray, bounds: tuple[float, float] | None = None) -> np.ndarray:
    """Scale so that the 1st-99th percentiles (or `bounds`, those of a whole image this is a tile of) span 0-100
    (the range of L*), float32."""
    lo, hi = stretch_bounds(values) if bounds is None else bounds
    scale = 100.0 / (hi - lo) if hi > lo else 1.0
    return ((values - lo) * scale).astype(np.float32)


@dataclass(frozen=True)
class Tile:
    """Where a tile lies in the picture it is cut from: its first pixel (y, x), the whole picture's (height,
    width), and the whole picture's stretch bounds (grey pictures), so that a tile's features are the picture's."""

    offset: tuple[int, int]
    whole_shape: tuple[int, int]
    bounds: tuple[float, float] | None = None


def prepare(image, spacing=None, rgb: bool | None = None, scales=None, tile: Tile | None = None,
            buffer: np.ndarray | None = None, window: tuple[slice, slice] | None = None) -> PreparedImage:
    """Guide and features of an image.

    Parameters
    ----------
    image : `Image` or array: (y, x) grey, (y, x, 3|4) colour, (z, y, x) volume
    spacing : (z, y, x) mm of a volume given as an array (an `Image` carries its own); pictures use pixels
    rgb : whether a 3-D array is a colour picture (None: last axis of 3 or 4)
    scales : filter scales, pixels for pictures, mm for volumes (None: the defaults)
    tile : for a picture cut from a larger one, where it lies (its features are then the larger picture's, as
        far as the filters' reach stays inside the cut)
    buffer : float32 memory of at least n_voxels x n_features values that the feature matrix may be written into
        (tiles reuse one: a fresh matrix of a 1152 x 1152 tile is 175 MB of new pages, 0.2 s to touch)
    window : (rows, columns) slices of a picture: the guide and the features of that part alone, the filters still
        reading the whole picture around it (a tile's core and the margin its cut needs; the rest of the
        picture is only the filters' reach)
    """
    if isinstance(image, Image):
        array = np.asarray(image.array)
        kind = image_kind(array, rgb=image.ndim == 2 and array.ndim == 3 if rgb is None else rgb)
        if kind == "volume" and spacing is None:
            spacing = np.asarray(image.spacing, dtype=np.float64)[::-1]  # Image spacing is (x, y, z)
    else:
        array = np.asarray(image)
        kind = image_kind(array, rgb)
    if array.dtype.kind not in "biuf":
        raise InvalidInputError(f"image values must be numbers, got dtype {array.dtype}")
    if kind == "rgb" and array.shape[-1] == 4:
        array = array[..., :3]  # alpha does not describe the scene
    if not np.all(np.isfinite(array)):
        raise InvalidInputError("the image holds NaN or infinite values")
    if min(array.shape[:3 if kind == "volume" else 2]) < 2:
        raise InvalidInputError(f"the image is too small to segment: shape {array.shape}")
    if tile is not None and kind == "volume":
        raise InvalidInputError("tiles are cut from pictures, not volumes")
    if kind == "volume":
        sp = np.ones(3) if spacing is None else np.asarray(spacing, dtype=np.float64)
        if sp.shape != (3,) or not np.all(np.isfinite(sp)) or not np.all(sp > 0):
            raise InvalidInputError(f"spacing must be three positive numbers (z, y, x) in mm, got {spacing!r}")
        guide = _stretch(array.astype(np.float32))[..., None]
    elif kind == "rgb":
        top = float(array.max())
        scale = (255.0 if top <= 255 else top) if array.dtype.kind in "ui" or top > 1.0 else 1.0
        guide = rgb_to_lab(array, scale)[None]
        sp = np.ones(3)
    else:
        guide = _stretch(array.astype(np.float32), None if tile is None else tile.bounds)[None, ..., None]
        sp = np.ones(3)
    if window is not None:
        if kind == "volume":
            raise InvalidInputError("a window is cut from a picture, not a volume")
        sides = guide.shape[1:3]
        if (len(window) != 2 or not all(isinstance(w, slice) and w.step in (None, 1) for w in window)
                or min(len(range(*w.indices(n))) for w, n in zip(window, sides, strict=True)) < 2):
            raise InvalidInputError(f"a window is two slices (rows, columns) of at least 2 pixels each within the "
                                    f"picture's {sides}, got {window!r}")
    features = pixel_features(guide, sp, kind, scales, tile, buffer, window)
    if window is not None:
        guide = np.ascontiguousarray(guide[(slice(None), *window)])
    return PreparedImage(kind, tuple(guide.shape[:3] if kind == "volume" else guide.shape[1:3]), sp, guide, features)


def pixel_features(guide: np.ndarray, spacing: np.ndarray, kind: str, scales=None, tile: Tile | None = None,
                   buffer: np.ndarray | None = None, window: tuple[slice, slice] | None = None) -> np.ndarray:
    """(n_voxels, n_features) float32 from a (z, y, x, c) guide; see the module docstring. A `tile`'s positions
    are those in the whole picture; with a `window` (a picture's rows and columns) only its pixels get rows,
    the filters reading the whole guide."""
    volume = kind == "volume"
    scales = tuple(scales) if scales is not None else (VOLUME_SCALES_MM if volume else PLANAR_SCALES)
    planes = guide if volume else guide[0]  # filters run in 3-D on volumes, 2-D on pictures
    sp = spacing if volume else None
    smooth = FilterBank(("gaussian",), scales)
    edges = FilterBank(EDGE_FILTERS, scales)
    columns: list[np.ndarray] = []
    for c in range(guide.shape[-1]):
        channel = planes[..., c]
        columns.append(channel)
        columns.extend(smooth(channel, sp))
    columns.extend(edges(planes[..., 0], sp))
    shape = planes.shape[:-1]
    if window is not None:
        columns = [col[window] for col in columns]
    offset = (0,) * len(shape) if tile is None else tile.offset
    if window is not None:
        offset = tuple(o + (w.indices(n)[0]) for o, w, n in zip(offset, window, shape, strict=True))
    seen = columns[0].shape
    grids = np.meshgrid(*[np.arange(o, o + n, dtype=np.float32) for o, n in zip(offset, seen, strict=True)],
                        indexing="ij")
    if volume:
        columns.extend((g - (n - 1) / 2.0) * float(s) for g, n, s in zip(grids, shape, spacing, strict=True))
    else:
        columns.extend(g * (100.0 / max(shape if tile is None else tile.whole_shape)) for g in grids)
    return interleave(columns, buffer)


# Rows of the feature matrix filled per block: a block of every column (65,536 x 33 float32 = 8.6 MB for RGB)
# stays in cache while it is interleaved, where filling one column at a time strides through the whole matrix
# once per column (4x slower on a 1152 x 1152 tile).
INTERLEAVE_ROWS = 1 << 16


def interleave(columns: list[np.ndarray], buffer: np.ndarray | None = None) -> np.ndarray:
    """(n, len(columns)) float32 matrix whose k-th column is columns[k] in C order; the columns share one shape
    (n values; views with strides, such as a window of a picture, are read in place), written into the start of
    `buffer` (float32, contiguous) when it is large enough. The blocks are shared out between the threads numba
    may use (numpy's copies release the GIL)."""
    shape = columns[0].shape
    n = int(np.prod(shape))
    size = n * len(columns)
    if buffer is not None and buffer.dtype == np.float32 and buffer.flags.c_contiguous and buffer.size >= size:
        out = buffer.reshape(-1)[:size].reshape(n, len(columns))
    else:
        out = np.empty((n, len(columns)), dtype=np.float32)
    # a block is whole lines of the first axis, about INTERLEAVE_ROWS values each
    inner = n // shape[0] if shape and shape[0] else max(n, 1)
    lines = max(1, INTERLEAVE_ROWS // max(inner, 1))
    framed = out.reshape(*shape, len(columns))

    def blocks(k0: int, k1: int) -> None:
        for b0 in range(k0 * lines, min(shape[0], k1 * lines), lines):
            b1 = min(b0 + lines, shape[0])
            np.stack([c[b0:b1] for c in columns], axis=-1, out=framed[b0:b1])

    if n:
        run_ranges(blocks, -(-shape[0] // lines), chunks_per_thread=4)
    return out


def n_features(kind: str, n_channels: int, n_scales: int) -> int:
    """Feature count of `pixel_features` for an image kind (what a model file must match)."""
    ndim = 3 if kind == "volume" else 2
    return n_channels * (1 + n_scales) + n_scales * (2 + ndim) + ndim
