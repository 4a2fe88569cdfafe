"""HoughForestDetector: class-specific Hough forests for object detection (Gall and Lempitsky, CVPR 2009).

Training images are rescaled so that every object has the same size (`object_size`, the geometric mean of the box
sides, in pixels); 16x16 patches are drawn inside the boxes (object patches, each with its offset to the box
centre and the box's size) and outside them or from background images (background patches). Trees are grown on
pixel-pair tests of the 32 `hough_channels`; each node chooses at random whether it reduces the class-label
uncertainty of all patches or the offset uncertainty of the object patches (Criminisi et al. 2012, sec. 3.5 and
ch. 4: the same engine, two objectives). A leaf keeps its share of object patches and their offsets.

Detection rescales the image to a few scales (object sizes relative to the image, learnt from the training boxes),
lets every pixel's patch vote for object centres (`imageforest.voting.hough`), smooths each Hough image, takes its
maxima, reads each maximum's box size from its votes, and keeps the strongest boxes by non-maximum suppression.

References
----------
J. Gall, V. Lempitsky, "Class-specific Hough forests for object detection", CVPR 2009.
A. Criminisi, J. Shotton, E. Konukoglu, "Decision forests: a unified framework for classification, regression,
density estimation, manifold learning and semi-supervised learning", 2012.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from imageforest.estimators.base import BaseForest, numba_threads
from imageforest.estimators.params import GROWTH, Boolean, Integer, Options, Real, RealEach, Rule, check_params
from imageforest.exceptions import InvalidInputError, ModelFormatError, NotFittedError
from imageforest.forest.losses import LOSSES
from imageforest.forest.objectives import NodeObjectives, Objective
from imageforest.imaging.channels import N_CHANNELS, as_rgb, hough_channels
from imageforest.imaging.pixel_pairs import PixelPairs, stack_channels
from imageforest.voting.hough import cast_votes, hough_peaks, non_maximum_suppression, peak_viewpoints, viewpoint_of

MAX_DETECTIONS = 100
VARIANTS = ("hough", "adhf")
PEAKS_PER_SCALE = 8


@dataclass
class Detection:
    """One detected object.

    Attributes
    ----------
    box_xyxy : [x0, y0, x1, y1] in the input image's pixels (x0, y0 the top-left corner, x1, y1 exclusive)
    score : vote mass at the Hough maximum (expected number of object patches voting for this centre)
    scale : factor the image was resized by when the object was found (its size / the learnt object size)
    viewpoint : (azimuth_deg, spread_deg) when the model knows viewpoints: the mode of the azimuths of the votes
        for this centre, and their root-mean-square distance from it above the distribution's floor
        (`imageforest.voting.hough.viewpoint_of`); else None
    """

    box_xyxy: list[float]
    score: float
    scale: float
    viewpoint: tuple[float, float] | None = None

    def to_json(self) -> dict:
        out = {"box_xyxy": [round(float(v), 2) for v in self.box_xyxy], "score": round(float(self.score), 4),
               "scale": round(float(self.scale), 4)}
        if self.viewpoint is not None:
            out["viewpoint"] = {"azimuth_deg": round(float(self.viewpoint[0]), 1) % 360.0,  # 359.97 -> 0.0
                                "spread_deg": round(float(self.viewpoint[1]), 1)}
        return out


@dataclass
class DetectionResult:
    """What `HoughForestDetector.detect` gives for one image.

    Attributes
    ----------
    detections : strongest first, after suppression and the score threshold
    hough : per scale, the smoothed Hough image resized to the input's (height, width), float32 (only when asked)
    scales : the resize factors searched
    timing_s : seconds per step
    """

    detections: list[Detection]
    hough: list[np.ndarray] | None
    scales: list[float]
    timing_s: dict[str, float] = field(default_factory=dict)


def check_boxes(boxes, shape: tuple[int, int], what: str) -> np.ndarray:
    """Boxes (k, 4) float64 [x0, y0, x1, y1], at least one, each non-empty and inside an image of `shape` (h, w)."""
    b = np.asarray(boxes, dtype=np.float64)
    if b.ndim == 1 and b.size == 4:
        b = b[None]
    if b.ndim != 2 or b.shape[1] != 4:
        raise InvalidInputError(f"{what}: boxes must have shape (k, 4) = [x0, y0, x1, y1], got {b.shape}")
    if b.shape[0] == 0:
        raise InvalidInputError(f"{what} has no boxes; every training image needs at least one object")
    if not np.isfinite(b).all():
        raise InvalidInputError(f"{what}: a box holds NaN or infinite coordinates")
    h, w = shape
    bad = (b[:, 0] < 0) | (b[:, 1] < 0) | (b[:, 2] > w) | (b[:, 3] > h) | (b[:, 2] <= b[:, 0]) | (b[:, 3] <= b[:, 1])
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise InvalidInputError(f"{what}: box {b[k].tolist()} is empty or outside the {w}x{h} image")
    return b


def resize(rgb: np.ndarray, scale: float) -> np.ndarray:
    """An RGB image resized by `scale` (bilinear, low-pass filtered when shrinking), float32."""
    from skimage.transform import rescale

    if scale == 1.0:
        return rgb
    return rescale(rgb, scale, order=1, channel_axis=-1, anti_aliasing=scale < 1.0, preserve_range=True
                   ).astype(np.float32)


def _rng_seed(rng: np.random.Generator) -> int:
    return int(rng.integers(0, 2**63 - 1))


WINDOW_PREFIX = "window."  # model-file arrays of the window classifier
VOTE_REACH = 16  # object sizes a leaf's vote (centre offset, object size) may span at most
FILLED = 0.9  # training boxes covering this share of their image are crops: they say nothing of object sizes


def mirror(rgb: np.ndarray, boxes: np.ndarray, azimuth: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An image mirrored left to right, with its boxes and viewpoints: azimuth a becomes 180 - a (degrees), the
    convention in which 0 and 180 are the two side views and 90 and 270 the back and the front."""
    w = rgb.shape[1]
    flipped = np.c_[w - boxes[:, 2], boxes[:, 1], w - boxes[:, 0], boxes[:, 3]]
    return np.ascontiguousarray(rgb[:, ::-1]), flipped, np.mod(180.0 - azimuth, 360.0)


def viewpoint_targets(azimuth: np.ndarray, bins: int) -> np.ndarray:
    """Regression targets that make a node's squared error the viewpoint uncertainty of its object patches:
    the unit vector (cos a, sin a) (bins 0), or the one-hot vector of the azimuth's bin among `bins` equal ones
    (squared error of a one-hot vector is the Gini impurity). NaN rows (background patches) count for nothing."""
    a = np.asarray(azimuth, dtype=np.float64)
    known = np.isfinite(a)
    if bins == 0:
        out = np.c_[np.cos(np.deg2rad(a)), np.sin(np.deg2rad(a))]
    else:
        out = np.zeros((a.size, bins))
        out[np.flatnonzero(known), azimuth_bin(a[known], bins)] = 1.0
    out[~known] = np.nan
    return out


def azimuth_bin(azimuth: np.ndarray, bins: int) -> np.ndarray:
    """Bin index of each azimuth (degrees) among `bins` equal bins starting at 0 degrees."""
    return (np.floor(np.mod(azimuth, 360.0) / (360.0 / bins)).astype(np.int64)) % bins


class HoughForestDetector(BaseForest):
    """A class-specific Hough forest: object detection by patch votes for object centres.

    Parameters
    ----------
    n_trees : int
        T.
    max_depth : int
        D (root at 0).
    n_candidates : int
        rho, pixel-pair tests tried per node.
    n_thresholds : int
        K random thresholds per test.
    min_samples_leaf : int
        Fewest patches in a leaf.
    patch_size : int
        Side of the square patches (pixels at the learnt object size).
    object_size : float
        Geometric mean of box width and height (pixels) every training object is rescaled to.
    patches_per_image : int
        Patches drawn per training image, half inside its boxes and half outside (and as many per background
        image).
    offset_share : float
        Probability that a node reduces offset uncertainty rather than class uncertainty; 0 grows a plain
        classification forest (its leaves still store offsets, e.g. for a sliding-window baseline).
    max_leaf_votes : int
        Offsets kept per leaf (a random subset when more object patches reach it): bounds model size and detection
        time.
    n_scales : int
        Scales searched per image, spanning the object sizes (relative to the image) seen in training.
    smoothing : float
        Standard deviation of the Gaussian that smooths each Hough image, in pixels at the learnt object size.
    vote_stride : int
        Only every `vote_stride`-th pixel along each axis votes (with that many squared times the weight): the
        Hough image is smoothed over several pixels anyway, and voting is most of detection's time.
    nms_iou : float
        Boxes overlapping a stronger one by more than this IoU are dropped.
    nms_inside : float
        So are boxes lying inside a stronger one by more than this share of their area: at a larger scale a part
        of an object (a horse's head and neck) can look like a whole one (1.0 keeps them).
    viewpoint_bins : int
        How the trees learn viewpoints, when `fit` is given them: 0 as the unit vector of the azimuth, K >= 2 as K
        equal azimuth classes (Redondo-Cabrera and Lopez-Sastre's multi-aspect forest); leaves keep each stored
        vote's azimuth (with K classes, its class's centre).
    viewpoint_share : float
        Probability that a node reduces the viewpoint uncertainty of the object patches, when viewpoints are given;
        the other nodes divide as `offset_share` says.
    view_radius : float
        A detection's viewpoint is read from the votes that land within this many object sizes of its maximum
        (at the scale it was found): the votes nearest the centre come from patches whose leaves placed the
        object well, and a wider disc gathers votes of the car's other views.
    window_views : int
        With viewpoints, also grow a classification forest over this many equal azimuth classes on a HOG
        descriptor of each training box's whole window (`window_views.py`); `detect` multiplies its posterior for a
        detection's box into the votes' azimuth histogram before reading the mode, which settles a car taken for its
        mirror image or its other end. 0: the votes alone.
    flip : bool
        Also train on every training image mirrored left to right (its viewpoints mirrored with it).
    object_sizes : (2,) floats or None
        Smallest and largest object size (geometric mean of the box sides) relative to an image's geometric size
        that `detect` searches; None: the range of the training images, which crops (boxes filling their images)
        cannot give.
    variant : {"hough", "adhf"}
        "adhf": alternating decision Hough forest (Schulter et al., "Alternating decision forests", CVPR 2013,
        sec. 5): trees grown level by level with patch weights from the gradient of a global `loss` at the
        forest's margins, so that later levels concentrate on the patches the forest still gets wrong.
    loss : {"logit", "exponential", "savage", "tangent", "hinge"}
        The global loss of "adhf" (unused by "hough").
    random_state : int or None
        Fixes the model bytes whatever the thread count.
    n_jobs : int or None
        Threads (None: all cores).

    Attributes (after `fit`)
    ----------
    leaf_foreground_ : (n_leaves,) float32, object share of each leaf (class-balanced)
    vote_start_ : (n_leaves + 1,) int64;  votes_ : (n_votes, 4) float32 [dx, dy, width, height] at the learnt size,
        (n_votes, 5) with the azimuth in degrees as the fifth column when the model knows viewpoints
    relative_sizes_ : (2,) smallest and largest object size relative to the image's geometric size searched
    threshold_ : default score threshold of `detect`
    window_forest_ : the window classifier (a ClassificationForest), or None
    model_card_ : what the model is (name, training data, measured accuracy), saved with it
    """

    task = "hough-detection"
    parameter_constraints: ClassVar[dict[str, Rule]] = {
        **{k: GROWTH[k] for k in ("n_trees", "n_candidates", "random_state", "n_jobs")},
        "max_depth": Integer(1, 64), "n_thresholds": Integer(1, 1000), "min_samples_leaf": Integer(1),
        "patch_size": Integer(4, 64), "object_size": Real(16.0, 1024.0), "patches_per_image": Integer(2, 100_000),
        "offset_share": Real(0.0, 1.0), "max_leaf_votes": Integer(1, 100_000), "n_scales": Integer(1, 32),
        "viewpoint_bins": Integer(0, 72), "viewpoint_share": Real(0.0, 1.0), "view_radius": Real(0.0, 1.0),
        "window_views": Integer(0, 72), "flip": Boolean(),
        "object_sizes": RealEach(1e-3, 10.0, allow_none=True),
        "smoothing": Real(0.0, 100.0), "vote_stride": Integer(1, 8), "nms_iou": Real(0.0, 1.0),
        "nms_inside": Real(0.0, 1.0),
        "variant": Options(choices=VARIANTS), "loss": Options(choices=LOSSES)}
    # fixed growth settings the base class reads
    weak_learner = "axis"
    structure = "tree"
    two_sided = False
    bootstrap = False
    max_samples = None
    min_samples_split = 2
    min_gain = 0.0

    def __init__(self, n_trees: int = 10, *, max_depth: int = 15, n_candidates: int = 200, n_thresholds: int = 16,
                 min_samples_leaf: int = 20, patch_size: int = 16, object_size: float = 64.0,
                 patches_per_image: int = 400, offset_share: float = 0.5, max_leaf_votes: int = 64,
                 n_scales: int = 5, smoothing: float = 2.5, vote_stride: int = 1, nms_iou: float = 0.3,
                 nms_inside: float = 0.6,
                 viewpoint_bins: int = 0, viewpoint_share: float = 0.3, view_radius: float = 0.06,
                 window_views: int = 16, flip: bool = False,
                 object_sizes: tuple[float, float] | None = None, variant: str = "hough",
                 loss: str = "tangent", random_state=None, n_jobs: int | None = None) -> None:
        self.n_trees = n_trees
        self.max_depth = max_depth
        self.n_candidates = n_candidates
        self.n_thresholds = n_thresholds
        self.min_samples_leaf = min_samples_leaf
        self.patch_size = patch_size
        self.object_size = object_size
        self.patches_per_image = patches_per_image
        self.offset_share = offset_share
        self.max_leaf_votes = max_leaf_votes
        self.n_scales = n_scales
        self.smoothing = smoothing
        self.vote_stride = vote_stride
        self.nms_iou = nms_iou
        self.nms_inside = nms_inside
        self.viewpoint_bins = viewpoint_bins
        self.viewpoint_share = viewpoint_share
        self.view_radius = view_radius
        self.window_views = window_views
        self.flip = flip
        self.object_sizes = object_sizes
        self.variant = variant
        self.loss = loss
        self.random_state = random_state
        self.n_jobs = n_jobs

    def global_loss(self) -> str | None:
        return self.loss if self.variant == "adhf" else None

    # -- training ------------------------------------------------------------------------------------------
    def fit(self, images: Sequence[np.ndarray], boxes: Sequence[np.ndarray],
            negatives: Sequence[np.ndarray] = (), viewpoints: Sequence[np.ndarray] | None = None
            ) -> HoughForestDetector:
        """Grow the forest on images with object boxes (and optional background images without the object).

        Parameters
        ----------
        images : RGB images (h, w, 3), uint8 or float in [0, 1]
        boxes : per image, (k, 4) boxes [x0, y0, x1, y1] in its pixels (k >= 1)
        negatives : RGB images that contain no object
        viewpoints : per image, (k,) azimuth of each box's object in degrees (0 and 180 the side views, 90 the
            back, 270 the front); the leaves then keep viewpoints and `detect` reports them
        """
        check_params(self)
        if len(images) == 0:
            raise InvalidInputError("no training images given")
        if len(images) != len(boxes):
            raise InvalidInputError(f"{len(images)} images but {len(boxes)} box lists")
        if self.viewpoint_bins == 1:
            raise InvalidInputError("viewpoint_bins must be 0 (azimuth as a unit vector) or at least 2 classes")
        if self.window_views == 1:
            raise InvalidInputError("window_views must be 0 (no window classifier) or at least 2 classes")
        sizes_given = self._object_size_range()
        rng = np.random.default_rng(self.random_state)
        sample_rng = np.random.default_rng(_rng_seed(rng))
        rgbs = [as_rgb(im, f"training image {k}") for k, im in enumerate(images)]
        box_sets = [check_boxes(b, rgb.shape[:2], f"training image {k}")
                    for k, (rgb, b) in enumerate(zip(rgbs, boxes, strict=True))]
        views = self._check_viewpoints(viewpoints, box_sets)
        if self.flip:
            mirrored = [mirror(rgb, b, a) for rgb, b, a in zip(rgbs, box_sets, views, strict=True)]
            rgbs += [m[0] for m in mirrored]
            box_sets += [m[1] for m in mirrored]
            views += [m[2] for m in mirrored]
        neg_rgbs = [as_rgb(im, f"background image {k}") for k, im in enumerate(negatives)]

        channels, points, offsets, sizes, labels, azimuths = [], [], [], [], [], []
        relative, scaled_sizes, filled = [], [], []
        half = self.patches_per_image // 2

        def collect(yx: np.ndarray, label: int, offset: np.ndarray | None = None, size: np.ndarray | None = None,
                    azimuth: np.ndarray | None = None):
            """Patches at pixels yx (m, 2) of the latest channel image; background ones have no offset."""
            m = len(yx)
            points.append(np.c_[np.full(m, len(channels) - 1), np.zeros(m, np.int64), yx])
            labels.append(np.full(m, label, np.int32))
            offsets.append(np.full((m, 2), np.nan) if offset is None else offset)
            sizes.append(np.zeros((m, 2)) if size is None else size)
            azimuths.append(np.full(m, np.nan) if azimuth is None else azimuth)

        for rgb, b, a in zip(rgbs, box_sets, views, strict=True):
            area = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
            geo = np.sqrt(area)
            relative.extend(geo / np.sqrt(rgb.shape[0] * rgb.shape[1]))
            filled.append(area.max() >= FILLED * rgb.shape[0] * rgb.shape[1])
            scale = float(self.object_size / np.median(geo))
            small = resize(rgb, scale)
            sb = b * scale
            scaled_sizes.append(np.sqrt(small.shape[0] * small.shape[1]))
            channels.append(hough_channels(small))
            pos, off, size, which = _object_patches(sb, small.shape[:2], half, sample_rng)
            collect(pos, 1, off, size, a[which])
            collect(_background_patches(sb, small.shape[:2], self.patches_per_image - half, sample_rng), 0)
        if sizes_given is None and all(filled):
            raise InvalidInputError("the training boxes fill their images (crops), so they do not say how large "
                                    "objects are in a photograph: give object_sizes (smallest, largest relative "
                                    "to the image)")
        for rgb in neg_rgbs:
            # a background image is shown at the size of a random training image (after its rescaling); crops
            # are smaller than any photograph, so background images keep their own size relative to the objects
            target = scaled_sizes[int(sample_rng.integers(len(scaled_sizes)))]
            if sizes_given is not None and all(filled):
                target = self.object_size / float(np.exp(sample_rng.uniform(*np.log(sizes_given))))
            small = resize(rgb, float(target / np.sqrt(rgb.shape[0] * rgb.shape[1])))
            channels.append(hough_channels(small))
            collect(_background_patches(np.zeros((0, 4)), small.shape[:2], self.patches_per_image, sample_rng), 0)
        pts = np.ascontiguousarray(np.concatenate(points), dtype=np.int32)
        y = np.concatenate(labels)
        offset = np.concatenate(offsets)
        size = np.concatenate(sizes)
        azimuth = np.concatenate(azimuths)
        n_pos, n_neg = int(np.sum(y == 1)), int(np.sum(y == 0))
        if n_neg == 0:
            raise InvalidInputError("no background patches: the boxes cover the whole of every image; add "
                                    "background images")
        # equal total weight for object and background patches (Gall and Lempitsky sample them in equal numbers)
        weight = np.where(y == 1, 0.5 * y.size / n_pos, 0.5 * y.size / n_neg)
        family = PixelPairs(N_CHANNELS, self.patch_size)
        stack = family.prepare(channels)
        channels.clear()  # the stack holds them now
        has_views = viewpoints is not None
        objective = self._objective(y, offset, azimuth if has_views else None)
        grown = self.grow(family, (stack, pts), y.size, objective, weight)
        extra = np.c_[offset, size, azimuth] if has_views else np.c_[offset, size]
        self._fit_leaves(grown, y, weight, extra, np.random.default_rng(_rng_seed(rng)))
        self.window_forest_ = None
        if has_views and self.window_views >= 2:
            from imageforest.apps.detect.window_views import fit_window_views

            self.window_forest_ = fit_window_views(rgbs, box_sets, views, self.window_views, _rng_seed(rng),
                                                   self.n_jobs)
        rel = np.asarray(relative)
        self.relative_sizes_ = (np.asarray(sizes_given, dtype=np.float64) if sizes_given is not None
                                else np.array([np.percentile(rel, 2.5), np.percentile(rel, 97.5)]))
        self.threshold_ = 0.0
        self.model_card_: dict = {}
        self.n_training_ = {"images": len(rgbs), "background_images": len(neg_rgbs), "object_patches": n_pos,
                            "background_patches": n_neg}
        return self

    def _object_size_range(self) -> tuple[float, float] | None:
        if self.object_sizes is None:
            return None
        sizes = np.asarray(self.object_sizes, dtype=np.float64).ravel()
        if sizes.shape != (2,) or not 0 < sizes[0] <= sizes[1]:
            raise InvalidInputError(f"object_sizes must be two increasing positive numbers, got {self.object_sizes}")
        return float(sizes[0]), float(sizes[1])

    @staticmethod
    def _check_viewpoints(viewpoints, box_sets: list[np.ndarray]) -> list[np.ndarray]:
        """Per image, (k,) float64 azimuths in [0, 360) (NaN throughout when no viewpoints are given)."""
        if viewpoints is None:
            return [np.full(len(b), np.nan) for b in box_sets]
        if len(viewpoints) != len(box_sets):
            raise InvalidInputError(f"{len(box_sets)} images but {len(viewpoints)} viewpoint lists")
        out = []
        for k, (v, b) in enumerate(zip(viewpoints, box_sets, strict=True)):
            a = np.atleast_1d(np.asarray(v, dtype=np.float64))
            if a.shape != (len(b),) or not np.isfinite(a).all():
                raise InvalidInputError(f"training image {k}: give one finite azimuth (degrees) per box")
            out.append(np.mod(a, 360.0))
        return out

    def _objective(self, y: np.ndarray, offset: np.ndarray, azimuth: np.ndarray | None):
        """Each node's choice among class, offset and (with viewpoints) viewpoint uncertainty."""
        objectives = [Objective.classification(y, 2)]
        p = [1.0 - self.offset_share]
        if self.offset_share > 0:
            objectives.append(Objective.regression(offset, "squared_error"))
            p.append(self.offset_share)
        if azimuth is not None and self.viewpoint_share > 0:
            objectives.append(Objective.regression(viewpoint_targets(azimuth, self.viewpoint_bins), "squared_error"))
            p = [q * (1.0 - self.viewpoint_share) for q in p] + [self.viewpoint_share]
        return objectives[0] if len(objectives) == 1 else NodeObjectives.random(objectives, p)

    def _fit_leaves(self, grown, y, weight, extra, rng) -> None:
        """Object share per leaf and up to `max_leaf_votes` object votes per leaf; `extra` (n, 4 or 5) holds each
        patch's [dx, dy, width, height (, azimuth)]."""
        n_leaves = grown.leaf_start.size
        _, share, _ = grown.leaf_moments((y == 1)[:, None], weight[grown.order], covariance="none")
        self.leaf_foreground_ = share[:, 0].astype(np.float32)
        leaf, positions = grown.leaf_members()
        point = grown.order[positions]
        obj = y[point] == 1
        leaf_o, point_o = leaf[obj], point[obj]
        # a random subset of each leaf's object patches: random keys, sorted within leaves
        key = rng.random(leaf_o.size)
        order = np.lexsort((key, leaf_o))
        leaf_o, point_o = leaf_o[order], point_o[order]
        counts = np.bincount(leaf_o, minlength=n_leaves)
        first = np.r_[0, np.cumsum(counts)[:-1]]
        rank = np.arange(leaf_o.size) - first[leaf_o]
        keep = rank < self.max_leaf_votes
        leaf_o, point_o = leaf_o[keep], point_o[keep]
        kept = np.bincount(leaf_o, minlength=n_leaves)
        self.vote_start_ = np.r_[0, np.cumsum(kept)].astype(np.int64)
        votes = extra[point_o]
        if votes.shape[1] == 5 and self.viewpoint_bins >= 2:  # K classes: a leaf knows its votes' classes only
            step = 360.0 / self.viewpoint_bins
            votes[:, 4] = (azimuth_bin(votes[:, 4], self.viewpoint_bins) + 0.5) * step
        votes = np.ascontiguousarray(votes, dtype=np.float32)
        if votes.shape[1] == 5:  # float32 rounding may carry 359.99999 to 360
            votes[votes[:, 4] >= 360.0, 4] = 0.0
        self.votes_ = votes

    # -- detection -----------------------------------------------------------------------------------------
    def check_fitted(self) -> None:
        if not hasattr(self, "votes_"):
            raise NotFittedError("this HoughForestDetector is not fitted yet; call fit (or load) first")

    def search_scales(self, shape: tuple[int, int]) -> np.ndarray:
        """Resize factors searched for an image of `shape` (h, w): object sizes from the smallest to the largest
        relative size seen in training, geometrically spaced, each brought to `object_size`."""
        self.check_fitted()
        geo = np.sqrt(shape[0] * shape[1])
        lo, hi = self.relative_sizes_
        rel = np.geomspace(lo, hi, self.n_scales) if self.n_scales > 1 else np.array([np.sqrt(lo * hi)])
        return self.object_size / (geo * rel)

    def _leaf_weight(self) -> np.ndarray:
        counts = np.diff(self.vote_start_)
        w = self.leaf_foreground_ / (np.maximum(counts, 1) * self.forest_.n_trees)
        return np.where(counts > 0, w, 0.0).astype(np.float32)

    def _leaves(self, rgb: np.ndarray, scale: float, stride: int = 1
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, int]]:
        """Leaf ids (n, T) of every `stride`-th pixel along each axis of the image resized by `scale`, those pixels'
        (y, x), and the resized image's (h', w')."""
        small = resize(rgb, scale)
        h, w = small.shape[:2]
        stack = stack_channels([hough_channels(small)])
        gy, gx = np.arange(0, h, stride, dtype=np.int64), np.arange(0, w, stride, dtype=np.int64)
        yy, xx = np.repeat(gy, gx.size), np.tile(gx, gy.size)
        pts = np.ascontiguousarray(np.c_[np.zeros((yy.size, 2), np.int64), yy, xx], dtype=np.int32)
        with numba_threads(self.n_jobs):
            leaves = self.family_.apply((stack, pts), self.forest_)
        return leaves, yy, xx, (h, w)

    def foreground_probability(self, rgb: np.ndarray, scale: float) -> np.ndarray:
        """p(object | patch) of every pixel of an RGB image resized by `scale` (mean over trees): (h', w')."""
        self.check_fitted()
        leaves, _, _, shape = self._leaves(as_rgb(rgb), scale)
        return self.leaf_foreground_[leaves].mean(axis=1).reshape(shape)

    @property
    def knows_viewpoints(self) -> bool:
        """Whether the leaves keep the viewpoints of their votes (a model trained with viewpoints)."""
        self.check_fitted()
        return self.votes_.shape[1] == 5

    def vote(self, rgb: np.ndarray, scale: float) -> np.ndarray:
        """Smoothed Hough image of an RGB image (see `as_rgb`) resized by `scale`: (3, h', w') float32 (vote mass,
        vote-weighted width and height sums, in pixels of the resized image)."""
        return self._vote(rgb, scale)[0]

    def _vote(self, rgb: np.ndarray, scale: float) -> tuple[np.ndarray, tuple]:
        """`vote`, and what casting the votes again needs: (leaves, ys, xs, leaf weights)."""
        from scipy import ndimage

        leaves, yy, xx, (h, w) = self._leaves(rgb, scale, self.vote_stride)
        with numba_threads(self.n_jobs):
            # per call, as a refit or load replaces the leaves; a pixel of a sparser grid votes for the pixels it
            # stands for, so that scores keep their meaning (expected object patches) whatever the stride
            weight = self._leaf_weight() * np.float32(self.vote_stride**2)
            acc = cast_votes(leaves, yy, xx, self.vote_start_, self.votes_, weight, (h, w))
        if self.smoothing > 0:
            for c in range(3):
                acc[c] = ndimage.gaussian_filter(acc[c], self.smoothing, mode="constant")
        return acc, (leaves, yy, xx, weight)

    def detect(self, image: np.ndarray, threshold: float | None = None, scales: Sequence[float] | None = None,
               keep_hough: bool = False) -> DetectionResult:
        """Objects in one RGB image.

        Parameters
        ----------
        image : (h, w, 3) RGB, uint8 or float in [0, 1]
        threshold : least score of a reported detection (default: the model's `threshold_`)
        scales : resize factors to search (default: `search_scales`)
        keep_hough : also return each scale's Hough image at the input's size

        Returns
        -------
        DetectionResult, boxes in the input's pixels.
        """
        self.check_fitted()
        rgb = as_rgb(image)
        thr = self.threshold_ if threshold is None else float(threshold)
        if not np.isfinite(thr):
            raise InvalidInputError(f"the score threshold must be a finite number, got {threshold}")
        factors = self.search_scales(rgb.shape[:2]) if scales is None else np.asarray(scales, dtype=np.float64)
        if factors.ndim != 1 or factors.size == 0 or not np.all((factors > 0) & np.isfinite(factors)):
            raise InvalidInputError("scales must be positive numbers")
        t0 = time.perf_counter()
        boxes, scores, found_at, houghs, casts = [], [], [], [], []
        radius = max(1, round(0.15 * self.object_size))
        # One low-pass resize to the largest scale searched, the others from it: a large photograph is filtered
        # once rather than once per scale (same pixels up to the filter's tail).
        top = float(min(1.0, factors.max()))
        base = resize(rgb, top)
        for s in factors:
            # an image shrunk below a patch has nothing to vote with
            if min(rgb.shape[0], rgb.shape[1]) * s < 4:
                continue
            acc, cast = self._vote(base, float(s) / top)
            peaks = hough_peaks(acc[0], radius, 0.0, PEAKS_PER_SCALE)
            casts.append((cast, acc.shape[1:], peaks, len(boxes)))
            for py, px in peaks:
                mass = acc[0, py, px]
                bw, bh = acc[1, py, px] / mass, acc[2, py, px] / mass
                cx, cy = (px + 0.5) / s, (py + 0.5) / s
                boxes.append([cx - 0.5 * bw / s, cy - 0.5 * bh / s, cx + 0.5 * bw / s, cy + 0.5 * bh / s])
                scores.append(float(mass))
                found_at.append(float(s))
            if keep_hough:
                houghs.append(_to_shape(acc[0], rgb.shape[:2]))
        t1 = time.perf_counter()
        chosen: list[int] = []
        if boxes:
            b = np.asarray(boxes)
            h, w = rgb.shape[:2]
            b[:, [0, 2]] = np.clip(b[:, [0, 2]], 0, w)
            b[:, [1, 3]] = np.clip(b[:, [1, 3]], 0, h)
            keep = non_maximum_suppression(b, np.asarray(scores), self.nms_iou, self.nms_inside)
            chosen = [int(i) for i in keep if scores[i] >= thr][:MAX_DETECTIONS]
        t2 = time.perf_counter()
        view_radius = max(1, round(float(self.view_radius) * self.object_size))
        views = self._viewpoints(casts, chosen, view_radius, rgb, b) if self.knows_viewpoints and chosen else {}
        dets = [Detection(b[i].tolist(), scores[i], found_at[i], views.get(i)) for i in chosen]
        return DetectionResult(dets, houghs if keep_hough else None, [float(s) for s in factors],
                               {"vote": (t1 - t0) + (time.perf_counter() - t2), "suppress": t2 - t1})

    def _viewpoints(self, casts: list, chosen: list[int], radius: int, rgb: np.ndarray, boxes: np.ndarray
                    ) -> dict[int, tuple[float, float]]:
        """(azimuth, spread) of each chosen maximum, from the votes cast again at its scale only: a scale none of
        whose maxima is reported is not cast again. Every maximum of a scale still claims its cells, so that a
        reported one's histogram does not depend on which of its neighbours were suppressed. With a window
        classifier, its posterior for the maximum's box (`boxes[i]`, in `rgb`'s pixels) weighs the histogram."""
        hists, reported = {}, set(chosen)
        for (leaves, yy, xx, weight), shape, peaks, first in casts:
            wanted = [i for i in range(first, first + len(peaks)) if i in reported]
            if not wanted:
                continue
            with numba_threads(self.n_jobs):
                cast = peak_viewpoints(leaves, yy, xx, self.vote_start_, self.votes_, weight, shape, peaks, radius)
            hists.update({i: cast[i - first] for i in wanted})
        if getattr(self, "window_forest_", None) is not None:
            from imageforest.apps.detect.window_views import FLOOR, window_histograms

            with numba_threads(self.n_jobs):
                window = window_histograms(self.window_forest_, self.window_views, rgb, boxes[chosen])
            for i, w in zip(chosen, window, strict=True):
                total = hists[i].sum()
                hists[i] = (hists[i] / total if total > 0 else hists[i]) * (w + FLOOR)
        return {i: viewpoint_of(h) for i, h in hists.items()}

    # -- model files ---------------------------------------------------------------------------------------
    def named_forests(self) -> dict[str, BaseForest]:
        """The Hough forest and, when there is one, the window classifier (`model-info` counts both)."""
        window = getattr(self, "window_forest_", None)
        return {"hough": self} if window is None else {"hough": self, "window": window}

    def leaf_arrays(self) -> dict[str, np.ndarray]:
        arrays = {"leaf_foreground": self.leaf_foreground_, "vote_start": self.vote_start_, "votes": self.votes_,
                  "relative_sizes": self.relative_sizes_}
        if getattr(self, "window_forest_", None) is not None:  # the window classifier's arrays, prefixed
            arrays.update({WINDOW_PREFIX + k: v for k, v in self.window_forest_.to_record()[1].items()})
        return arrays

    def extra_metadata(self) -> dict:
        meta = {"threshold": float(self.threshold_), "model_card": getattr(self, "model_card_", {}),
                "n_training": getattr(self, "n_training_", {})}
        if getattr(self, "window_forest_", None) is not None:
            meta["window_classifier"] = self.window_forest_.to_record()[0]
        return meta

    def restore_leaves(self, meta: dict, arrays: dict[str, np.ndarray]) -> None:
        try:
            fg = np.asarray(arrays["leaf_foreground"])
            start = np.asarray(arrays["vote_start"])
            votes = np.asarray(arrays["votes"])
            rel = np.asarray(arrays["relative_sizes"])
        except KeyError as exc:
            raise ModelFormatError(f"the detector's leaves are missing ({exc})") from None
        n_leaves = self.forest_.n_leaves
        if (fg.dtype != np.float32 or fg.shape != (n_leaves,) or not np.all((fg >= 0) & (fg <= 1))):
            raise ModelFormatError("leaf_foreground must hold one share in [0, 1] per leaf (float32)")
        if (start.dtype != np.int64 or start.shape != (n_leaves + 1,) or start[0] != 0
                or np.any(np.diff(start) < 0)):
            raise ModelFormatError("vote_start must be an increasing int64 index with one entry per leaf plus one")
        if (votes.dtype != np.float32 or votes.ndim != 2 or votes.shape[0] != int(start[-1])
                or votes.shape[1] not in (4, 5) or not np.isfinite(votes).all() or np.any(votes[:, 2:4] <= 0)):
            raise ModelFormatError("votes must be (n, 4) finite float32 offsets and positive sizes (n, 5 with "
                                   "viewpoints)")
        if votes.shape[1] == 5 and np.any((votes[:, 4] < 0) | (votes[:, 4] >= 360)):
            raise ModelFormatError("the votes' azimuths must lie in [0, 360) degrees")
        # a patch lies inside its object (scaled to object_size), so its offset and the object's size are within a
        # few object sizes; a forged vote of 1e30 pixels would move every centre off the image
        reach = VOTE_REACH * float(self.object_size)
        if votes.size and (np.abs(votes[:, :4]).max() > reach):
            raise ModelFormatError(f"votes must lie within {reach:g} pixels ({VOTE_REACH} object sizes)")
        if rel.shape != (2,) or not np.all(np.isfinite(rel)) or not 0 < rel[0] <= rel[1] <= 10:
            raise ModelFormatError("relative_sizes must be two increasing positive numbers")
        thr, card = meta.get("threshold"), meta.get("model_card", {})
        if not isinstance(thr, (int, float)) or not np.isfinite(thr):
            raise ModelFormatError("the model's score threshold is missing")
        if not isinstance(card, dict):
            raise ModelFormatError("the model card is not a mapping")
        if not isinstance(self.family_, PixelPairs) or self.family_.n_channels != N_CHANNELS:
            raise ModelFormatError("a Hough detector reads pixel pairs of the 32 Hough channels")
        self.window_forest_ = self._restore_window_forest(meta, arrays, votes.shape[1] == 5)
        self.leaf_foreground_, self.vote_start_, self.votes_ = fg, start, votes
        self.relative_sizes_ = rel.astype(np.float64)
        self.threshold_ = float(thr)
        self.model_card_ = card
        self.n_training_ = meta.get("n_training", {})

    def _restore_window_forest(self, meta: dict, arrays: dict[str, np.ndarray], knows_viewpoints: bool):
        """The window classifier of a model file, checked; None for a file without one (a model trained without
        viewpoints or with `window_views` 0, or written before the classifier existed)."""
        record = meta.get("window_classifier")
        if record is None:
            return None
        from imageforest.apps.detect.window_views import n_window_features
        from imageforest.estimators.classification import ClassificationForest

        if not isinstance(record, dict) or not knows_viewpoints or self.window_views < 2:
            raise ModelFormatError("a window classifier belongs to a model with viewpoints and window_views >= 2")
        own = {k[len(WINDOW_PREFIX):]: v for k, v in arrays.items() if k.startswith(WINDOW_PREFIX)}
        forest = ClassificationForest.from_record(record, own, "window classifier")
        classes = np.asarray(forest.classes_)
        if (forest.n_features_in_ != n_window_features() or classes.dtype.kind not in "iu"
                or np.any(classes < 0) or np.any(classes >= self.window_views)):
            raise ModelFormatError(f"the window classifier must read {n_window_features()} features and know "
                                   f"azimuth classes 0 to {self.window_views - 1}")
        return forest


def _to_shape(image: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    from skimage.transform import resize as sk_resize

    return sk_resize(image, shape, order=1, preserve_range=True, anti_aliasing=False).astype(np.float32)


def _object_patches(boxes: np.ndarray, shape: tuple[int, int], n: int, rng: np.random.Generator
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """n pixels drawn uniformly inside the boxes (boxes in proportion to their areas): (n, 2) (y, x), each one's
    offset (dx, dy) from its pixel centre to its box's centre, its box's (width, height), and its box's index."""
    h, w = shape
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    which = rng.choice(len(boxes), size=n, p=area / area.sum())
    b = boxes[which]
    x = np.clip(np.floor(rng.uniform(b[:, 0], b[:, 2])).astype(np.int64), 0, w - 1)
    y = np.clip(np.floor(rng.uniform(b[:, 1], b[:, 3])).astype(np.int64), 0, h - 1)
    offset = np.c_[0.5 * (b[:, 0] + b[:, 2]) - (x + 0.5), 0.5 * (b[:, 1] + b[:, 3]) - (y + 0.5)]
    size = np.c_[b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]]
    return np.c_[y, x], offset, size, which


def _background_patches(boxes: np.ndarray, shape: tuple[int, int], n: int, rng: np.random.Generator) -> np.ndarray:
    """Up to n pixels drawn uniformly outside every box: (m, 2) (y, x)."""
    h, w = shape
    outside = np.ones((h, w), dtype=bool)
    for x0, y0, x1, y1 in boxes:
        outside[int(np.floor(y0)):int(np.ceil(y1)), int(np.floor(x0)):int(np.ceil(x1))] = False
    flat = np.flatnonzero(outside.ravel())
    if flat.size == 0:
        return np.zeros((0, 2), np.int64)
    pick = np.sort(rng.choice(flat, size=min(n, flat.size), replace=False))
    return np.c_[pick // w, pick % w]
