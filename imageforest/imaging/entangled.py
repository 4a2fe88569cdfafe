"""Entangled decision forests: per-voxel classification whose deeper tests read the posteriors the same forest's
upper levels computed (Montillo, Shotton, Winn, Iglesias, Metaxas & Criminisi, "Entangled decision forests and
their application for semantic segmentation of CT images", IPMI 2011; Criminisi et al. 2012, sec. 8.4.1).

The trees grow in stages separated by the `entangled_depths`. The first stage's tests read displaced boxes of the
image. At the end of a stage every voxel of every training image's region descends the trees grown so far, and
the forest's posterior there (the average of the reached nodes' class histograms) becomes one map per class; the
next stage's tests read displaced boxes of the image *or* of those maps ("much Parotid 40 mm to the left"). Each
leaf of a stage grows on as a tree of the next stage, so the stages together are the T trees of depth D.
Prediction follows the same path: descend a stage, compute the maps, descend the next.

All stages live in one `ForestArrays`: stage k's trees are trees ``stage_trees_[k]:stage_trees_[k + 1]`` of the
arrays, and tree j of stage k + 1 continues leaf ``stage_leaves_[k] + j`` of stage k. Every leaf, intermediate
or final, keeps its class histogram (`leaf_posterior_`).

Image channels: the image itself and, with `image_windows`, one channel per intensity window (lo, hi): the image
mapped linearly to 0..1 between lo and hi and clipped outside, so that a box's mean over the channel is the share of
its voxels above a tissue's level rather than a mean that air or bone dominate (a CT box mean of 0 HU may be soft
tissue or fat beside bone; its bone window's mean tells which).

Context channels: one per class but the first (the background class, label 0, in a segmentation), whose posterior
is one minus the others'. Outside an image's region the maps are 0, at training and prediction alike.

With `prior_maps`, the context channels hold prior maps the caller gives (one per class but the first, for
example an atlas's share of each organ at each voxel) before the first stage, so that the first stage's tests may
read them too; after each stage the forest's posteriors replace them, as without priors. This is auto-context's
usual start (Tu & Bai, "Auto-context and its application to high-level vision tasks and 3D brain image
segmentation", 2010): the belief before the image is seen, which each stage refines.
"""

from __future__ import annotations

from itertools import pairwise
from typing import ClassVar

import numpy as np

from imageforest.estimators.base import numba_threads
from imageforest.estimators.classification import ClassificationForest
from imageforest.estimators.params import GROWTH, Anything, Boolean, ClassWeight, Options, Real, Rule, check_params
from imageforest.exceptions import InvalidInputError, ModelFormatError
from imageforest.forest.leaf_models import class_histograms, tree_average
from imageforest.forest.storage import ForestArrays
from imageforest.forest.threads import run_ranges
from imageforest.forest.trainer import grow_forest
from imageforest.imaging.features import BOX_WIDTH, BoxFeatures, ImageStack, box_spans, check_points
from imageforest.imaging.integral import clipped_box_mean, integral_image
from imageforest.imaging.io import Image
from imageforest.kernels import njit
from imageforest.validation import check_sample_weight

# A second box this far away (mm) lies outside any image and reads the fill value 0: the response is then the
# first box's mean (absolute intensities, posterior levels) rather than a difference of two boxes.
FAR_MM = 1.0e6
LOCAL_SCALE = 0.2  # a local candidate's first box lies within this share of max_offset_mm of the voxel


class ContextBoxFeatures(BoxFeatures):
    """Box differences over an image channel or, once `context_open`, a posterior channel.

    Channels 0..n_image-1 are the image's (the image, then its windows); the next n_context the class posterior
    maps. Both boxes of a test read the same channel; with probability `mean_share` the second box is out of reach
    (the test reads one box's mean). Saved as plain box features: prediction needs only the rows, not how they
    were drawn.
    """

    def __init__(self, max_offset_mm, box_size_mm, n_context: int, context_share: float, mean_share: float,
                 local_share: float = 0.0, n_image: int = 1) -> None:
        super().__init__(max_offset_mm, box_size_mm, difference=True, n_channels=n_image + n_context)
        self.n_image = int(n_image)
        self.n_context = int(n_context)
        self.context_share = float(context_share)
        self.mean_share = float(mean_share)
        self.local_share = float(local_share)
        self.context_open = False

    def sample(self, rng, n_sets, n_candidates):
        out = super().sample(rng, n_sets, n_candidates)
        shape = (n_sets, n_candidates)
        channel = rng.integers(0, self.n_image, shape) if self.n_image > 1 else np.zeros(shape, dtype=np.int64)
        if self.context_open and self.n_context:
            context = rng.random(shape) < self.context_share
            first = self.n_image
            channel = np.where(context, rng.integers(first, first + self.n_context, shape), channel)
        channel = channel.astype(np.float64)
        out[..., 0] = out[..., 7] = channel
        if self.local_share > 0:  # boxes near the voxel: its own intensity and its immediate surroundings
            local = rng.random(shape) < self.local_share
            out[..., 1:4] = np.where(local[..., None], out[..., 1:4] * LOCAL_SCALE, out[..., 1:4])
        alone = rng.random(shape) < self.mean_share
        out[..., 8:11] = np.where(alone[..., None], FAR_MM, out[..., 8:11])
        return out


@njit(cache=True, nogil=True)
def _descend_range(i0, i1, table, base, nz, ny, nx, zyx, nodes, spans, start, out):  # pragma: no cover - numba
    """From node start[i, t] (packed index) of every tree t, the leaf each voxel zyx[i] reaches: box differences
    as `BoxFeatures` computes them (float32 responses against float32 thresholds)."""
    for t in range(start.shape[1]):
        for i in range(i0, i1):
            z = zyx[i, 0]
            y = zyx[i, 1]
            x = zyx[i, 2]
            node = start[i, t]
            while nodes[node, 0] >= 0.0:
                sp = spans[node]
                v = clipped_box_mean(table, base[sp[0]], nz, ny, nx, z + sp[1], z + sp[2], y + sp[3], y + sp[4],
                                     x + sp[5], x + sp[6], 0.0)
                v -= clipped_box_mean(table, base[sp[7]], nz, ny, nx, z + sp[8], z + sp[9], y + sp[10],
                                      y + sp[11], x + sp[12], x + sp[13], 0.0)
                f = np.float64(np.float32(v))
                go_left = f > nodes[node, 2] and f <= nodes[node, 3]
                node = int(nodes[node, 0]) if go_left else int(nodes[node, 1])
            out[i, t] = -int(nodes[node, 0]) - 1


def _concatenate(stages: list[ForestArrays], depth_offsets: list[int]) -> ForestArrays:
    """One `ForestArrays` holding every stage's trees after one another (node, leaf and tree ids shifted)."""
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("params", "thr_lo", "thr_hi", "child", "depth", "gain",
                                                          "weight", "tree_root", "leaf_node", "leaf_tree")}
    nodes = leaves = trees = 0
    for forest, depth0 in zip(stages, depth_offsets, strict=True):
        child = forest.child.astype(np.int64)
        parts["child"].append(np.where(child >= 0, child + nodes, child - leaves).astype(np.int32))
        for key in ("params", "thr_lo", "thr_hi", "gain", "weight"):
            parts[key].append(getattr(forest, key))
        parts["depth"].append((forest.depth + depth0).astype(np.int32))
        parts["tree_root"].append((forest.tree_root + nodes).astype(np.int32))
        parts["leaf_node"].append((forest.leaf_node + nodes).astype(np.int32))
        parts["leaf_tree"].append((forest.leaf_tree + trees).astype(np.int32))
        nodes += forest.n_nodes
        leaves += forest.n_leaves
        trees += forest.n_trees
    return ForestArrays(**{k: np.ascontiguousarray(np.concatenate(v)) for k, v in parts.items()})


def _leaf_samples(grown) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """The positions of every leaf of a grown stage, leaf after leaf, as the next stage's per-tree samples
    (order, weights or None, bounds)."""
    start, end = grown.leaf_start, grown.leaf_end
    sizes = end - start
    bounds = np.zeros(sizes.size + 1, dtype=np.int64)
    np.cumsum(sizes, out=bounds[1:])
    pos = np.repeat(start - bounds[:-1], sizes) + np.arange(bounds[-1])
    weights = None if grown.position_weights is None else grown.position_weights[pos]
    return grown.order[pos], weights, bounds


class EntangledForest(ClassificationForest):
    """Per-voxel classification by an entangled forest (Montillo et al. 2011): tests read displaced boxes of the
    image and, after each of the `entangled_depths`, of the forest's own class posterior maps.

    Parameters
    ----------
    n_trees, max_depth : int
        T and D of the whole forest (all stages).
    entangled_depths : tuple of int
        Depths after which the posteriors are computed and become features (increasing, each in (0, D)); ()
        grows a plain per-voxel forest on the image's boxes alone.
    n_candidates : int
        rho, candidate tests per node.
    max_offset_mm : float or (z, y, x)
        Box centres lie within +- this of the voxel.
    box_size_mm : (min, max)
        Box edge lengths in mm.
    context_share : float
        Share of each entangled stage's candidates that read a posterior map (the others read the image).
    mean_share : float
        Share of candidates reading one box's mean rather than a difference of two boxes.
    local_share : float
        Share of candidates whose first box lies within a fifth of `max_offset_mm` of the voxel.
    image_windows : tuple of (lo, hi) pairs
        Intensity windows, each one more image channel that the image tests may read: the image mapped to 0..1
        between lo and hi (for a CT in HU, for example (-1000, -400) air, (-160, 240) soft tissue, (150, 1000)
        bone). () reads the image alone.
    prior_maps : bool
        The caller gives each image's prior maps (`priors=` to `fit`, `prior=` to prediction): one float map per
        class but the first, which the first stage's context tests read (`context_share` of its candidates).
    class_weight, n_thresholds, criterion, bootstrap, max_samples, min_samples_split, min_samples_leaf,
    min_gain, random_state, n_jobs
        As for `ClassificationForest`.

    Examples
    --------
    >>> forest = EntangledForest(n_trees=8, max_depth=16, entangled_depths=(8, 12))
    >>> forest.fit(scans, points, labels, regions=masks)      # points (n, 4) = (image, z, y, x)
    >>> posterior = forest.predict_proba_image(scan, region=mask)   # Image (z, y, x, n_classes)
    """

    task = "entangled-classification"
    threshold_sampling = "data"  # CT box means cluster (air, fat, soft tissue, bone); posteriors near 0 and 1
    parameter_constraints: ClassVar[dict[str, Rule]] = {
        **{k: GROWTH[k] for k in ("n_trees", "max_depth", "n_candidates", "n_thresholds", "bootstrap", "max_samples",
                                  "min_samples_split", "min_samples_leaf", "min_gain", "random_state", "n_jobs")},
        "criterion": Options(choices=("entropy", "gini")), "class_weight": ClassWeight(),
        "entangled_depths": Anything(), "max_offset_mm": Anything(), "box_size_mm": Anything(),
        "context_share": Real(0.0, 1.0), "mean_share": Real(0.0, 1.0),
        "local_share": Real(0.0, 1.0), "prior_maps": Boolean(), "image_windows": Anything()}

    def __init__(self, n_trees: int = 8, *, max_depth: int = 16, entangled_depths=(8, 12), n_candidates: int = 100,
                 n_thresholds: int | None = 16, criterion: str = "entropy", class_weight="balanced",
                 bootstrap: bool = False, max_samples=None, min_samples_split: int = 2, min_samples_leaf: int = 8,
                 min_gain: float = 0.0, max_offset_mm=60.0, box_size_mm=(3.0, 30.0), context_share: float = 0.5,
                 mean_share: float = 0.5, local_share: float = 0.0, image_windows=(), prior_maps: bool = False,
                 random_state=None, n_jobs: int | None = None) -> None:
        self.n_trees = n_trees
        self.max_depth = max_depth
        self.entangled_depths = entangled_depths
        self.n_candidates = n_candidates
        self.n_thresholds = n_thresholds
        self.criterion = criterion
        self.class_weight = class_weight
        self.bootstrap = bootstrap
        self.max_samples = max_samples
        self.min_samples_split = min_samples_split
        self.min_samples_leaf = min_samples_leaf
        self.min_gain = min_gain
        self.max_offset_mm = max_offset_mm
        self.box_size_mm = box_size_mm
        self.context_share = context_share
        self.mean_share = mean_share
        self.local_share = local_share
        self.image_windows = image_windows
        self.prior_maps = prior_maps
        self.random_state = random_state
        self.n_jobs = n_jobs

    # ClassificationForest's growth options this forest does not take
    posterior = "average"
    growth = "independent"

    def stage_bounds(self) -> list[int]:
        """[0, d_1, ..., D]: the depths at which the stages start and the forest ends."""
        depths = self.entangled_depths
        if not isinstance(depths, (tuple, list)) or not all(isinstance(d, (int, np.integer)) for d in depths):
            raise InvalidInputError(f"entangled_depths must be a tuple of ints, got {depths!r}")
        if self.max_depth is None:
            raise InvalidInputError("EntangledForest needs max_depth (the stages' depths add up to it)")
        bounds = [0, *(int(d) for d in depths), int(self.max_depth)]
        if any(b <= a for a, b in pairwise(bounds)):
            raise InvalidInputError(f"entangled_depths must increase strictly within (0, max_depth={self.max_depth}), "
                                    f"got {tuple(depths)}")
        return bounds

    def windows(self) -> np.ndarray:
        """The image windows as a (n_windows, 2) float array of (lo, hi), lo < hi, finite."""
        try:
            out = np.asarray(self.image_windows, dtype=np.float64)
        except (TypeError, ValueError):
            out = np.zeros((0, 3))
        out = out.reshape(0, 2) if out.size == 0 and out.ndim == 1 else out
        if out.ndim != 2 or out.shape[1] != 2:
            raise InvalidInputError(f"image_windows must be a tuple of (lo, hi) pairs, got {self.image_windows!r}")
        if not np.all(np.isfinite(out)) or np.any(out[:, 1] <= out[:, 0]):
            raise InvalidInputError(f"each image window (lo, hi) needs finite lo < hi, got {self.image_windows!r}")
        return out

    @property
    def n_image_channels(self) -> int:
        """Channels read from the image: the image and its windows."""
        return 1 + self.windows().shape[0]

    def _family(self, n_context: int) -> ContextBoxFeatures:
        try:
            size = tuple(float(v) for v in self.box_size_mm)
            offset = self.max_offset_mm if np.ndim(self.max_offset_mm) == 0 else tuple(self.max_offset_mm)
            return ContextBoxFeatures(offset, size, n_context, self.context_share, self.mean_share,
                                      self.local_share, self.n_image_channels)
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"max_offset_mm / box_size_mm: {exc}") from None

    def check_loaded_parameters(self) -> None:
        check_params(self)
        self.stage_bounds()
        self.windows()

    @classmethod
    def from_hyper_parameters(cls, hyper: dict, meta: dict):
        hyper = dict(hyper)
        for key in ("entangled_depths", "box_size_mm", "max_offset_mm"):
            if isinstance(hyper.get(key), list):
                hyper[key] = tuple(hyper[key])
        hyper.setdefault("image_windows", ())  # files saved before windows existed read the image alone
        if isinstance(hyper["image_windows"], list):
            hyper["image_windows"] = tuple(tuple(w) if isinstance(w, list) else w for w in hyper["image_windows"])
        return cls(**hyper)

    # -- inputs -------------------------------------------------------------------------------------------
    @staticmethod
    def _images(images) -> list:
        return [images] if isinstance(images, (Image, np.ndarray)) else list(images)

    @staticmethod
    def _regions(regions, stack: ImageStack) -> list[np.ndarray]:
        """One boolean (z, y, x) mask per image (None: every voxel)."""
        n = stack.n_images
        if regions is None:
            regions = [None] * n
        elif isinstance(regions, np.ndarray) and stack.n_images == 1 and regions.dtype == bool:
            regions = [regions]
        regions = list(regions)
        if len(regions) != n:
            raise InvalidInputError(f"give one region per image ({n}), got {len(regions)}")
        out = []
        for k, region in enumerate(regions):
            shape = tuple(int(v) for v in stack.shape[k])
            if region is None:
                out.append(np.ones(shape, dtype=bool))
                continue
            mask = np.asarray(region)
            mask = mask.reshape((1, *mask.shape)) if mask.ndim == 2 else mask
            if mask.shape != shape or mask.dtype != bool:
                raise InvalidInputError(f"region {k} must be a boolean mask of the image's shape {shape}, got "
                                        f"{mask.dtype} {mask.shape}")
            out.append(mask)
        return out

    def _stack(self, images, n_context: int, priors=None) -> ImageStack:
        """The images' integral tables: the image and its windows, then `n_context` context channels: the images'
        prior maps when `priors` (one (n_context, z, y, x) array per image, read in turn), else zero until a stage
        fills them."""
        images = self._images(images)
        given = None if priors is None else iter(range(len(images)))  # ImageStack reads the images in order
        windows = self.windows()

        def channels(im):
            arr = im.array if isinstance(im, Image) else np.asarray(im)
            own = [arr]
            for lo, hi in windows:
                own.append(np.clip((arr.astype(np.float32) - np.float32(lo)) / np.float32(hi - lo), 0.0, 1.0))
            if given is None:
                return own + [np.zeros(arr.shape, dtype=np.float32)] * n_context
            k = next(given)
            prior = np.asarray(priors[k], dtype=np.float32)
            if prior.shape != (n_context, *arr.shape):
                raise InvalidInputError(f"prior {k} must be ({n_context}, *image shape) float, got {prior.shape}")
            if not np.all(np.isfinite(prior)):
                raise InvalidInputError(f"prior {k} holds NaN or infinite values")
            return [*own, *prior]
        return ImageStack.from_images(images, integral=True, channels=channels)

    def _check_priors(self, priors, n_images: int) -> None:
        """Priors given exactly when the forest reads them, one per image."""
        if bool(self.prior_maps) != (priors is not None):
            raise InvalidInputError("this forest reads prior maps: give one per image (priors= / prior=)"
                                    if self.prior_maps else "this forest takes no prior maps (prior_maps=False)")
        if priors is not None and len(priors) != n_images:
            raise InvalidInputError(f"give one prior per image ({n_images}), got {len(priors)}")

    # -- growth -------------------------------------------------------------------------------------------
    def fit(self, images, points, labels, regions=None, sample_weight=None, priors=None) -> EntangledForest:
        """Grow the forest stage by stage on labelled voxels of images.

        Parameters
        ----------
        images : Image, array, or a list of them (3-D (z, y, x) or 2-D (y, x), scalar)
        points : (n, 4) int (image, z, y, x) or (n, 3) (image, y, x) voxel indices, inside their image's region
        labels : (n,) class labels; the first class (in sorted order) is the background, left out of the maps
        regions : one boolean mask per image (or None: the whole image) where posterior maps are computed
        sample_weight : (n,) or None
        priors : one (n_classes - 1, z, y, x) float array per image (a sequence read once, in order), with
            `prior_maps` only: the maps the first stage's context tests read
        """
        bounds = self.stage_bounds()
        check_params(self)  # prior_maps is read here, before `_settings` checks the others
        self._check_priors(priors, len(self._images(images)))
        n_points = len(points) if hasattr(points, "__len__") else 0
        sw = check_sample_weight(sample_weight, n_points)
        objective, sw = self._label_objective(labels, n_points, sw)
        n_context = self.classes_.size - 1
        family = self._family(n_context)
        stack = self._stack(images, n_context, priors)
        pts = check_points(points, stack)
        masks = self._regions(regions, stack)
        if not np.all([masks[i][tuple(pts[pts[:, 0] == i, 1:].T)].all() for i in np.unique(pts[:, 0])]):
            raise InvalidInputError("every training point must lie inside its image's region")
        settings = self._settings(family.n_features)
        settings.max_samples = self._max_samples(n_points)
        rng = np.random.default_rng(self.random_state)
        self.__dict__.pop("_online", None)
        stages, posteriors = [], []
        with numba_threads(self.n_jobs):
            grown = None
            for k, (lo, hi) in enumerate(pairwise(bounds)):
                settings.max_depth = hi - lo
                if k:
                    settings.samples = _leaf_samples(grown)
                    settings.n_trees = settings.samples[2].size - 1
                family.context_open = bool(k) or bool(self.prior_maps)
                if self.progress is not None:
                    self.progress(f"stage {k + 1} of {len(bounds) - 1}: depths {lo}-{hi}")
                grown = grow_forest(family, (stack, pts), n_points, objective, sw, settings, rng)
                stages.append(grown.forest)
                posteriors.append(class_histograms(grown.order, grown.position_weights, objective.labels,
                                                   grown.leaf_start, grown.leaf_end, objective.n_classes))
                if k < len(bounds) - 2:
                    self._set_forest(stages, posteriors, bounds, family)
                    for i in range(stack.n_images):
                        self._descend_image(stack.table, stack.base[i], stack.shape[i], stack.spacing[i],
                                            masks[i], upto=k + 1)
        del grown, stack
        self._set_forest(stages, posteriors, bounds, family)
        self.n_features_in_ = family.n_features
        self._prepare_apply()
        return self

    def _set_forest(self, stages, posteriors, bounds, family) -> None:
        self.forest_ = _concatenate(stages, bounds[:len(stages)])
        self.family_ = family
        self.leaf_posterior_ = np.ascontiguousarray(np.concatenate(posteriors))
        self.stage_trees_ = np.cumsum([0] + [f.n_trees for f in stages]).astype(np.int64)
        self.stage_leaves_ = np.cumsum([0] + [f.n_leaves for f in stages]).astype(np.int64)

    # -- prediction ---------------------------------------------------------------------------------------
    def _descend_image(self, table: np.ndarray, base: np.ndarray, shape, spacing, mask: np.ndarray,
                       upto: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Every voxel of `mask` through stages 0..upto-1 (all by default). After each stage that another follows
        in the full forest, the posterior maps are written as integral tables into the context channels
        (`base[n_image_channels:]`) of `table`, which is how the next stage (or, in training, the next stage's
        growth) reads them.

        Returns the region's voxels (m, 3) int32 (z, y, x) and their leaves in the last stage run, (m, T) int32.
        """
        n_stages = len(self.stage_bounds()) - 1
        upto = int(self.stage_trees_.size - 1) if upto is None else upto
        nodes_table, roots = self.forest_.packed()
        key = tuple(float(s) for s in spacing)
        cache = self.forest_.__dict__.setdefault("_spans", {})
        if key not in cache:  # one table per spacing, kept with the (immutable) forest
            cache.clear()
            cache[key] = (np.ascontiguousarray(nodes_table[:, :4]),
                          box_spans(np.ascontiguousarray(nodes_table[:, 4:4 + BOX_WIDTH]), np.asarray(spacing)))
        nodes, spans = cache[key]
        nz, ny, nx = (int(v) for v in shape)
        zyx = np.ascontiguousarray(np.argwhere(mask), dtype=np.int32)
        T = int(self.stage_trees_[1])
        start = np.ascontiguousarray(np.broadcast_to(roots[:T].astype(np.int32), (zyx.shape[0], T)))
        leaves = np.zeros((zyx.shape[0], T), dtype=np.int32)
        size = (nz + 1) * (ny + 1) * (nx + 1)
        base = np.ascontiguousarray(base, dtype=np.int64)
        for k in range(upto):
            run_ranges(_descend_range, zyx.shape[0], table, base, nz, ny, nx, zyx, nodes, spans, start, leaves,
                       min_per_thread=256)
            if k == n_stages - 1:
                break
            post = tree_average(leaves, self.leaf_posterior_)
            plane = np.zeros((nz, ny, nx))
            first = self.n_image_channels - 1  # class c's map is channel first + c
            for c in range(1, post.shape[1]):
                plane[mask] = post[:, c]
                table[base[first + c]:base[first + c] + size] = integral_image(plane).ravel()
            if k + 1 < upto:
                start = roots[self.stage_trees_[k + 1] + (leaves - self.stage_leaves_[k])].astype(np.int32)
        return zyx, leaves

    def _image_leaves(self, image, region, prior=None) -> tuple[np.ndarray, np.ndarray]:
        """(voxels (m, 3) z, y, x, final leaves (m, T)) of one image's region (default: every voxel)."""
        self.check_fitted()
        priors = None if prior is None else [prior]
        self._check_priors(priors, 1)
        n_context = self.classes_.size - 1
        stack = self._stack([image], n_context, priors)
        mask = self._regions([region], stack)[0]
        with numba_threads(self.n_jobs):
            return self._descend_image(stack.table, stack.base[0], stack.shape[0], stack.spacing[0], mask)

    def apply(self, images, points, regions=None, priors=None) -> np.ndarray:  # type: ignore[override]
        """Final leaf ids (n_points, T) of the given points (each inside its image's region)."""
        return self._at_points(images, points, regions, priors, lambda leaves: leaves)

    def predict_proba(self, images, points, regions=None, priors=None) -> np.ndarray:  # type: ignore[override]
        """Posterior p(c | voxel), (n_points, n_classes): the maps are computed over each image's region (default:
        the whole image), which must hold the points; `priors` as for `fit`."""
        return self._at_points(images, points, regions, priors, self.posterior_from_leaves)

    def predict(self, images, points, regions=None, priors=None) -> np.ndarray:  # type: ignore[override]
        return self.classes_[np.argmax(self.predict_proba(images, points, regions, priors), axis=1)]

    def _at_points(self, images, points, regions, priors, read) -> np.ndarray:
        self.check_fitted()
        images = self._images(images)
        # the points are checked against the images' shapes alone: each image's own tables (windows, maps) are
        # built once, by `_image_leaves`
        stack = ImageStack.from_images(images, integral=False)
        pts = check_points(points, stack)
        regions = [None] * len(images) if regions is None else list(regions)
        if len(regions) != len(images):
            raise InvalidInputError(f"give one region per image ({len(images)}), got {len(regions)}")
        self._check_priors(priors, len(images))
        out = None
        for i in np.unique(pts[:, 0]):
            zyx, leaves = self._image_leaves(images[i], regions[i], None if priors is None else priors[i])
            values = read(leaves)
            if out is None:
                out = np.zeros((pts.shape[0], values.shape[1]), dtype=values.dtype)
            shape = tuple(int(v) for v in stack.shape[i])
            index = np.full(int(np.prod(shape)), -1, dtype=np.int64)
            index[np.ravel_multi_index(tuple(zyx.T), shape)] = np.arange(zyx.shape[0])
            sel = pts[:, 0] == i
            rows = index[np.ravel_multi_index(tuple(pts[sel, 1:].T), shape)]
            if np.any(rows < 0):
                raise InvalidInputError(f"a point of image {i} lies outside its region")
            out[sel] = values[rows]
        return out

    def predict_proba_image(self, image, region=None, prior=None) -> Image:
        """Posterior of every voxel of the region (others get 0) as an image with the input's geometry: array
        (z, y, x, n_classes) (or (y, x, n_classes)), float32. `prior`: the image's (n_classes - 1, z, y, x) prior
        maps, with `prior_maps` only."""
        img = image if isinstance(image, Image) else Image(np.asarray(image), np.ones(np.ndim(image)),
                                                          np.zeros(np.ndim(image)), np.eye(np.ndim(image)))
        zyx, leaves = self._image_leaves(img, region, prior)
        shape = img.array.shape[:img.ndim]
        out = np.zeros((*((1,) if len(shape) == 2 else ()), *shape, self.classes_.size), dtype=np.float32)
        out[tuple(zyx.T)] = self.posterior_from_leaves(leaves)
        return Image(out.reshape(*shape, self.classes_.size), img.spacing.copy(), img.origin.copy(),
                     img.direction.copy(), source=img.source, notes=[*img.notes, "class posteriors"])

    def context_use(self) -> np.ndarray:
        """Split nodes reading each channel, per stage: (n_stages, n_image_channels + n_context) int64: first the
        image and its windows, then channel n_image_channels - 1 + c the context map of class c (the model's
        `classes_[c]`)."""
        self.check_fitted()
        tree_of_node = self.forest_.node_tree()
        stage = np.searchsorted(self.stage_trees_, tree_of_node, side="right") - 1
        split = self.forest_.child >= 0
        channel = self.forest_.params[:, 0].astype(np.int64)
        out = np.zeros((self.stage_trees_.size - 1, self.n_image_channels + self.classes_.size - 1), dtype=np.int64)
        np.add.at(out, (stage[split], channel[split]), 1)
        return out

    # -- model files --------------------------------------------------------------------------------------
    def leaf_arrays(self) -> dict[str, np.ndarray]:
        return {**super().leaf_arrays(), "stage.trees": self.stage_trees_, "stage.leaves": self.stage_leaves_}

    def restore_leaves(self, meta: dict, arrays: dict[str, np.ndarray]) -> None:
        super().restore_leaves(meta, arrays)
        trees, leaves = arrays.get("stage.trees"), arrays.get("stage.leaves")
        n_stages = len(self.stage_bounds()) - 1
        forest = self.forest_
        for name, value, total in (("stage.trees", trees, forest.n_trees), ("stage.leaves", leaves,
                                                                              forest.n_leaves)):
            if (value is None or value.dtype != np.int64 or value.shape != (n_stages + 1,) or value[0] != 0
                    or value[-1] != total or np.any(np.diff(value) <= 0)):
                raise ModelFormatError(f"{name} must hold the {n_stages} stages' increasing offsets, 0 to {total}")
        # tree j of stage k + 1 continues leaf j of stage k; stage k's leaves lie in stage k's trees
        if np.any(np.diff(trees)[1:] != np.diff(leaves)[:-1]):
            raise ModelFormatError("each stage must hold one tree per leaf of the stage before")
        stage_of_leaf = np.searchsorted(leaves, np.arange(forest.n_leaves), side="right") - 1
        if np.any(np.searchsorted(trees, forest.leaf_tree, side="right") - 1 != stage_of_leaf):
            raise ModelFormatError("a stage's leaves lie in another stage's trees")
        if self.classes_.size - 1 != self.family_.n_channels - self.n_image_channels:
            raise ModelFormatError("the model's context channels do not match its classes")
        self.stage_trees_, self.stage_leaves_ = trees, leaves
