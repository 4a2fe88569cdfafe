"""The second, organ-centred stage: each organ's six walls re-voted on a fine grid around the first stage's box.

The first stage sees the whole scan on a coarse grid (4 mm) and places every organ within a few millimetres to a
centimetre. For each organ, a small regression forest of its own (`WallRefiner`) then looks only at a region
around that box, resampled to a finer grid (2 mm): voxels within `margin_mm` of the box vote for the organ's
walls through displaced-box features reaching `reach_mm`, and each wall is the median of the most confident votes
(the leaves with the smallest variance of that wall's displacement), as in the first stage. Training regions are
placed around the true box moved by a random error of the first stage's size (`jitter_mm`), so the forest learns
to correct a box it has not seen exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import SimpleITK as sitk

from imageforest.apps.localize.coarse import with_edge_prior
from imageforest.apps.localize.results import OrganEstimate
from imageforest.estimators.base import BaseForest, numba_threads
from imageforest.estimators.params import GROWTH, Anything, Real, Rule
from imageforest.exceptions import InvalidInputError, ModelFormatError
from imageforest.forest.objectives import Objective
from imageforest.imaging.ct import AIR_HU, HU_RANGE, WorkingGrid, inside
from imageforest.imaging.ct_organs import WALL_AXIS
from imageforest.imaging.features import BoxFeatures, ImageStack
from imageforest.imaging.io import Image
from imageforest.voting import Votes, ranked_medians, ranked_order

if TYPE_CHECKING:
    from imageforest.apps.localize.model import OrganLocalizer

# Shared by every stage of the localizer (`imageforest.apps.localize.model` imports them from here):
MIN_LEAF_VOTERS = 3  # a leaf votes when at least this many of its training voxels saw the organ
COV_MAX = 65000.0  # mm^2: (co)variances are stored as float16; larger spreads (std > 250 mm) carry no position
PASS_SLACK_MM = 10.0  # room in the shared fine region for later passes to move a box
MAX_MOVE_JITTERS = 3.0  # a fine stage moves a wall by at most this many of its training jitters


@dataclass(frozen=True)
class FineStage:
    """One fine stage's settings (the localizer's `refine_*` settings, which give one value per stage or one for
    all): T, leaf size, the voters' margin around the box, the features' reach, the training jitter of the box
    (mm) and the training voxels per scan and organ."""

    trees: int
    min_samples_leaf: int
    margin_mm: float
    reach_mm: float
    jitter_mm: float
    points: int


@dataclass
class FineSource:
    """A scan ready to give fine regions: each region is cut from the scan (a block aligned with the
    block-averaging factors, so any region sees the same averaged voxels as the whole scan would), block-averaged
    to about the fine spacing (so that linear resampling does not alias) and resampled."""

    scan: Image
    spacing_mm: float

    def region(self, box: np.ndarray, pad_mm: float) -> Image:
        """The scan on an axis-aligned (LPS) grid covering `box` (6,) mm grown by `pad_mm` on every side; air
        beyond the scan's faces (as the first stage's features see it)."""
        s = self.spacing_mm
        lo = np.minimum(box[0::2], box[1::2]) - pad_mm
        hi = np.maximum(box[0::2], box[1::2]) + pad_mm
        size = np.maximum(1, np.ceil((hi - lo) / s)).astype(int)
        out = sitk.Resample(self._averaged_block(lo, hi), [int(n) for n in size], sitk.Transform(),
                            sitk.sitkLinear, tuple(float(v) for v in lo + s / 2), (s, s, s),
                            tuple(np.eye(3).ravel()), AIR_HU, sitk.sitkFloat32)
        img = Image.from_sitk(out)
        img.array = np.clip(img.array, *HU_RANGE).astype(np.float32)
        return img

    def _averaged_block(self, lo: np.ndarray, hi: np.ndarray) -> sitk.Image:
        """The part of the scan under the box lo..hi (mm, x, y, z), as float32, block-averaged."""
        scan = self.scan
        factors = np.array([max(1, int(self.spacing_mm // sp)) for sp in scan.spacing])  # (x, y, z)
        corners = np.array([[a, b, c] for a in (lo[0], hi[0]) for b in (lo[1], hi[1]) for c in (lo[2], hi[2])])
        index = scan.physical_to_index(corners)
        size = np.array(scan.size)
        factors = np.minimum(factors, size)
        # Whole averaging blocks, as BinShrink of the whole scan forms them (it drops a partial last block), with
        # one block of slack for interpolation at the faces.
        usable = size // factors * factors
        first = np.clip((np.floor(index.min(axis=0) / factors) - 1) * factors, 0, usable - factors).astype(np.int64)
        last = np.clip((np.ceil((index.max(axis=0) + 1) / factors) + 1) * factors, first + factors,
                       usable).astype(np.int64)
        block = scan.array[first[2]:last[2], first[1]:last[1], first[0]:last[0]]
        img = sitk.GetImageFromArray(np.ascontiguousarray(block, dtype=np.float32))
        img.SetSpacing(tuple(float(v) for v in scan.spacing))
        img.SetOrigin(tuple(float(v) for v in scan.index_to_physical(first[None, :].astype(np.float64))[0]))
        img.SetDirection(tuple(float(d) for d in scan.direction.ravel()))
        if factors.max() > 1:
            img = sitk.BinShrink(img, [int(f) for f in factors])
        return img


def region_points(region: Image, box: np.ndarray, n: int, rng: np.random.Generator | None = None) -> np.ndarray:
    """Voxels (m, 3) as (z, y, x) of a fine region whose centres lie in `box` (6,) mm: n random ones (with
    replacement) when `rng` is given, else all of them or, when more than n, an evenly spaced selection."""
    s = region.spacing[0]
    lo = np.ceil((np.minimum(box[0::2], box[1::2]) - region.origin) / s - 1e-6).astype(np.int64)
    hi = np.floor((np.maximum(box[0::2], box[1::2]) - region.origin) / s + 1e-6).astype(np.int64)
    size = np.array(region.size)
    lo = np.clip(lo, 0, size - 1)
    hi = np.clip(hi, lo, size - 1)
    if rng is not None:
        return np.c_[rng.integers(lo[2], hi[2] + 1, n), rng.integers(lo[1], hi[1] + 1, n),
                     rng.integers(lo[0], hi[0] + 1, n)]
    zz, yy, xx = np.meshgrid(*[np.arange(lo[a], hi[a] + 1) for a in (2, 1, 0)], indexing="ij")
    pts = np.c_[zz.ravel(), yy.ravel(), xx.ravel()]
    if len(pts) > n:
        pts = pts[np.linspace(0, len(pts) - 1, n).round().astype(np.int64)]
    return pts


def region_positions(region: Image, zyx: np.ndarray) -> np.ndarray:
    """Positions (n, 3) in mm, (x, y, z), of fine-region voxels (n, 3) given as (z, y, x)."""
    return region.origin[None, :] + zyx[:, ::-1] * region.spacing[0]


def grown_box(box: np.ndarray, pad_mm: float) -> np.ndarray:
    """`box` (6,) mm with every wall moved outwards by pad_mm."""
    lo = np.minimum(box[0::2], box[1::2]) - pad_mm
    hi = np.maximum(box[0::2], box[1::2]) + pad_mm
    return np.ravel(np.c_[lo, hi])


class PlainTrees(BaseForest):
    """A forest whose only growth knobs are T, D, rho, K and the leaf size: the settings the engine reads that
    the localizer's estimators fix (randomized node optimisation without bagging, one-sided tests, trees)."""

    min_samples_split = 2
    min_gain = 0.0
    bootstrap = False
    max_samples = None
    structure = "tree"
    two_sided = False

    def _check_loaded_family(self) -> None:
        """A loaded forest's feature family must be the one its settings build (`_features`): the localizer's
        forests read one raw channel (HU), and a file declaring more channels or a filter bank would be answered
        from other features than it was trained on."""
        expected = self._features().to_spec()[0]
        if self.family_.to_spec()[0] != expected:
            raise ModelFormatError("the model's feature family is not the one its settings describe "
                                   f"({self.family_.to_spec()[0]} against {expected})")


class WallRefiner(PlainTrees):
    """One organ's second-stage forest: displaced-box features on a fine region, leaves hold the mean and
    per-wall variance (a diagonal Gaussian) of the displacements from a voxel to the organ's six walls.

    Parameters
    ----------
    spacing_mm : fine grid spacing
    n_trees, max_depth, n_candidates, n_thresholds, min_samples_leaf, random_state, n_jobs : as for the forest
    reach_mm : feature boxes lie up to this far from the voxel along each axis
    box_size_mm : (min, max) edge lengths of the feature boxes
    """

    task = "organ-wall-refinement"
    parameter_constraints: ClassVar[dict[str, Rule]] = {
        **GROWTH, "spacing_mm": Real(0.0, low_open=True), "reach_mm": Real(0.0), "box_size_mm": Anything()}
    threshold_sampling = "data"  # CT box means cluster by tissue (see OrganLocalizer)
    n_walls = 6  # displacement targets per voxel (the box's walls)

    def __init__(self, spacing_mm: float = 2.0, *, n_trees: int = 4, max_depth: int | None = 12, n_candidates: int = 60,
                 n_thresholds: int | None = 12, min_samples_leaf: int = 50, reach_mm: float = 30.0,
                 box_size_mm=(2.0, 20.0), random_state=None, n_jobs: int | None = None) -> None:
        self.spacing_mm = spacing_mm
        self.n_trees = n_trees
        self.max_depth = max_depth
        self.n_candidates = n_candidates
        self.n_thresholds = n_thresholds
        self.min_samples_leaf = min_samples_leaf
        self.reach_mm = reach_mm
        self.box_size_mm = box_size_mm
        self.random_state = random_state
        self.n_jobs = n_jobs

    def _features(self) -> BoxFeatures:
        return BoxFeatures(max_offset_mm=float(self.reach_mm), box_size_mm=tuple(self.box_size_mm), fill=AIR_HU)

    def fit(self, regions: list[Image], points: np.ndarray, targets: np.ndarray) -> WallRefiner:
        """Grow on fine regions; `points` (n, 4) int (region, z, y, x); `targets` (n, n_walls) mm displacements
        from each point to the true walls."""
        if not regions or len(points) == 0:
            raise InvalidInputError("no training region for this organ")
        q = self.n_walls
        if np.shape(targets) != (len(points), q):
            raise InvalidInputError(f"targets must have shape ({len(points)}, {q}), got {np.shape(targets)}")
        family = self._features()
        stack = family.prepare(regions)
        pts = np.ascontiguousarray(points, dtype=np.int32)
        y = np.asarray(targets, dtype=np.float64)
        floor = float(self.spacing_mm) ** 2  # one fine voxel squared per wall (see OrganLocalizer.fit)
        objective = Objective.regression(y, "gaussian", block_size=q, variance_floor=floor)
        grown = self.grow(family, (stack, pts), len(pts), objective, np.ones(len(pts)))
        count, mean, var = grown.leaf_moments(y)
        self.leaf_count_ = count.astype(np.float32)
        # float16 halves the file: steps are <= 0.06 mm for displacements below 128 mm; variances beyond
        # COV_MAX (std 255 mm) would not vote anyway.
        self.leaf_mean_ = mean.astype(np.float16)
        self.leaf_var_ = np.minimum(var, COV_MAX).astype(np.float16)
        self._derive()
        return self

    def _derive(self) -> None:
        """What voting reads: float64 leaf means and, per wall, the voting leaves by variance."""
        self._wall_mean = np.ascontiguousarray(self.leaf_mean_, dtype=np.float64)
        self._valid = self.leaf_count_ >= MIN_LEAF_VOTERS
        # the one-voxel floor added to every leaf changes no order
        self._wall_order = ranked_order(self.leaf_var_, self._valid)

    def walls(self, region: Image, stack: ImageStack, box: np.ndarray, margin_mm: float, n_points: int,
              fraction: float) -> tuple[np.ndarray, np.ndarray]:
        """Re-voted walls (6,) and their robust spread (6,) in mm for an organ the first stage put at `box`.

        `region` (with its integral `stack`) is a fine region covering `box` grown by margin_mm + reach_mm
        (`FineSource.region`); it may be larger, e.g. shared by all organs of a scan. Spreads are NaN when no
        leaf votes (the box is then returned as it was).
        """
        self.check_fitted()
        zyx = region_points(region, grown_box(box, margin_mm), n_points)
        with numba_threads(self.n_jobs):
            leaves = self.family_.apply((stack, np.c_[np.zeros(len(zyx)), zyx].astype(np.int32)), self.forest_)
        votes = Votes.group(leaves)
        n_valid = int(votes.counts[self._valid[votes.uniq]].sum())
        if n_valid == 0:
            return np.asarray(box, dtype=np.float64).copy(), np.full(6, np.nan)
        keep = max(1, round(fraction * n_valid))
        boxes, spreads = ranked_medians(self._wall_order, self._wall_mean, votes, votes.slots(self.forest_.n_leaves),
                                        region_positions(region, zyx), WALL_AXIS, (keep,))
        return boxes[0], spreads[0]

    # -- model files (a forest of the localizer's file: `imageforest.apps.localize.model_files`) -----------------
    def leaf_arrays(self) -> dict[str, np.ndarray]:
        return {"leaf.count": self.leaf_count_, "leaf.mean": self.leaf_mean_, "leaf.var": self.leaf_var_}

    @classmethod
    def from_hyper_parameters(cls, hyper: dict, meta: dict) -> WallRefiner:
        return cls(**{**hyper, "box_size_mm": tuple(hyper.get("box_size_mm", (2.0, 20.0)))})

    def restore_leaves(self, meta: dict, arrays: dict[str, np.ndarray]) -> None:
        self._check_loaded_family()
        n_leaves = self.forest_.n_leaves
        q = self.n_walls
        for key, shape in (("leaf.count", (n_leaves,)), ("leaf.mean", (n_leaves, q)), ("leaf.var", (n_leaves, q))):
            a = arrays.get(key)
            if a is None or a.shape != shape or a.dtype.kind != "f" or not np.all(np.isfinite(a)):
                raise ModelFormatError(f"array {key} is missing, has the wrong shape or is not finite")
        self.leaf_count_ = arrays["leaf.count"]
        self.leaf_mean_ = arrays["leaf.mean"]
        self.leaf_var_ = arrays["leaf.var"]
        self._derive()


def training_region(source: FineSource, truth_box: np.ndarray, jitter_mm: float, margin_mm: float,
                    reach_mm: float, n_points: int, rng: np.random.Generator
                    ) -> tuple[Image, np.ndarray, np.ndarray]:
    """One scan's training data for an organ: the region around its true box moved by a random first-stage
    error (each wall N(0, jitter_mm)), n_points random voxels of the moved box grown by margin_mm, and their
    displacements (n_points, 6) mm to the true walls."""
    moved = truth_box + rng.normal(0.0, jitter_mm, 6)
    region = source.region(moved, margin_mm + reach_mm)
    zyx = region_points(region, grown_box(moved, margin_mm), n_points, rng)
    targets = truth_box[None, :] - region_positions(region, zyx)[:, WALL_AXIS]
    return region, zyx, targets


# -- the stage at test time --------------------------------------------------------------------------------------
@dataclass
class FineRegion:
    """The fine grid the later stages vote on: one region of the scan covering every organ they refine (head and
    neck organs overlap, so one resampling and one integral image serve them all).

    organs : indices of the organs refined (present, with a finite first-stage box)
    region : the scan on the fine grid; stack : its integral image
    """

    organs: list[int]
    region: Image
    stack: ImageStack


def fine_region(model: OrganLocalizer, grid: WorkingGrid, organs: list[OrganEstimate]) -> FineRegion | None:
    """The region around the first stage's boxes of the organs `model` has fine stages for (None: no such organ).
    It reaches far enough for every stage's margin and feature reach, and for later passes to move a box."""
    refiners = getattr(model, "refiners_", None) or []
    todo = [o for o, r in enumerate(refiners) if r is not None and organs[o].present
            and np.all(np.isfinite(organs[o].box_mm))]
    if not todo:
        return None
    pad = max([st.margin_mm + st.reach_mm for st in model.fine_stages()]
              + [float(model.slice_margin_mm) + float(model.slice_reach_mm)])
    boxes = np.array([organs[o].box_mm for o in todo])
    union = np.ravel(np.c_[boxes[:, 0::2].min(axis=0), boxes[:, 1::2].max(axis=0)])
    region = FineSource(grid.scan, float(model.refine_spacing_mm)).region(union, pad + PASS_SLACK_MM)
    return FineRegion(todo, region, ImageStack.from_images([region], integral=True))


def refine_walls(model: OrganLocalizer, organs: list[OrganEstimate], fine: FineRegion, grid: WorkingGrid) -> None:
    """Replace the first-stage walls of `fine.organs` with the fine stages' (in place; then the body-edge prior
    and the scan's faces, as in the first stage)."""
    stages = model.fine_stages()
    for o in fine.organs:
        estimate = organs[o]
        box, spread = estimate.box_mm, estimate.box_std_mm
        for refiner, stage in zip(model.refiners_[o], stages, strict=True):
            # A stage learnt to undo errors of about its training jitter; a far larger move means the scan is
            # unlike its training scans (a synthetic phantom: the third stage moved walls by 20 mm where on real
            # scans 90% of its moves are under 3 mm, 99% under about 18), so each wall moves at most 3 jitters.
            limit = MAX_MOVE_JITTERS * stage.jitter_mm if stage.jitter_mm > 0 else np.inf
            for _ in range(int(model.refine_passes)):
                new, new_spread = refiner.walls(fine.region, fine.stack, box, stage.margin_mm,
                                                int(model.refine_votes), float(model.refine_fraction))
                if not np.all(np.isfinite(new_spread)):
                    break
                box, spread = box + np.clip(new - box, -limit, limit), new_spread
        box, spread = box.copy(), spread.copy()
        for k in np.flatnonzero(model._edge_prior[o]):
            box[k], spread[k] = with_edge_prior(model, o, k, box[k], spread[k], grid.edges[k])
        estimate.box_mm = inside(box, grid.extent)
        estimate.box_std_mm = spread
