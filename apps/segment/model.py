"""SegmentationForest: the per-pixel forest of interactive segmentation, and what applying it to an image gives.

A `ClassificationForest` (axis-aligned weak learners over the features of `imageforest.apps.segment.features`)
whose model file also records the image kind, channel count and filter scales it was trained on, so that it is
applied only to images that give the same features.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from imageforest.apps.segment.features import (
    KINDS,
    PLANAR_SCALES,
    VOLUME_SCALES_MM,
    PreparedImage,
    Tile,
    image_kind,
    n_features,
    prepare,
    stretch_bounds,
)
from imageforest.estimators.base import numba_threads
from imageforest.estimators.classification import ClassificationForest
from imageforest.estimators.params import Real, Rule
from imageforest.exceptions import InvalidInputError, ModelFormatError
from imageforest.forest.threads import n_threads, run_ranges
from imageforest.imaging.io import Image
from imageforest.imaging.regularize import graph_cut
from imageforest.kernels import njit

# Pictures above this many pixels (2048 x 2048) are segmented in tiles of TILE x TILE pixels. The forest and the
# cut see each tile with a margin of TILE_MARGIN pixels, so that neighbouring tiles agree at their seams; the
# filters read TILE_HALO pixels around the core, the margin plus the largest filter's reach (48 pixels: 4 sigma of
# the scale-8 Gaussians, the structure tensor's outer window included), so the margin's features are the picture's.
TILED_ABOVE = 1 << 22
TILE = 1024
TILE_MARGIN = 16
TILE_HALO = TILE_MARGIN + 48


@dataclass
class Segmentation:
    """One segmentation of an image.

    Attributes
    ----------
    labels : spatial shape, the scribble number each pixel was assigned (uint8, or uint16 past 255)
    probabilities : spatial shape + (K,) float32, per-class posterior, classes in `classes` order; None when only
        the labels were asked for (`SegmentationForest.segment(..., maps=False)`)
    uncertainty : spatial shape float32, entropy of the posterior (nats; log K at most); None with the
        probabilities
    classes : (K,) the scribble numbers
    timing_s : seconds per step
    posterior_sums : (K,) float64, each class's posterior summed over the pixels labelled with it (kept when the
        maps are not; None otherwise)
    class_counts : (K,) int64, the pixels labelled with each class, counted tile by tile (None: count `labels`);
        `labels` may then be an on-disk array (`segment_tiles(..., labels_out=...)`)
    """

    labels: np.ndarray
    probabilities: np.ndarray | None
    uncertainty: np.ndarray | None
    classes: np.ndarray
    timing_s: dict[str, float] = field(default_factory=dict)
    posterior_sums: np.ndarray | None = None
    class_counts: np.ndarray | None = None

    def pixel_counts(self) -> np.ndarray:
        """(K,) int64, the pixels (voxels) labelled with each class, in `classes` order."""
        if self.class_counts is not None:
            return self.class_counts
        return np.array([np.count_nonzero(self.labels == c) for c in self.classes], dtype=np.int64)

    def mean_posterior(self) -> np.ndarray:
        """(K,) each class's mean posterior over the pixels labelled with it (NaN for a class with none)."""
        counts = self.pixel_counts().astype(np.float64)
        if self.posterior_sums is not None:
            sums = self.posterior_sums
        else:
            sums = np.array([self.probabilities[..., k][self.labels == c].sum(dtype=np.float64)
                             for k, c in enumerate(self.classes)])
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def _array_like(values):
    """`values` as they are when they slice like an array without being read (dask, zarr), else as a numpy array."""
    if isinstance(values, np.ndarray):
        return values
    if all(hasattr(values, name) for name in ("shape", "ndim", "dtype", "__getitem__")):
        return values
    return np.asarray(values)


def entropy(p: np.ndarray) -> np.ndarray:
    """Shannon entropy (nats) over the last axis, float32, shape p.shape[:-1]."""
    rows = np.ascontiguousarray(p).reshape(-1, p.shape[-1])
    out = np.empty(rows.shape[0], dtype=np.float32)
    run_ranges(_entropy_range, rows.shape[0], rows, out, min_per_thread=16384)
    return out.reshape(p.shape[:-1])


@njit(cache=True, nogil=True)
def _entropy_range(i0, i1, rows, out):  # pragma: no cover - numba
    for i in range(i0, i1):
        h = 0.0
        for k in range(rows.shape[1]):
            v = rows[i, k]
            if v > 0:
                h -= v * np.log(v)
        out[i] = h


def label_dtype(classes: np.ndarray) -> type:
    return np.uint8 if int(np.max(classes)) < 256 else np.uint16


# Largest graph-cut boundary weight (200 times the pictures' default): far beyond it the cut's capacities swamp the
# posterior's terms in floating point (1e300 gave NaN capacities and an all-background mask).
MAX_SMOOTHNESS = 1e4


class SegmentationForest(ClassificationForest):
    """Per-pixel classification forest for segmentation from scribbles.

    Parameters
    ----------
    n_trees, max_depth, n_candidates, min_samples_leaf, class_weight, random_state, n_jobs
        As for `ClassificationForest` (T, D, rho, leaf size, None or "balanced", seed, threads).
    smoothness : float
        Weight of the graph cut's contrast-sensitive boundary term when the forest is applied to a new image
        (`imageforest.imaging.regularize`); 0 gives the forest's argmax.

    Attributes
    ----------
    classes_ : (K,) the scribble numbers; image_kind_ : "grey", "rgb" or "volume"; n_channels_ : guide channels
    """

    task = "interactive-segmentation"
    parameter_constraints: ClassVar[dict[str, Rule]] = {**ClassificationForest.parameter_constraints,
                                                         "smoothness": Real(0.0, MAX_SMOOTHNESS)}
    default_candidates = "sqrt"
    weak_learner = "axis"
    n_thresholds = 16
    criterion = "entropy"
    posterior = "average"
    bootstrap = False
    max_samples = None
    min_samples_split = 2
    min_gain = 0.0
    structure = "tree"
    two_sided = False

    def __init__(self, n_trees: int = 20, *, max_depth: int | None = 12, n_candidates="sqrt",
                 min_samples_leaf: int = 3, class_weight=None, smoothness: float = 50.0, random_state=0,
                 n_jobs: int | None = None) -> None:
        self.n_trees = n_trees
        self.class_weight = class_weight
        self.max_depth = max_depth
        self.n_candidates = n_candidates
        self.min_samples_leaf = min_samples_leaf
        self.smoothness = smoothness
        self.random_state = random_state
        self.n_jobs = n_jobs

    @classmethod
    def for_kind(cls, volume: bool, **overrides) -> SegmentationForest:
        """The forest a segmentation of a picture or a volume starts from (`recipe.py`), any setting in
        `overrides` replacing the recipe's (None leaves it)."""
        from imageforest.apps.segment.recipe import PICTURE, VOLUME

        kind = VOLUME if volume else PICTURE
        settings = {name: kind[name] for name in ("max_depth", "min_samples_leaf", "class_weight")}
        settings.update({k: v for k, v in overrides.items() if v is not None and k != "n_trees"})
        n_trees = overrides.get("n_trees")
        return cls(kind["n_trees"] if n_trees is None else n_trees, **settings)

    def fit_pixels(self, prepared: PreparedImage, index: np.ndarray, labels: np.ndarray,
                   sample_weight: np.ndarray | None = None) -> SegmentationForest:
        """Grow on the pixels `index` (flat, into `prepared.features`) with scribble numbers `labels`."""
        self.fit(prepared.features[index], labels, sample_weight=sample_weight)
        self.image_kind_ = prepared.kind
        self.n_channels_ = prepared.n_channels
        return self

    def check_image(self, prepared: PreparedImage) -> None:
        """Refuse an image whose features differ from the training image's (kind, channels)."""
        self.check_fitted()
        if prepared.kind != self.image_kind_ or prepared.n_channels != self.n_channels_:
            raise InvalidInputError(f"this model was trained on {self.image_kind_} images with {self.n_channels_} "
                                    f"channel(s), not on a {prepared.kind} image with {prepared.n_channels}")

    def pixel_posterior(self, prepared: PreparedImage) -> np.ndarray:
        """(n_voxels, K) forest posterior of every voxel."""
        self.check_image(prepared)
        features = prepared.features
        if (features.dtype == np.float32 and features.flags.c_contiguous and features.ndim == 2
                and features.shape[1] == self.n_features_in_):  # `prepare` built them from a finite image
            return self._posterior_of_checked(features)
        return self.predict_proba(features)

    def segment(self, image, spacing=None, rgb: bool | None = None, maps: bool = True,
                labels_to=None) -> Segmentation:
        """Segment a new image (no scribbles): the forest's posterior, regularised by the graph cut. Pictures of
        more than `TILED_ABOVE` pixels are segmented in tiles (`segment_tiles`; `maps` False keeps only their labels
        and each class's posterior sums, 1-2 bytes a pixel instead of 13-16). `labels_to`: a new folder where such a
        picture segmented without maps keeps its labels, written tile by tile into an on-disk array (`label_store`)
        that the result's `labels` then is; they are never in memory."""
        self.check_fitted()
        if not isinstance(image, PreparedImage):
            array = _array_like(image.array if isinstance(image, Image) else image)
            colour = (image.ndim == 2 and array.ndim == 3) if isinstance(image, Image) and rgb is None else rgb
            if image_kind(array, colour) != "volume" and array.shape[0] * array.shape[1] > TILED_ABOVE:
                labels_out = None
                if labels_to is not None and not maps:
                    from imageforest.imaging.ome_zarr import label_store

                    labels_out = label_store(labels_to, array.shape[:2], label_dtype(self.classes_), TILE)
                return self.segment_tiles(array, colour, maps=maps, labels_out=labels_out)
            if isinstance(image, Image) and not isinstance(image.array, np.ndarray):
                image = Image(np.asarray(array), image.spacing, image.origin, image.direction, image.source)
        prepared = image if isinstance(image, PreparedImage) else prepare(image, spacing, rgb)
        p = self.pixel_posterior(prepared).astype(np.float32)  # checks the image fits the model
        grid = p.reshape(*prepared.guide.shape[:3], -1)
        idx = graph_cut(grid, prepared.guide, prepared.spacing, float(self.smoothness))
        shape = prepared.shape
        return Segmentation(self.classes_[idx].reshape(shape).astype(label_dtype(self.classes_)),
                            p.reshape(*shape, -1), entropy(p).reshape(shape), self.classes_.copy())

    def segment_tiles(self, picture, rgb: bool | None = None, tile: int = TILE, halo: int = TILE_HALO,
                      maps: bool = True, labels_out=None, margin: int = TILE_MARGIN) -> Segmentation:
        """`segment` of a picture (y, x) or (y, x, 3|4) tile by tile, so that memory follows the tile, not the
        picture: each `tile` x `tile` core with a margin of `margin` pixels gets its features (the filters reading
        `halo` pixels around the core: with `halo` >= `margin` + 48 they are the whole picture's), its posterior
        and its cut, coarse to fine (`graph_cut(..., banded=True)`); only the core is kept. `picture` may be a
        dask or zarr array (or an OME-Zarr `ChunkedArray`): each tile then reads only its own part. Without
        `maps` the posterior and uncertainty maps are not kept (`Segmentation.posterior_sums` instead).
        `labels_out`: an array (y, x) of the label dtype, e.g. an on-disk zarr array whose chunks each lie within
        one tile (`label_store`), that each tile writes its labels into as it finishes; the picture's labels are
        then never held in memory."""
        self.check_fitted()
        array = _array_like(picture)  # a dask or zarr array stays one: each tile reads its own part
        kind = image_kind(array, rgb)
        if kind == "volume":
            raise InvalidInputError("volumes are segmented whole; tiles are for pictures")
        if tile < 16 or not 0 <= margin <= halo:
            raise InvalidInputError(f"tiles need a side of at least 16 pixels and 0 <= margin <= halo, got tile "
                                    f"{tile}, margin {margin}, halo {halo}")
        h, w = array.shape[:2]
        bounds = None
        if kind == "grey":  # the whole picture's stretch; a picture not in memory gives it from a grid of 16M pixels
            step = max(1, int(np.ceil(np.sqrt(h * w / float(1 << 24))))) if not isinstance(array, np.ndarray) else 1
            bounds = stretch_bounds(np.asarray(array[::step, ::step]).astype(np.float32))
        n_classes = self.classes_.size
        if labels_out is None:
            labels = np.empty((h, w), dtype=label_dtype(self.classes_))
        else:
            labels = labels_out
            chunks = tuple(getattr(labels_out, "chunks", (tile, tile)))
            wanted = np.dtype(label_dtype(self.classes_))
            if (tuple(labels_out.shape) != (h, w) or np.dtype(labels_out.dtype) != wanted or len(chunks) != 2
                    or any(tile % int(c) for c in chunks)):
                raise InvalidInputError(f"labels_out must be {(h, w)} {wanted} with chunks that divide the tile "
                                        f"({tile}), got {tuple(labels_out.shape)} {np.dtype(labels_out.dtype)} "
                                        f"chunks {chunks}")
        proba = np.empty((h, w, n_classes), dtype=np.float32) if maps else None
        uncertainty = np.empty((h, w), dtype=np.float32) if maps else None
        sums: dict[tuple[int, int], np.ndarray] = {}  # per tile, summed in tile order (the same whatever the threads)
        counts: dict[tuple[int, int], np.ndarray] = {}
        # Each thread writes its tiles' feature matrices into one buffer: a fresh matrix per tile would be new
        # pages every time (about 150 MB a tile with its margin, 0.2 s to touch).
        buffers = threading.local()
        largest = min(tile + 2 * margin, h) * min(tile + 2 * margin, w) * int(self.n_features_in_)

        def one_tile(corner: tuple[int, int]) -> None:
            y0, x0 = corner
            y1, x1 = min(y0 + tile, h), min(x0 + tile, w)
            ya, xa, yb, xb = max(y0 - halo, 0), max(x0 - halo, 0), min(y1 + halo, h), min(x1 + halo, w)
            if getattr(buffers, "features", None) is None:
                buffers.features = np.empty(largest, dtype=np.float32)
            # the part the forest and the cut see: the core and its margin, within the read part
            wa, wb = max(y0 - margin, 0), min(y1 + margin, h)
            va, vb = max(x0 - margin, 0), min(x1 + margin, w)
            prepared = prepare(np.asarray(array[ya:yb, xa:xb]), rgb=kind == "rgb",
                               tile=Tile((ya, xa), (h, w), bounds), buffer=buffers.features,
                               window=(slice(wa - ya, wb - ya), slice(va - xa, vb - xa)))
            p = self.pixel_posterior(prepared).astype(np.float32)
            idx = graph_cut(p.reshape(*prepared.guide.shape[:3], -1), prepared.guide, prepared.spacing,
                            float(self.smoothness), banded=True)
            core = (slice(y0 - wa, y1 - wa), slice(x0 - va, x1 - va))
            chosen = idx.reshape(prepared.shape)[core]
            labels[y0:y1, x0:x1] = self.classes_[chosen]  # a chunk of its own when `labels_out` is on disk
            counts[corner] = np.bincount(chosen.ravel(), minlength=n_classes)
            p = p.reshape(*prepared.shape, n_classes)[core]
            if maps:
                proba[y0:y1, x0:x1] = p
                uncertainty[y0:y1, x0:x1] = entropy(p)
            else:
                picked = np.take_along_axis(p, chosen[..., None].astype(np.intp), axis=-1)[..., 0]
                sums[corner] = np.bincount(chosen.ravel(), weights=picked.ravel(), minlength=n_classes)

        corners = [(y0, x0) for y0 in range(0, h, tile) for x0 in range(0, w, tile)]
        workers = min(n_threads(), len(corners))
        if workers <= 1:
            for corner in corners:
                one_tile(corner)
        else:
            # Tiles side by side, each on one thread: the max-flow is sequential by nature, so a tile's cut runs on
            # one core while another tile's features and forest use the other. Each tile's values are those of a
            # serial run.
            def serial_tile(corner: tuple[int, int]) -> None:
                with numba_threads(1):
                    one_tile(corner)

            with ThreadPoolExecutor(workers, thread_name_prefix="imageforest-tile") as pool:
                list(pool.map(serial_tile, corners))
        totals = None if maps else np.sum([sums[c] for c in corners], axis=0)
        return Segmentation(labels, proba, uncertainty, self.classes_.copy(), posterior_sums=totals,
                            class_counts=np.sum([counts[c] for c in corners], axis=0).astype(np.int64))

    def segment_frames(self, frames, rgb: bool | None = None) -> np.ndarray:
        """Labels of every frame of a stack of pictures (or slice of a volume) segmented one by one with a model
        of pictures: frames (n, y, x) grey or (n, y, x, 3|4) colour; returns (n, y, x)."""
        self.check_fitted()
        if self.image_kind_ == "volume":
            raise InvalidInputError("this model segments volumes; give it the whole volume, not its slices")
        stack = np.asarray(frames)
        if stack.ndim not in (3, 4):
            raise InvalidInputError(f"a stack of pictures has 3 or 4 axes, got shape {stack.shape}")
        return np.stack([self.segment(frame, rgb=rgb if frame.ndim == 3 else None).labels for frame in stack])

    # -- model files --------------------------------------------------------------------------------------
    def extra_metadata(self) -> dict:
        return {**super().extra_metadata(), "image_kind": self.image_kind_, "n_channels": int(self.n_channels_)}

    def restore_leaves(self, meta: dict, arrays: dict[str, np.ndarray]) -> None:
        super().restore_leaves(meta, arrays)
        kind, channels = meta.get("image_kind"), meta.get("n_channels")
        if kind not in KINDS or not isinstance(channels, int) or not 1 <= channels <= 4:
            raise ModelFormatError("the model does not say which images it segments (image_kind, n_channels)")
        scales = VOLUME_SCALES_MM if kind == "volume" else PLANAR_SCALES
        if self.n_features_in_ != n_features(kind, channels, len(scales)):
            raise ModelFormatError(f"the model reads {self.n_features_in_} features; {kind} images with "
                                   f"{channels} channel(s) give {n_features(kind, channels, len(scales))}")
        if self.classes_.dtype.kind not in "iu" or self.classes_.min() < 1:
            raise ModelFormatError("segmentation classes must be positive scribble numbers")
        self.image_kind_, self.n_channels_ = kind, channels
