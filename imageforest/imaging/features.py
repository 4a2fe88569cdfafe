"""Image feature families, evaluated lazily inside training and `apply` (Criminisi et al. 2012, sec. 3.6 and
4.5: d = infinity).

The trainer asks a family for the responses of a node's points to that node's rho candidates; nothing builds an
n_points x n_features matrix. Data are an `ImageStack` (all images' channels as flat float64 tables) plus integer
points (n, 4) = (image, z, y, x); planar images have z = 0 and one slice.

- `BoxFeatures`: mean intensity of a box displaced from the reference voxel (eq. 4.5), or the difference of two
  such boxes (Haar-like), optionally across channels. Offsets and sizes are in millimetres and become voxels with
  each image's spacing, so one model serves scans of different resolutions. Boxes are clipped to the image; a box
  wholly outside reads `fill`.
- `DepthProbes`: f = J(p + u / J(p)) - J(p + v / J(p)) (eq. 3.2): offsets u, v in pixel x depth units shrink with
  distance, so the feature is depth invariant. Background (J <= 0) and out-of-image probes read `background`.

Each family has its own responses and traversal kernels (as the vector learners do) rather than one generic walk
taking a response function: the response is inlined into the hot loop, which is where `apply` spends its time.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numba import prange

from imageforest.exceptions import InvalidInputError, ModelFormatError
from imageforest.forest.features import FeatureFamily
from imageforest.forest.storage import ForestArrays
from imageforest.forest.threads import run_ranges
from imageforest.imaging.integral import clipped_box_mean, integral_image
from imageforest.imaging.io import Image
from imageforest.kernels import njit

if TYPE_CHECKING:  # scipy.ndimage (the filter bank's engine) costs start-up; imported when a model uses it
    from imageforest.imaging.filters import FilterBank


_FLOAT32_EXACT = tuple(np.dtype(t) for t in (np.bool_, np.uint8, np.int8, np.uint16, np.int16, np.float32))


@dataclass
class ImageStack:
    """Images prepared for lazy features.

    Attributes
    ----------
    table : (total,) float64 (or float32, see `from_images`)
        Every image's channels, flat: integral tables (box features) or raw values (depth probes).
    base : (n_images, n_channels) int64
        Where each image's channel starts in `table`.
    shape : (n_images, 3) int64
        (nz, ny, nx) voxel counts.
    spacing : (n_images, 3) float64
        Voxel size in mm in (z, y, x) order (planar images: z = 1).
    integral : bool
        True when `table` holds summed-area tables.
    """

    table: np.ndarray
    base: np.ndarray
    shape: np.ndarray
    spacing: np.ndarray
    integral: bool

    @property
    def n_images(self) -> int:
        return int(self.shape.shape[0])

    @property
    def n_channels(self) -> int:
        return int(self.base.shape[1])

    @classmethod
    def from_images(cls, images, integral: bool, channels=None, exact_float32: bool = False) -> ImageStack:
        """Stack `images` (Image objects or arrays (z, y, x) / (y, x)); `channels(image) -> list of arrays` adds
        derived channels (e.g. a filter bank); by default the image itself is the only channel. With
        `exact_float32`, raw tables are float32 when every image's type holds only float32 numbers (8- and 16-bit
        integers, float32): the same values in half the memory."""
        images = [images] if isinstance(images, (Image, np.ndarray)) else list(images)
        if not images:
            raise InvalidInputError("no images given")
        raw_type = np.float64
        if exact_float32 and not integral and channels is None and all(
                np.asarray(im.array if isinstance(im, Image) else im).dtype in _FLOAT32_EXACT for im in images):
            raw_type = np.float32
        # The table is allocated once and every image's channels are written into it: a list of per-image
        # tables concatenated at the end would hold every table twice (203 CT working volumes: 5 GB more).
        geometry = [_array_and_spacing(im, k) for k, im in enumerate(images)]
        first = [geometry[0][0]] if channels is None else list(channels(images[0]))
        n_channels = len(first)
        sizes = [int(np.prod([n + 1 for n in arr.shape])) if integral else arr.size for arr, _ in geometry]
        table = np.empty(n_channels * sum(sizes), dtype=np.float64 if integral else raw_type)
        bases, offset = [], 0
        for k, (im, (arr, _spacing)) in enumerate(zip(images, geometry, strict=True)):
            chans = first if k == 0 else [arr] if channels is None else list(channels(im))
            if len(chans) != n_channels:
                raise InvalidInputError("every image must give the same number of channels")
            row = []
            for ch in chans:
                ch = ch if channels is None else np.asarray(ch, dtype=np.float64).reshape(arr.shape)
                piece = table[offset:offset + sizes[k]]
                if integral:
                    integral_image(ch, out=piece.reshape(tuple(n + 1 for n in arr.shape)))
                else:
                    piece.reshape(arr.shape)[...] = ch
                row.append(offset)
                offset += sizes[k]
            bases.append(row)
            first = None
        shapes = [arr.shape for arr, _ in geometry]
        spacings = [spacing for _, spacing in geometry]
        return cls(table, np.array(bases, dtype=np.int64), np.array(shapes, dtype=np.int64),
                   np.array(spacings, dtype=np.float64), integral)


def _array_and_spacing(im, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(z, y, x) array and (z, y, x) spacing of an Image or a bare array (spacing 1)."""
    if isinstance(im, Image):
        arr = im.array
        if arr.ndim != im.ndim:
            raise InvalidInputError(f"image {k} has {arr.shape[-1]} colour channels; give one scalar image "
                                    "(or derived channels through `channels`)")
        spacing = im.spacing[::-1]
    else:
        arr = np.asarray(im)
        spacing = np.ones(arr.ndim)
    if arr.ndim == 2:
        arr = arr[None]
        spacing = np.r_[1.0, spacing]
    if arr.ndim != 3 or 0 in arr.shape:
        raise InvalidInputError(f"image {k} must be a non-empty 2-D or 3-D array, got shape {arr.shape}")
    if arr.dtype.kind not in "biuf" or (arr.dtype.kind == "f" and not np.isfinite(arr).all()):
        raise InvalidInputError(f"image {k} must hold finite numbers")
    return arr, np.asarray(spacing, dtype=np.float64)


def check_points(points, stack: ImageStack) -> np.ndarray:
    """Points as (n, 4) int32 (image, z, y, x), every one inside its image; planar (n, 3) (image, y, x) accepted."""
    pts = np.asarray(points)
    if pts.ndim != 2 or pts.shape[1] not in (3, 4) or pts.shape[0] == 0:
        raise InvalidInputError(f"points must have shape (n, 4) = (image, z, y, x) or (n, 3) = (image, y, x), "
                                f"got {pts.shape}")
    if pts.dtype.kind not in "iu" and not np.all(pts == np.round(pts)):
        raise InvalidInputError("points must be integer voxel indices")
    pts = pts.astype(np.int64)
    if pts.shape[1] == 3:
        pts = np.c_[pts[:, 0], np.zeros(len(pts), np.int64), pts[:, 1:]]
    img = pts[:, 0]
    if img.min() < 0 or img.max() >= stack.n_images:
        raise InvalidInputError(f"point image indices must lie in [0, {stack.n_images})")
    dims = stack.shape[img]
    if np.any(pts[:, 1:] < 0) or np.any(pts[:, 1:] >= dims):
        raise InvalidInputError("a point lies outside its image")
    return np.ascontiguousarray(pts, dtype=np.int32)


# ---------------------------------------------------------------------------------------------------------------
# Box features

BOX_WIDTH = 14  # [ch1, oz, oy, ox, sz, sy, sx, ch2, oz2, oy2, ox2, sz2, sy2, sx2] (mm)


@njit(cache=True)
def _span(p, offset, size, sp):  # pragma: no cover - numba
    """Half-open voxel range [lo, hi) along one axis of a box centred `offset` mm from voxel p, `size` mm long."""
    half = 0.5 * size
    lo = p + int(np.floor((offset - half) / sp + 0.5))
    hi = p + int(np.floor((offset + half) / sp + 0.5))
    if hi <= lo:
        hi = lo + 1
    return lo, hi


@njit(cache=True)
def _box_mean(row, k, table, base, shape, spacing, img, z, y, x, fill):  # pragma: no cover - numba
    """Mean of the box described by row[k:k + 7] (channel, offset zyx mm, size zyx mm) around voxel (z, y, x).

    Scalars only and no numba-level inlining: LLVM inlines these small functions anyway, and the command line's
    first run compiles this code (numba's IR inlining and small arrays multiply compile time).
    """
    ch = int(row[k])
    z0, z1 = _span(z, row[k + 1], row[k + 4], spacing[img, 0])
    y0, y1 = _span(y, row[k + 2], row[k + 5], spacing[img, 1])
    x0, x1 = _span(x, row[k + 3], row[k + 6], spacing[img, 2])
    return clipped_box_mean(table, base[img, ch], shape[img, 0], shape[img, 1], shape[img, 2], z0, z1, y0, y1,
                            x0, x1, fill)


@njit(cache=True)
def _box_response(row, difference, table, base, shape, spacing, pt, fill):  # pragma: no cover - numba
    img = pt[0]
    v = _box_mean(row, 0, table, base, shape, spacing, img, pt[1], pt[2], pt[3], fill)
    if difference:
        v -= _box_mean(row, 7, table, base, shape, spacing, img, pt[1], pt[2], pt[3], fill)
    return v


@njit(cache=True, parallel=True)
def _box_responses(difference, table, base, shape, spacing, points, params, samples, pos_set,
                   fill):  # pragma: no cover
    m_total = samples.shape[0]
    rho = params.shape[1]
    out = np.empty((rho, m_total), dtype=np.float32)
    for m in prange(m_total):
        pt = points[samples[m]]
        s = pos_set[m]
        for c in range(rho):
            out[c, m] = np.float32(_box_response(params[s, c], difference, table, base, shape, spacing, pt, fill))
    return out


@njit(cache=True, parallel=True)
def _box_apply(difference, table, base, shape, spacing, points, packed, tree_root, fill):  # pragma: no cover
    n = points.shape[0]
    n_trees = tree_root.shape[0]
    out = np.empty((n, n_trees), dtype=np.int32)
    for t in range(n_trees):
        for i in prange(n):
            pt = points[i]
            node = tree_root[t]
            while packed[node, 0] >= 0.0:
                f = np.float64(np.float32(_box_response(packed[node, 4:], difference, table, base, shape, spacing,
                                                        pt, fill)))
                go_left = f > packed[node, 2] and f <= packed[node, 3]
                node = int(packed[node, 0]) if go_left else int(packed[node, 1])
            out[i, t] = -int(packed[node, 0]) - 1
    return out


def _box_apply_single(difference, table, base, nz, ny, nx, points, nodes, spans, tree_root, fill):
    """`_box_apply` for one image, with every node's boxes already in voxel offsets (`box_spans`): the
    prediction path of a scan, where the mm-to-voxel arithmetic would otherwise repeat at every visit."""
    out = np.empty((points.shape[0], tree_root.shape[0]), dtype=np.int32)
    run_ranges(_box_apply_single_range, points.shape[0], bool(difference), table, base, nz, ny, nx, points, nodes,
               spans, tree_root, fill, out, min_per_thread=256)
    return out


@njit(cache=True, nogil=True)
def _box_apply_single_range(i0, i1, difference, table, base, nz, ny, nx, points, nodes, spans, tree_root, fill,
                            out):  # pragma: no cover - numba
    """`_box_apply_single` for points i0..i1, tree after tree (one tree's nodes stay in cache)."""
    for t in range(tree_root.shape[0]):
        for i in range(i0, i1):
            z = points[i, 1]
            y = points[i, 2]
            x = points[i, 3]
            node = tree_root[t]
            while nodes[node, 0] >= 0.0:
                sp = spans[node]
                v = clipped_box_mean(table, base[sp[0]], nz, ny, nx, z + sp[1], z + sp[2], y + sp[3], y + sp[4],
                                     x + sp[5], x + sp[6], fill)
                if difference:
                    v -= clipped_box_mean(table, base[sp[7]], nz, ny, nx, z + sp[8], z + sp[9], y + sp[10],
                                          y + sp[11], x + sp[12], x + sp[13], fill)
                f = np.float64(np.float32(v))
                go_left = f > nodes[node, 2] and f <= nodes[node, 3]
                node = int(nodes[node, 0]) if go_left else int(nodes[node, 1])
            out[i, t] = -int(nodes[node, 0]) - 1


def box_spans(params: np.ndarray, spacing_zyx: np.ndarray) -> np.ndarray:
    """Voxel offsets (n, 14) int64 [ch, z0, z1, y0, y1, x0, x1] x 2 of box parameter rows (n, 14) at one spacing,
    computed exactly as `_span` does per visit (same float64 operations, so the same voxels)."""
    out = np.zeros((params.shape[0], BOX_WIDTH), dtype=np.int64)
    for k in (0, 7):
        out[:, k] = params[:, k].astype(np.int64)
        for a in range(3):
            half = 0.5 * params[:, k + 4 + a]
            lo = np.floor((params[:, k + 1 + a] - half) / spacing_zyx[a] + 0.5).astype(np.int64)
            hi = np.floor((params[:, k + 1 + a] + half) / spacing_zyx[a] + 0.5).astype(np.int64)
            out[:, k + 1 + 2 * a] = lo
            out[:, k + 2 + 2 * a] = np.maximum(hi, lo + 1)
    return out


class BoxFeatures(FeatureFamily):
    """Displaced-box means (eq. 4.5) or box differences over integral images, in millimetres.

    Parameters
    ----------
    max_offset_mm : float or (z, y, x) triple
        Box centres are drawn uniformly within +-max_offset_mm of the reference voxel (z = 0 for planar images).
    box_size_mm : (min, max)
        Box edge lengths are drawn uniformly in this range, per axis.
    difference : bool
        Response is mean(box 1) - mean(box 2) (Haar-like) instead of mean(box 1).
    n_channels : int
        Channels per image when the caller supplies them; each box draws its channel.
    filter_bank : FilterBank, optional
        Compute the channels with this bank (then `n_channels` follows from it); saved with the model, so the
        same channels are rebuilt for every image the model is applied to.
    planar : bool
        2-D images: no z offsets, one-slice boxes.
    fill : float
        Value of a box wholly outside the image.
    """

    name = "box"
    param_width = BOX_WIDTH

    def __init__(self, max_offset_mm=50.0, box_size_mm=(2.0, 20.0), difference: bool = False, n_channels: int = 1,
                 planar: bool = False, fill: float = 0.0, filter_bank: FilterBank | None = None) -> None:
        off = np.broadcast_to(np.asarray(max_offset_mm, dtype=np.float64), (3,)).copy()
        size = np.asarray(box_size_mm, dtype=np.float64)
        if np.any(off < 0) or size.shape != (2,) or size[0] <= 0 or size[1] < size[0]:
            raise InvalidInputError("max_offset_mm must be >= 0 and box_size_mm a (min, max) pair with 0 < min <= max")
        if planar:
            off[0] = 0.0
        self.max_offset_mm = off
        self.box_size_mm = size
        self.difference = bool(difference)
        self.planar = bool(planar)
        self.filter_bank = filter_bank
        self.n_channels = (len(filter_bank.channel_names(2 if planar else 3)) if filter_bank is not None
                           else int(n_channels))
        self.fill = float(fill)
        self.n_features = self.n_channels

    def prepare(self, images, channels=None) -> ImageStack:
        if channels is None and self.filter_bank is not None:
            channels = self.filter_bank
        stack = ImageStack.from_images(images, integral=True, channels=channels)
        if stack.n_channels != self.n_channels:
            raise InvalidInputError(f"the feature family expects {self.n_channels} channel(s), images give "
                                    f"{stack.n_channels}")
        return stack

    def sample(self, rng, n_sets, n_candidates):
        shape = (n_sets, n_candidates)
        out = np.zeros((*shape, BOX_WIDTH))
        # The second box is drawn only for differences (zeros otherwise, which model files store for free), and
        # offsets and sizes are rounded to float32, whose values compress well in float64 node rows.
        for k in (0, 7) if self.difference else (0,):
            out[..., k] = rng.integers(0, self.n_channels, shape)
            out[..., k + 1:k + 4] = rng.uniform(-1, 1, (*shape, 3)) * self.max_offset_mm
            out[..., k + 4:k + 7] = rng.uniform(self.box_size_mm[0], self.box_size_mm[1], (*shape, 3))
            if self.planar:
                out[..., k + 4] = 0.0  # one slice: the size rounds up to a single voxel
        return out.astype(np.float32).astype(np.float64)

    def responses(self, data, params, samples, pos_set):
        stack, points = data
        return _box_responses(self.difference, stack.table, stack.base, stack.shape, stack.spacing, points, params,
                              samples, pos_set, self.fill)

    def apply(self, data, forest: ForestArrays) -> np.ndarray:
        stack, points = data
        # The kernels index channels unchecked: every channel a node reads must exist in the images actually
        # passed, whatever the model file declares (a crafted file could otherwise read outside the table).
        used = forest.__dict__.get("_max_box_channel")
        if used is None:
            ch = forest.params[:, [0, 7]] if forest.params.shape[0] else np.zeros((1, 2))
            used = forest.__dict__["_max_box_channel"] = int(ch.max())
        if used >= stack.n_channels:
            raise ModelFormatError(f"the model reads image channel {used}, the images have {stack.n_channels}")
        table, roots = forest.packed()
        if stack.n_images == 1:
            key = tuple(stack.spacing[0])
            cached = forest.__dict__.setdefault("_box_spans", {})
            if key not in cached:  # one table per working spacing, kept with the (immutable) forest
                cached.clear()
                cached[key] = box_spans(np.ascontiguousarray(table[:, 4:]), stack.spacing[0])
            spans = cached[key]
            nz, ny, nx = (int(v) for v in stack.shape[0])
            return _box_apply_single(self.difference, stack.table, stack.base[0], nz, ny, nx, points,
                                     np.ascontiguousarray(table[:, :4]), spans, roots, self.fill)
        return _box_apply(self.difference, stack.table, stack.base, stack.shape, stack.spacing, points, table,
                          roots, self.fill)

    def importance_dims(self, params):
        if self.difference:
            return params[:, [0, 7]].astype(np.int64), np.full((params.shape[0], 2), 0.5)
        return params[:, :1].astype(np.int64), np.ones((params.shape[0], 1))

    def to_spec(self):
        return ({"name": self.name, "max_offset_mm": self.max_offset_mm.tolist(),
                 "box_size_mm": self.box_size_mm.tolist(), "difference": self.difference,
                 "n_channels": self.n_channels, "planar": self.planar, "fill": self.fill,
                 "filter_bank": None if self.filter_bank is None else self.filter_bank.to_spec()}, {})

    @classmethod
    def from_spec(cls, spec, arrays):
        bank = spec.get("filter_bank")
        if bank is not None:
            from imageforest.imaging.filters import FilterBank
        return cls(spec["max_offset_mm"], spec["box_size_mm"], spec["difference"], spec["n_channels"],
                   spec["planar"], spec["fill"], None if bank is None else FilterBank.from_spec(bank))

    def validate_params(self, params: np.ndarray) -> bool:
        if params.shape[1] != BOX_WIDTH:
            return False
        ch = params[:, [0, 7]]
        # offsets and edges in mm: finite and within 10 km, so their voxel spans are integers at any spacing
        return bool(np.all((ch >= 0) & (ch < self.n_channels)) and np.all(np.abs(params) < 1e7))


# ---------------------------------------------------------------------------------------------------------------
# Depth probes

@njit(cache=True, inline="always")
def _depth_at(table, b, ny, nx, y, x, background):  # pragma: no cover - numba
    if y < 0 or y >= ny or x < 0 or x >= nx:
        return background
    v = table[b + y * nx + x]
    return v if v > 0.0 else background


@njit(cache=True, parallel=True)
def _probe_responses(table, base, shape, points, params, samples, pos_set, background, scale,
                     visit):  # pragma: no cover - numba
    """Responses (rho, M) float32; positions are visited in the order `visit` (a permutation of 0..M-1).

    Deep levels' nodes hold a few points from many maps: visiting positions grouped by map keeps one map's
    neighbourhood in cache for all its points and candidates (with `cropped_depth_stack`'s maps, 12 ns per response
    at deep levels of a body fit against 33 in node order on whole frames). The reference depth and offset scale
    are read once per point, not per candidate.
    """
    m_total = samples.shape[0]
    rho = params.shape[1]
    out = np.empty((rho, m_total), dtype=np.float32)
    for k in prange(m_total):
        m = visit[k]
        pt = points[samples[m]]
        img = pt[0]
        ny = shape[img, 1]
        nx = shape[img, 2]
        b = base[img, 0] + pt[1] * ny * nx
        y = pt[2]
        x = pt[3]
        # Offsets are divided by the reference depth (far bodies look smaller, so probes shrink with
        # distance), written as in `_probe_apply` so that training and apply round identically.
        inv = scale / _depth_at(table, b, ny, nx, y, x, background)
        s = pos_set[m]
        for c in range(rho):
            a = _depth_at(table, b, ny, nx, y + int(np.floor(params[s, c, 0] * inv + 0.5)),
                          x + int(np.floor(params[s, c, 1] * inv + 0.5)), background)
            d = _depth_at(table, b, ny, nx, y + int(np.floor(params[s, c, 2] * inv + 0.5)),
                          x + int(np.floor(params[s, c, 3] * inv + 0.5)), background)
            out[c, m] = np.float32(a - d)
    return out


def reading_box(depth: np.ndarray, yx: np.ndarray) -> tuple[int, int, int, int]:
    """(y0, y1, x0, x1): the smallest box of a depth map (height, width) holding its readings (> 0) and the pixels
    `yx` (m, 2); outside it a probe reads the background as it would in the whole map (one pixel when empty)."""
    rows = np.flatnonzero((depth > 0).any(axis=1))
    cols = np.flatnonzero((depth > 0).any(axis=0))
    ys = np.r_[rows[:1], rows[-1:], yx[:, 0]]
    xs = np.r_[cols[:1], cols[-1:], yx[:, 1]]
    if ys.size == 0:
        return 0, 1, 0, 1
    return int(ys.min()), int(ys.max()) + 1, int(xs.min()), int(xs.max()) + 1


def cropped_depth_stack(stack: ImageStack, points: np.ndarray) -> tuple[ImageStack, np.ndarray]:
    """Each map cut to `reading_box` of its readings and its points, as float32 when that is exact.

    Probes read `background` outside a map and on its zeros alike, so the cut changes no response; it shrinks what
    training reads by 4-10x (a body fills a fraction of its frame), and float32 halves it again. A float32 stack
    whose maps are cut already is returned as it is.

    Returns
    -------
    the cut stack (its `table` float32, or float64 when some depth is not a float32 number) and the points moved
    into it, (n, 4) int32
    """
    n = stack.n_images
    img = points[:, 0].astype(np.int64)
    by_map = np.argsort(img, kind="stable")
    bounds = np.searchsorted(img[by_map], np.arange(n + 1))
    exact = stack.table
    if exact.dtype != np.float32:  # `prepare` already stores maps read as 16-bit or float32 in float32
        as32 = exact.astype(np.float32)
        exact = as32 if np.array_equal(as32, exact) else exact
    boxes = []
    for k in range(n):
        ny, nx = int(stack.shape[k, 1]), int(stack.shape[k, 2])
        depth = exact[stack.base[k, 0]: stack.base[k, 0] + ny * nx].reshape(ny, nx)
        boxes.append(reading_box(depth, points[by_map[bounds[k]:bounds[k + 1]], 2:4]))
    if exact is stack.table and all(box == (0, int(stack.shape[k, 1]), 0, int(stack.shape[k, 2]))
                                    for k, box in enumerate(boxes)):
        # maps cut already (as training reads them): the stack as it is, no second copy of every map
        return stack, np.ascontiguousarray(points, np.int32)
    pieces, bases, shapes = [], np.zeros((n, 1), np.int64), np.zeros((n, 3), np.int64)
    moved = points.copy()
    offset = 0
    for k in range(n):
        ny, nx = int(stack.shape[k, 1]), int(stack.shape[k, 2])
        depth = exact[stack.base[k, 0]: stack.base[k, 0] + ny * nx].reshape(ny, nx)
        mine = by_map[bounds[k]:bounds[k + 1]]
        y0, y1, x0, x1 = boxes[k]
        cut = np.ascontiguousarray(depth[y0:y1, x0:x1]).ravel()
        pieces.append(cut)
        bases[k, 0] = offset
        shapes[k] = (1, y1 - y0, x1 - x0)
        offset += cut.size
        moved[mine, 2] -= y0
        moved[mine, 3] -= x0
    return (ImageStack(np.concatenate(pieces), bases, shapes, stack.spacing.copy(), False),
            np.ascontiguousarray(moved, np.int32))


@njit(cache=True, inline="always")
def _reference(table, base, shape, points, i, background):  # pragma: no cover - numba
    """Point i's map (start b, size ny x nx), pixel (y, x) and depth there."""
    img = points[i, 0]
    ny = shape[img, 1]
    nx = shape[img, 2]
    b = base[img, 0] + points[i, 1] * ny * nx
    y = points[i, 2]
    x = points[i, 3]
    return b, ny, nx, y, x, _depth_at(table, b, ny, nx, y, x, background)


@njit(cache=True, inline="always")
def _probe(table, b, ny, nx, y, x, inv, u0, u1, v0, v1, background):  # pragma: no cover - numba
    """f = d(x + u / d(x)) - d(x + v / d(x)) at pixel (y, x), inv = scale / d(x), rounded to float32 as training
    compares it."""
    ya = y + int(np.floor(u0 * inv + 0.5))
    xa = x + int(np.floor(u1 * inv + 0.5))
    yc = y + int(np.floor(v0 * inv + 0.5))
    xc = x + int(np.floor(v1 * inv + 0.5))
    return np.float64(np.float32(_depth_at(table, b, ny, nx, ya, xa, background)
                                 - _depth_at(table, b, ny, nx, yc, xc, background)))


@njit(cache=True)
def _probe_apply(table, base, shape, points, packed, tree_root, background, background_leaf, scale):  # pragma: no cover
    """Traversal over `ForestArrays.packed` rows, on one thread: the walk of forests whose offsets are not float32
    numbers (drawn before offsets were whole numbers); every other forest takes `_probe_apply_compact`.

    `background_leaf[t] >= 0` is tree t's leaf for any background reference pixel (see `DepthProbes.apply`).
    """
    n = points.shape[0]
    n_trees = tree_root.shape[0]
    out = np.empty((n, n_trees), dtype=np.int32)
    for t in range(n_trees):
        root = tree_root[t]
        for i in range(n):
            b, ny, nx, y, x, d = _reference(table, base, shape, points, i, background)
            if d == background and background_leaf[t] >= 0:
                out[i, t] = background_leaf[t]
                continue
            inv = scale / d
            node = root
            while packed[node, 0] >= 0.0:
                f = _probe(table, b, ny, nx, y, x, inv, packed[node, 4], packed[node, 5], packed[node, 6],
                           packed[node, 7], background)
                go_left = f > packed[node, 2] and f <= packed[node, 3]
                node = int(packed[node, 0]) if go_left else int(packed[node, 1])
            out[i, t] = -int(packed[node, 0]) - 1
    return out


@njit(cache=True, parallel=True)
def _probe_apply_compact(table, base, shape, points, nodes, as_float, tree_root, background, background_leaf,
                         scale):  # pragma: no cover - numba
    """Traversal with scalar reads only, the per-frame hot path (Shotton et al.'s every-pixel apply), over
    `ForestArrays.packed_compact` rows (32 bytes a node, the left child next): `_probe_apply`'s arithmetic on the
    same values (float32 offsets and thresholds widened exactly), so the same leaves. (numba's prange: the engine's
    own thread ranges took about 1 ms more per 640 x 480 frame.)"""
    n = points.shape[0]
    n_trees = tree_root.shape[0]
    out = np.empty((n, n_trees), dtype=np.int32)
    for t in range(n_trees):
        root = tree_root[t]
        for i in prange(n):
            b, ny, nx, y, x, d = _reference(table, base, shape, points, i, background)
            if d == background and background_leaf[t] >= 0:
                out[i, t] = background_leaf[t]
                continue
            inv = scale / d
            node = root
            while nodes[node, 0] >= 0:
                f = _probe(table, b, ny, nx, y, x, inv, np.float64(as_float[node, 3]), np.float64(as_float[node, 4]),
                           np.float64(as_float[node, 5]), np.float64(as_float[node, 6]), background)
                go_left = f > np.float64(as_float[node, 1]) and f <= np.float64(as_float[node, 2])
                node = node + 1 if go_left else nodes[node, 0]
            out[i, t] = -nodes[node, 0] - 1
    return out


class DepthProbes(FeatureFamily):
    """Kinect-style depth-difference probes (eq. 3.2) over depth maps (background <= 0).

    Parameters
    ----------
    max_offset : float
        Offsets u, v are drawn uniformly in +-max_offset (pixels x depth units): at depth J a probe reaches
        max_offset / J pixels.
    background : float
        Depth read for background and out-of-image probes (a large constant, far behind any body).
    unary_fraction : float
        Share of candidates with v = 0 (a probe compared with the reference depth itself).
    offset_scale : float
        Multiplies every offset at apply time: the ratio of a camera's focal length to the focal length of the
        images the forest was trained on, so that a probe reaches the same distance in metres (not saved).
    """

    name = "depth_probe"
    param_width = 4
    n_features = 1

    def __init__(self, max_offset: float = 100_000.0, background: float = 1e6, unary_fraction: float = 0.0,
                 offset_scale: float = 1.0) -> None:
        if not max_offset > 0 or not background > 0 or not 0 <= unary_fraction <= 1 or not 0 < offset_scale < 1e3:
            raise InvalidInputError("max_offset and background must be positive, unary_fraction in [0, 1], "
                                    "offset_scale in (0, 1000)")
        self.max_offset = float(max_offset)
        self.background = float(background)
        self.unary_fraction = float(unary_fraction)
        self.offset_scale = float(offset_scale)

    def prepare(self, images, channels=None) -> ImageStack:
        if isinstance(images, ImageStack):  # stacked by the caller (a large training set held once)
            if images.integral or images.n_channels != 1:
                raise InvalidInputError("depth probes read a stack of raw depth maps, one channel each")
            stack = images
        else:
            # depth in mm as 16-bit integers or float32 (a frame as read): float32 tables, the same values read
            stack = ImageStack.from_images(images, integral=False, exact_float32=True)
        if np.any(stack.shape[:, 0] != 1):
            raise InvalidInputError("depth probes read 2-D depth maps")
        return stack

    def sample(self, rng, n_sets, n_candidates):
        # whole pixel x depth units (a thousandth of a pixel at 1 m in mm): the same probes, and model files
        # whose offsets compress (a body model's offsets were half of its bytes)
        out = np.round(rng.uniform(-self.max_offset, self.max_offset, (n_sets, n_candidates, 4)))
        if self.unary_fraction > 0:
            unary = rng.random((n_sets, n_candidates)) < self.unary_fraction
            out[unary, 2:] = 0.0
        return out

    def sample_draws(self, n_candidates):
        # one uniform (one 64-bit draw) per offset; the unary draws follow the whole table, so not then
        return 4 * n_candidates if self.unary_fraction == 0 else None

    def training_data(self, data):
        stack, points = data
        return cropped_depth_stack(stack, points)

    def responses(self, data, params, samples, pos_set):
        stack, points = data
        visit = np.argsort(points[samples, 0], kind="stable")  # grouped by map, node order within a map
        return _probe_responses(stack.table, stack.base, stack.shape, points, params, samples, pos_set,
                                self.background, self.offset_scale, visit)

    def apply(self, data, forest: ForestArrays) -> np.ndarray:
        stack, points = data
        compact = forest.packed_compact()
        if compact is not None:  # whole-number offsets (every model drawn since they are): half the bytes a node
            nodes, roots = compact
            return _probe_apply_compact(stack.table, stack.base, stack.shape, points, nodes, nodes.view(np.float32),
                                        roots, self.background, self._background_leaves(nodes, roots, True),
                                        self.offset_scale)
        table, roots = forest.packed()
        return _probe_apply(stack.table, stack.base, stack.shape, points, table, roots, self.background,
                            self._background_leaves(table, roots, False), self.offset_scale)

    def _background_leaves(self, table: np.ndarray, roots: np.ndarray, compact: bool) -> np.ndarray:
        """Each tree's leaf for background reference pixels, or -1 where it cannot be known in advance.

        At a background pixel every offset is divided by `background`; when the forest's largest offset is under
        half of it, both probes round back onto the pixel itself, read `background` twice, and f = 0 at every
        node. All such pixels then follow one path per tree: walking it once is exact, and most of a frame is
        background. `table`: `ForestArrays.packed_compact` rows when `compact`, else `packed` rows.
        """
        cached = getattr(self, "_background_cache", None)
        if cached is not None and cached[0]() is table and cached[1] == self.offset_scale:
            return cached[2]  # a forest's traversal table is built once, so its background leaves are too
        out = np.full(roots.shape[0], -1, dtype=np.int32)
        self._background_cache = (weakref.ref(table), self.offset_scale, out)
        rows = table.view(np.float32) if compact else table
        first, lo, hi = (3, 1, 2) if compact else (4, 2, 3)  # where the offsets and thresholds sit in a row
        split = table[:, 0] >= 0
        if split.any() and np.abs(rows[split, first:first + 4]).max() * self.offset_scale / self.background >= 0.5:
            return out
        zero = np.float32(0.0)
        for t, node in enumerate(roots):  # once per tree per call, a path of at most max_depth nodes
            node = int(node)
            while table[node, 0] >= 0:
                left = zero > np.float32(rows[node, lo]) and zero <= np.float32(rows[node, hi])
                if compact:
                    node = node + 1 if left else int(table[node, 0])
                else:
                    node = int(table[node, 0]) if left else int(table[node, 1])
            out[t] = -int(table[node, 0]) - 1
        return out

    def importance_dims(self, params):
        return np.zeros((params.shape[0], 1), dtype=np.int64), np.ones((params.shape[0], 1))

    def to_spec(self):
        return ({"name": self.name, "max_offset": self.max_offset, "background": self.background,
                 "unary_fraction": self.unary_fraction}, {})

    @classmethod
    def from_spec(cls, spec, arrays):
        return cls(spec["max_offset"], spec["background"], spec["unary_fraction"])

    def validate_params(self, params: np.ndarray) -> bool:
        # offsets (pixels x mm) within 1e8: 200,000 pixels at half a metre; larger ones overflow the pixel index
        return params.shape[1] == 4 and bool(np.all(np.isfinite(params)) and np.all(np.abs(params) < 1e8))
