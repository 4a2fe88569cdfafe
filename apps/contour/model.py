"""The organ contourer: an entangled forest over the region the localizer's boxes mark.

A scan is contoured inside the union of its organs' boxes (from `imageforest localize`) widened by `margin_mm`:
there the forest's posteriors are computed, stage by stage, over a crop that reaches `crop_mm` further so that the
boxes near the region's edge still read CT. Each organ's voxels are then kept inside its own widened box, and an
organ the localizer calls absent gets none. Training samples the same regions around the true boxes, moved by
N(0, `jitter_mm`) per wall (the localizer's error), so that the forest sees the region as it will be given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from scipy import ndimage

from imageforest.estimators.params import Anything, Boolean, Integer, Real, RealEach, Rule, check_params
from imageforest.exceptions import InvalidInputError, ModelFormatError
from imageforest.imaging.ct_organs import box_to_index
from imageforest.imaging.entangled import EntangledForest
from imageforest.imaging.io import Image


@dataclass
class Contours:
    """One scan's contours on the working grid of the scan.

    Attributes
    ----------
    labels : Image, uint8 (z, y, x); label k + 1 = organ k of the model, 0 background
    posterior : (n_organs, z, y, x) float32 organ posteriors inside the region (0 elsewhere; calibrated when the
        model has a `posterior_calibration`), or None
    region : (6,) int inclusive (x_lo, x_hi, y_lo, y_hi, z_lo, z_hi) voxel bounds of the contoured region, or None
        when no organ was present
    present : (n_organs,) bool, the localizer's presence
    mean_posterior : (n_organs,) float, each organ's mean posterior (as `posterior`) over its voxels on the grid
        the forest ran on (NaN without voxels), or None
    """

    labels: Image
    posterior: np.ndarray | None
    region: np.ndarray | None
    present: np.ndarray
    mean_posterior: np.ndarray | None = None


def widen(box: np.ndarray, mm: float) -> np.ndarray:
    """A (6,) box [x_lo, x_hi, y_lo, y_hi, z_lo, z_hi] grown by `mm` on every side."""
    return box + np.array([-mm, mm, -mm, mm, -mm, mm])


def region_bounds(image: Image, boxes: np.ndarray, margin_mm: float) -> np.ndarray | None:
    """Inclusive voxel bounds (x_lo, x_hi, y_lo, y_hi, z_lo, z_hi) of the union of the present boxes (n, 6) mm
    widened by `margin_mm`, clipped to the image; None when no box is given."""
    rows = boxes[~np.isnan(boxes).any(axis=1)]
    if rows.size == 0:
        return None
    union = np.array([rows[:, 0].min(), rows[:, 1].max(), rows[:, 2].min(), rows[:, 3].max(), rows[:, 4].min(),
                      rows[:, 5].max()])
    lo, hi = box_to_index(image, widen(union, margin_mm))
    return np.array([lo[0], hi[0], lo[1], hi[1], lo[2], hi[2]])


def crop_bounds(image: Image, region: np.ndarray, crop_mm: float) -> np.ndarray:
    """`region` (inclusive voxel bounds) grown by `crop_mm` on every side, clipped to the image."""
    grow = np.ceil(crop_mm / np.asarray(image.spacing)).astype(int)  # (x, y, z) voxels
    size = np.array(image.size)
    out = region.copy()
    for a in range(3):
        out[2 * a] = max(0, region[2 * a] - grow[a])
        out[2 * a + 1] = min(size[a] - 1, region[2 * a + 1] + grow[a])
    return out


def cut(image: Image, bounds: np.ndarray) -> Image:
    """The sub-image of inclusive (x, y, z) voxel bounds, with its own origin."""
    x0, x1, y0, y1, z0, z1 = (int(v) for v in bounds)
    arr = np.ascontiguousarray(image.array[z0:z1 + 1, y0:y1 + 1, x0:x1 + 1])
    origin = image.index_to_physical(np.array([[x0, y0, z0]], dtype=np.float64))[0]
    return Image(arr, image.spacing.copy(), origin, image.direction.copy(), source=image.source)


def organ_masks(image: Image, bounds: np.ndarray, boxes: np.ndarray, margin_mm: float) -> np.ndarray:
    """(n_organs, z, y, x) bool: the voxels of the cut `bounds` inside each organ's box widened by `margin_mm`
    (none for an absent organ)."""
    x0, x1, y0, y1, z0, z1 = (int(v) for v in bounds)
    out = np.zeros((boxes.shape[0], z1 - z0 + 1, y1 - y0 + 1, x1 - x0 + 1), dtype=bool)
    for k, box in enumerate(boxes):
        if np.isnan(box).any():
            continue
        lo, hi = box_to_index(image, widen(box, margin_mm))
        lo = np.maximum(lo, [x0, y0, z0])
        hi = np.minimum(hi, [x1, y1, z1])
        if np.all(hi >= lo):
            out[k, lo[2] - z0:hi[2] - z0 + 1, lo[1] - y0:hi[1] - y0 + 1, lo[0] - x0:hi[0] - x0 + 1] = True
    return out


# The box atlas covers normalised box coordinates in this range on every axis (0..1: the organ's box), so that it
# also knows how often an organ reaches beyond a box the localizer drew too small.
ATLAS_RANGE = (-0.5, 1.5)
ATLAS_SMOOTHING = 1.0  # bins (Gaussian sigma)
# The graph cut measures contrast on the CT clipped to a soft-tissue window, so that the edges it respects are
# those between soft tissues, fat and bone, not the far larger ones to air.
CUT_WINDOW_HU = (-160.0, 240.0)
# The CT's intensity windows the forest's image tests also read (HU): air, soft tissue, bone
CT_WINDOWS_HU = ((-1000.0, -400.0), (-160.0, 240.0), (150.0, 1000.0))


def box_coordinates(image: Image, box: np.ndarray) -> np.ndarray:
    """Every voxel's position relative to `box` (6,) mm: (z, y, x, 3) float32, (x, y, z) order, 0 and 1 at the
    box's walls."""
    nz, ny, nx = image.array.shape[:3]
    zz, yy, xx = np.meshgrid(np.arange(nz), np.arange(ny), np.arange(nx), indexing="ij")
    xyz = image.index_to_physical(np.c_[xx.ravel(), yy.ravel(), zz.ravel()])
    lo, hi = box[0::2], box[1::2]
    return ((xyz - lo) / np.maximum(hi - lo, 1e-3)).astype(np.float32).reshape(nz, ny, nx, 3)


def atlas_index(coords: np.ndarray, bins: int) -> np.ndarray:
    """Normalised box coordinates (..., 3) -> continuous atlas indices (3, ...) in (z, y, x) order, for
    `scipy.ndimage.map_coordinates` (bin centres at integers)."""
    lo, hi = ATLAS_RANGE
    return np.moveaxis((coords[..., ::-1] - lo) / (hi - lo) * bins - 0.5, -1, 0)


class OrganContourer(EntangledForest):
    """Organ contours in CT scans by an entangled forest inside the localizer's boxes.

    The defaults are the shipped model's settings (`recipe.py`).

    Parameters
    ----------
    organs : list of str
        Organ names; label k + 1 of the training label maps is organ k.
    margin_mm : float
        Each organ's box (and the union the forest runs over) widened by this much.
    crop_mm : float
        CT beyond the region that the region's features may read.
    jitter_mm : float
        Training regions sit around the true boxes moved by N(0, jitter_mm) per wall.
    organ_points, background_points : int
        Training voxels per organ and of background, per scan.
    background_scale : float or tuple of float (one per organ)
        Each organ's posterior is divided by this before the arg-max against the background: organs are sampled
        far above their share of the region's voxels, so the leaves over-state them; > 1 trims them back.
    largest_component : bool
        Keep each organ's largest connected component only.
    prior_weight : float or tuple of float (one per organ)
        Weight a of the box atlas: each organ's posterior is multiplied by ((p + 0.02) / 1.02)^a, p the share of
        training scans in which the organ covered the voxel's position relative to its (jittered) box; 0 ignores
        the atlas.
    atlas_bins : int
        Atlas bins per axis over box coordinates -0.5..1.5.
    posterior_smoothing_mm : float
        Width (sigma, mm) of a Gaussian that smooths the forest's posterior maps before the labels are chosen; 0
        leaves them as they are. Neighbouring voxels' votes then count, which removes speckle at organ borders.
    cut_smoothness : float or tuple of float (one per organ)
        Strength of a final contrast-sensitive graph cut of each organ against the rest (Boykov and Jolly 2001),
        inside the organ's widened box, on its weighed posterior share with the CT in a soft-tissue window as the
        contrast guide; 0 keeps the arg-max. Voxels another organ holds stay with it.
    min_expected_share : float
        An organ whose contour holds fewer voxels than this share of the count its box atlas expects inside the
        scan (the atlas summed over the voxels of the scan around its box) gets none and is reported absent: a
        gland that is not the organ, found in a box the localizer placed on a slab that misses the organ, is
        much smaller than the organ; an organ cut by the scan's edge expects fewer voxels too, so it is kept.
        0 turns the check off; it needs the box atlas.
    absence_logit : None or 5 floats (b, a_voxels, a_posterior, a_probability, a_spread)
        A learned check of organs that got voxels, when the caller gives the localizer's evidence (`contour(...,
        evidence=...)`; `imageforest contour` does): the organ is reported absent, its voxels cleared, when
        sigmoid(b + a_voxels ln(n / expected + 0.001) + a_posterior m + a_probability p + a_spread s) exceeds
        `absence_threshold`, n being its voxels, `expected` the count its box atlas expects inside the scan (as
        for `min_expected_share`), m its mean posterior share, p the localizer's presence probability and s the
        localizer's mean wall spread (mm). A logistic regression fitted on head and neck slabs of scans that
        neither the forest nor the localizer saw (`benchmarks/contour/presence.py`): on a slab cut below the
        parotids the localizer still finds them, less sure and with scattered votes, on a smaller gland. None
        turns the check off.
    absence_threshold : float
        The absence probability above which `absence_logit` clears an organ.
    posterior_calibration : None or (n_organs, 2) floats (a, b)
        Each organ's posterior share s, as written out (`Contours.posterior`, `--probabilities`) and averaged over
        its voxels (`mean_posterior`), becomes sigmoid(a logit(s) + b): a map fitted on scans the forest never saw
        (`benchmarks/contour/calibrate.py`) so that of the voxels given 0.7, about 70% are the organ. The forest's
        shares over-state the organs (their voxels are drawn far above their share of a scan). The labels are
        chosen before it and do not change. None keeps the shares.
    prior_maps : bool
        The box atlas read relative to each organ's box is also the forest's first context: the first stage's
        context tests read it as later stages read the posteriors (counted before the forest grows, from the
        same training scans).
    image_windows : tuple of (lo, hi) HU pairs
        As for `EntangledForest`; by default the CT's air, soft-tissue and bone windows (`CT_WINDOWS_HU`). Model
        files saved before windows existed load with none.
    other parameters
        As for `EntangledForest`.
    """

    task = "organ-contouring"
    parameter_constraints: ClassVar[dict[str, Rule]] = {
        **EntangledForest.parameter_constraints, "organs": Anything(), "margin_mm": Real(0.0, 500.0),
        "crop_mm": Real(0.0, 500.0), "jitter_mm": Real(0.0, 100.0), "organ_points": Integer(1, 1_000_000),
        "background_points": Integer(1, 10_000_000), "background_scale": RealEach(0.0, 1000.0, low_open=True),
        "largest_component": Boolean(), "prior_weight": RealEach(0.0, 100.0), "atlas_bins": Integer(2, 64),
        "posterior_smoothing_mm": Real(0.0, 50.0), "cut_smoothness": RealEach(0.0, 1000.0),
        "min_expected_share": Real(0.0, 1.0), "absence_logit": Anything(), "absence_threshold": Real(0.0, 1.0),
        "posterior_calibration": Anything()}

    def __init__(self, organs=(), *, margin_mm: float = 15.0, crop_mm: float = 25.0, jitter_mm: float = 6.0,
                 organ_points: int = 800, background_points: int = 3000, background_scale=1.0,
                 largest_component: bool = True, prior_weight=0.5, atlas_bins: int = 20,
                 posterior_smoothing_mm: float = 2.0, cut_smoothness=0.0, min_expected_share: float = 0.05,
                 absence_logit=(18.6, -0.9903, -6.228, -28.54, 0.4786), absence_threshold: float = 0.95,
                 posterior_calibration=None, n_trees: int = 8, max_depth: int = 16,
                 entangled_depths=(), n_candidates: int = 100, n_thresholds: int | None = 16,
                 criterion: str = "entropy", class_weight=None, bootstrap: bool = False, max_samples=None,
                 min_samples_split: int = 2, min_samples_leaf: int = 8, min_gain: float = 0.0, max_offset_mm=60.0,
                 box_size_mm=(3.0, 30.0), context_share: float = 0.5, mean_share: float = 0.5,
                 local_share: float = 0.5, image_windows=CT_WINDOWS_HU, prior_maps: bool = True,
                 random_state=None, n_jobs: int | None = None) -> None:
        super().__init__(n_trees, max_depth=max_depth, entangled_depths=entangled_depths,
                         n_candidates=n_candidates, n_thresholds=n_thresholds, criterion=criterion,
                         class_weight=class_weight, bootstrap=bootstrap, max_samples=max_samples,
                         min_samples_split=min_samples_split, min_samples_leaf=min_samples_leaf, min_gain=min_gain,
                         max_offset_mm=max_offset_mm, box_size_mm=box_size_mm, context_share=context_share,
                         mean_share=mean_share, local_share=local_share, image_windows=image_windows,
                         prior_maps=prior_maps, random_state=random_state, n_jobs=n_jobs)
        self.organs = organs
        self.margin_mm = margin_mm
        self.crop_mm = crop_mm
        self.jitter_mm = jitter_mm
        self.organ_points = organ_points
        self.background_points = background_points
        self.background_scale = background_scale
        self.largest_component = largest_component
        self.prior_weight = prior_weight
        self.atlas_bins = atlas_bins
        self.posterior_smoothing_mm = posterior_smoothing_mm
        self.cut_smoothness = cut_smoothness
        self.min_expected_share = min_expected_share
        self.absence_logit = absence_logit
        self.absence_threshold = absence_threshold
        self.posterior_calibration = posterior_calibration

    @classmethod
    def from_hyper_parameters(cls, hyper: dict, meta: dict):
        hyper = dict(hyper)
        hyper["organs"] = tuple(hyper.get("organs", ()))
        hyper.setdefault("posterior_smoothing_mm", 0.0)  # saved before the setting existed: predict as they did
        hyper.setdefault("prior_maps", False)
        hyper.setdefault("cut_smoothness", 0.0)
        hyper.setdefault("min_expected_share", 0.0)
        hyper.setdefault("absence_logit", None)
        hyper.setdefault("posterior_calibration", None)
        for key in ("background_scale", "prior_weight", "cut_smoothness", "absence_logit"):
            if isinstance(hyper.get(key), list):
                hyper[key] = tuple(hyper[key])
        if isinstance(hyper.get("posterior_calibration"), list):
            hyper["posterior_calibration"] = tuple(tuple(pair) for pair in hyper["posterior_calibration"])
        return super().from_hyper_parameters(hyper, meta)

    def extra_metadata(self) -> dict:
        return {**super().extra_metadata(), "model_card": getattr(self, "model_card_", {}),
                "training_summary": getattr(self, "training_summary_", {})}

    def restore_leaves(self, meta: dict, arrays: dict[str, np.ndarray]) -> None:
        super().restore_leaves(meta, arrays)
        if not isinstance(self.organs, (list, tuple)) or not all(isinstance(o, str) for o in self.organs):
            raise InvalidInputError("organs must be a list of names")
        if [int(c) for c in self.classes_] != list(range(len(self.organs) + 1)):
            raise InvalidInputError(f"the classes must be 0 (background) and 1..{len(self.organs)}, one per organ")
        self.model_card_ = meta.get("model_card", {})
        self.training_summary_ = meta.get("training_summary", {})
        self._per_organ(self.background_scale, "background_scale")
        self._per_organ(self.prior_weight, "prior_weight")
        self._per_organ(self.cut_smoothness, "cut_smoothness")
        self._absence_logit()
        atlas = arrays.get("prior.atlas")
        if atlas is not None:
            shape = (len(self.organs), *(int(self.atlas_bins),) * 3)
            if atlas.dtype != np.float32 or atlas.shape != shape or not np.all((atlas >= 0) & (atlas <= 1)):
                raise ModelFormatError(f"prior.atlas must be float32 {shape} in [0, 1]")
            self.box_atlas_ = atlas
        else:  # a model from before the box atlas
            self.__dict__.pop("box_atlas_", None)

    def leaf_arrays(self) -> dict[str, np.ndarray]:
        atlas = getattr(self, "box_atlas_", None)
        return {**super().leaf_arrays(), **({"prior.atlas": atlas} if atlas is not None else {})}

    # -- training -----------------------------------------------------------------------------------------
    def training_region(self, scan: Image, labels: np.ndarray, boxes: np.ndarray, rng: np.random.Generator
                        ) -> tuple[Image, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """One training scan's crop, region mask, points (m, 3) z, y, x in the crop and their labels (m,), the
        crop's label map and the jittered boxes: the region around the true `boxes` (n_organs, 6) mm moved by the
        jitter; None if no organ is present."""
        boxes = boxes + rng.normal(0.0, self.jitter_mm, boxes.shape) if self.jitter_mm > 0 else boxes
        region = region_bounds(scan, boxes, self.margin_mm)
        if region is None:
            return None
        bounds = crop_bounds(scan, region, self.crop_mm)
        crop = cut(scan, bounds)
        mask = self._region_mask(bounds, region)
        lab = labels[bounds[4]:bounds[5] + 1, bounds[2]:bounds[3] + 1, bounds[0]:bounds[1] + 1]
        # Half the background voxels come from inside the organs' widened boxes, where the hard decisions are
        # (organ borders); the other half from the whole region.
        near = organ_masks(scan, bounds, boxes, self.margin_mm).any(axis=0)
        half = self.background_points // 2
        picks, values = [], []
        for value, quota, where_ok in [(k + 1, self.organ_points, mask) for k in range(len(self.organs))] + \
                [(0, self.background_points - half, mask), (0, half, mask & near)]:
            where = np.flatnonzero((lab == value).ravel() & where_ok.ravel())
            if where.size == 0:
                continue
            take = where if where.size <= quota else np.sort(rng.choice(where, quota, replace=False))
            picks.append(take)
            values.append(np.full(take.size, value, dtype=np.int64))
        flat, first = np.unique(np.concatenate(picks), return_index=True)  # a voxel drawn twice counts once
        zyx = np.c_[np.unravel_index(flat, lab.shape)].astype(np.int32)
        return crop, mask, zyx, np.concatenate(values)[first], lab, boxes

    @staticmethod
    def _region_mask(bounds: np.ndarray, region: np.ndarray) -> np.ndarray:
        x0, x1, y0, y1, z0, z1 = (int(v) for v in bounds)
        mask = np.zeros((z1 - z0 + 1, y1 - y0 + 1, x1 - x0 + 1), dtype=bool)
        mask[region[4] - z0:region[5] - z0 + 1, region[2] - y0:region[3] - y0 + 1,
             region[0] - x0:region[1] - x0 + 1] = True
        return mask

    def fit_scans(self, scans: list[Image], label_maps: list[np.ndarray], boxes: list[np.ndarray]
                  ) -> OrganContourer:
        """Grow the forest on scans with label maps (z, y, x) uint8 and their organs' true boxes (n_organs, 6) mm,
        and count the box atlas."""
        for name in ("background_scale", "prior_weight", "cut_smoothness"):  # before hours of growth, not after
            self._per_organ(getattr(self, name), name)
        crops, masks, points, labels, jittered, atlas = self._training_regions(scans, label_maps, boxes, keep=True)
        if not crops:
            raise InvalidInputError("no training scan shows any of the organs")
        labels = np.concatenate(labels)
        missing = set(range(len(self.organs) + 1)) - set(np.unique(labels).tolist())
        if missing:
            raise InvalidInputError(f"no training voxel of {', '.join(self._name(c) for c in sorted(missing))}")
        priors = _AtlasPriors(self, crops, jittered) if self.prior_maps else None
        self.fit(crops, np.concatenate(points), labels, regions=masks, priors=priors)
        self.box_atlas_ = atlas
        spacing = np.median([np.asarray(s.spacing, dtype=np.float64) for s in scans], axis=0)
        self.training_summary_ = {**getattr(self, "training_summary_", {}), "scans": len(crops),
                                  "voxels": int(labels.size), "spacing_mm": [round(float(v), 3) for v in spacing]}
        return self

    def fit_atlas(self, scans: list[Image], label_maps: list[np.ndarray], boxes: list[np.ndarray]
                  ) -> OrganContourer:
        """Count the box atlas alone, with the same draws as `fit_scans` (so a forest trained before the atlas
        existed gets the atlas a retraining would give it)."""
        self._training_regions(scans, label_maps, boxes, keep=False)
        return self

    def _training_regions(self, scans, label_maps, boxes, keep: bool) -> tuple:
        """Every scan's training region (crops, region masks, points (image, z, y, x), labels, jittered boxes;
        kept only with `keep`), and the box atlas, which is also set as `box_atlas_`."""
        check_params(self)  # the region's settings are read before `fit` checks the forest's
        self.stage_bounds()
        if not self.organs:
            raise InvalidInputError("give the organ names (organs=...) before training")
        rng = np.random.default_rng(self.random_state)
        crops, masks, points, labels, moved = [], [], [], [], []
        bins = int(self.atlas_bins)
        hits = np.zeros((len(self.organs), bins, bins, bins))
        seen = np.zeros_like(hits)
        for scan, lab, box in zip(scans, label_maps, boxes, strict=True):
            got = self.training_region(scan, np.asarray(lab), np.asarray(box, dtype=np.float64), rng)
            if got is None:
                continue
            crop, mask, zyx, values, crop_labels, jittered = got
            self._count_atlas(crop, crop_labels, jittered, hits, seen)
            if keep:
                points.append(np.c_[np.full(zyx.shape[0], len(crops)), zyx])
                labels.append(values)
                crops.append(crop)
                masks.append(mask)
                moved.append(jittered)
        # Counts smoothed over neighbouring bins: an organ a few voxels across samples its box coordinates
        # coarser than the bins, which would leave bins between the voxels' positions empty
        hits = ndimage.gaussian_filter(hits, (0, ATLAS_SMOOTHING, ATLAS_SMOOTHING, ATLAS_SMOOTHING))
        seen = ndimage.gaussian_filter(seen, (0, ATLAS_SMOOTHING, ATLAS_SMOOTHING, ATLAS_SMOOTHING))
        self.box_atlas_ = np.clip(hits / np.maximum(seen, 1e-3), 0.0, 1.0).astype(np.float32)
        return crops, masks, points, labels, moved, self.box_atlas_

    def _count_atlas(self, crop: Image, labels: np.ndarray, boxes: np.ndarray, hits: np.ndarray,
                     seen: np.ndarray) -> None:
        """Add one scan to the box atlas: per organ with a box, how many of the crop's voxels fall in each bin of
        box coordinates (`seen`) and how many of them are the organ (`hits`)."""
        bins = hits.shape[1]
        for k, box in enumerate(boxes):
            if np.isnan(box).any():
                continue
            index = np.floor(atlas_index(box_coordinates(crop, box), bins) + 0.5).astype(np.int64)
            inside = np.all((index >= 0) & (index < bins), axis=0)
            flat = np.ravel_multi_index(tuple(i[inside] for i in index), (bins,) * 3)
            seen[k] += np.bincount(flat, minlength=bins ** 3).reshape((bins,) * 3)
            organ = (labels == k + 1)[inside]
            hits[k] += np.bincount(flat[organ], minlength=bins ** 3).reshape((bins,) * 3)

    def box_prior(self, crop: Image, boxes: np.ndarray) -> np.ndarray | None:
        """(n_organs, z, y, x) float32: the box atlas read at each voxel of `crop` relative to each organ's box
        (0 for absent organs); None without an atlas."""
        atlas = getattr(self, "box_atlas_", None)
        if atlas is None:
            return None
        out = np.zeros((len(self.organs), *crop.array.shape[:3]), dtype=np.float32)
        for k, box in enumerate(boxes):
            if not np.isnan(box).any():
                index = atlas_index(box_coordinates(crop, box), atlas.shape[1])
                out[k] = ndimage.map_coordinates(atlas[k], index, order=1, mode="constant", cval=0.0)
        return out

    def _per_organ(self, value, name: str) -> np.ndarray:
        """A setting given once or per organ, as (n_organs,) float."""
        out = np.broadcast_to(np.asarray(value, dtype=np.float64), (len(self.organs),)) \
            if np.ndim(value) == 0 or len(value) == len(self.organs) else None
        if out is None:
            raise InvalidInputError(f"{name}: give one value or one per organ ({len(self.organs)}), got {len(value)}")
        return out

    def _absence_logit(self) -> np.ndarray | None:
        """`absence_logit` as (5,) float, None when off."""
        if self.absence_logit is None:
            return None
        try:
            logit = np.asarray(self.absence_logit, dtype=np.float64)
        except (TypeError, ValueError):
            logit = None
        if logit is None or logit.shape != (5,) or not np.all(np.isfinite(logit)):
            raise InvalidInputError(f"absence_logit: give None or 5 finite numbers, got {self.absence_logit!r}")
        return logit

    def _labels(self, forest_post: np.ndarray, scan: Image, crop: Image, bounds: np.ndarray, boxes: np.ndarray,
                mask: np.ndarray, prior: np.ndarray | None = None,
                evidence: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Labels of the crop (z, y, x) uint8 and the weighed posteriors (K, z, y, x) from the forest's: each organ
        inside its widened box, times the box atlas (`prior`, when the caller has read it already), divided by its
        background scale; arg-max, each organ's graph cut where `cut_smoothness` asks for one, then each organ's
        largest component; organs far smaller than their atlas expects are dropped (`min_expected_share`), and
        with the localizer's `evidence` those the absence check calls absent (`absence_logit`)."""
        post = forest_post.copy()
        near = organ_masks(scan, bounds, boxes, self.margin_mm)
        post[1:] *= near
        weight = self._per_organ(self.prior_weight, "prior_weight")
        checked = self.absence_logit is not None and evidence is not None
        if prior is None and (np.any(weight > 0) or self.min_expected_share > 0 or checked):
            prior = self.box_prior(crop, boxes)
        if prior is not None:
            post[1:] *= ((prior + 0.02) / 1.02) ** weight[:, None, None, None]
        post[1:] /= self._per_organ(self.background_scale, "background_scale")[:, None, None, None]
        crop_labels = np.argmax(post, axis=0).astype(np.uint8)
        crop_labels[~mask] = 0
        smoothness = self._per_organ(self.cut_smoothness, "cut_smoothness")
        if np.any(smoothness > 0):
            share = post / np.maximum(post.sum(axis=0), 1e-12)
            guide = np.clip(crop.array.astype(np.float32), *CUT_WINDOW_HU)[..., None]
            spacing_zyx = np.asarray(crop.spacing, dtype=np.float64)[::-1]
            for k in np.flatnonzero(smoothness > 0):
                cut_organ(crop_labels, k + 1, share[k + 1], near[k] & mask, guide, spacing_zyx,
                          float(smoothness[k]))
        if self.largest_component:
            crop_labels = keep_largest(crop_labels, len(self.organs))
        if self.min_expected_share > 0 and prior is not None:
            drop_unexpected(crop_labels, prior, float(self.min_expected_share))
        if checked and prior is not None:
            share = post[1:] / np.maximum(post.sum(axis=0), 1e-12)
            drop_unlikely(crop_labels, share, prior, evidence, self._absence_logit(), float(self.absence_threshold))
        return crop_labels, post

    def _calibration(self) -> np.ndarray | None:
        """`posterior_calibration` checked: (n_organs, 2) float64, or None."""
        if self.posterior_calibration is None:
            return None
        pairs = np.asarray(self.posterior_calibration, dtype=np.float64)
        if pairs.shape != (len(self.organs), 2) or not np.all(np.isfinite(pairs)) or np.any(pairs[:, 0] <= 0):
            raise InvalidInputError(f"posterior_calibration: give None or one (a > 0, b) pair per organ "
                                    f"({len(self.organs)}), got {self.posterior_calibration!r}")
        return pairs

    def _name(self, label: int) -> str:
        return "background" if label == 0 else self.organs[label - 1]

    # -- contouring ---------------------------------------------------------------------------------------
    def contour(self, scan: Image, boxes: np.ndarray, evidence: np.ndarray | None = None) -> Contours:
        """Contours of `scan` given its organs' boxes (n_organs, 6) mm in the model's organ order (NaN rows:
        absent organs, which get no voxels) and, optionally, the localizer's `evidence` (n_organs, 2): each organ's
        presence probability and mean wall spread in mm, which the absence check reads (`absence_logit`)."""
        return self.labels_from_posteriors(*self.forest_posteriors(scan, boxes, evidence))

    def forest_posteriors(self, scan: Image, boxes: np.ndarray,
                          evidence: np.ndarray | None = None) -> tuple[np.ndarray | None, _Region]:
        """The forest's step of `contour`: its posteriors (K, z, y, x) over the crop around the boxes' region
        (None when no organ is present) and the region they belong to. The settings applied after the forest
        (smoothing, atlas weight, background scale, cut) act in `labels_from_posteriors`, so a caller may try
        several on one run of the forest."""
        self.check_fitted()
        boxes = np.asarray(boxes, dtype=np.float64)
        if boxes.shape != (len(self.organs), 6):
            raise InvalidInputError(f"give one box per organ of the model ({len(self.organs)} x 6), got {boxes.shape}")
        if evidence is not None:
            evidence = np.asarray(evidence, dtype=np.float64)
            if evidence.shape != (len(self.organs), 2):
                raise InvalidInputError(f"give the localizer's evidence as one (probability, spread) row per organ "
                                        f"({len(self.organs)} x 2), got {evidence.shape}")
        region = region_bounds(scan, boxes, self.margin_mm)
        if region is None:
            return None, _Region(scan, boxes, None, None, None, None, None)
        bounds = crop_bounds(scan, region, self.crop_mm)
        crop = cut(scan, bounds)
        mask = self._region_mask(bounds, region)
        prior = self.box_prior(crop, boxes) if self.prior_maps else None
        forest_post = np.moveaxis(self.predict_proba_image(crop, mask, prior).array, -1, 0)  # (K, z, y, x)
        return forest_post, _Region(scan, boxes, region, bounds, crop, mask, prior, evidence)

    def labels_from_posteriors(self, forest_post: np.ndarray | None, where: _Region) -> Contours:
        """The contours from the forest's posteriors of `forest_posteriors`."""
        scan, boxes = where.scan, where.boxes
        present = ~np.isnan(boxes).any(axis=1)
        shape = scan.array.shape
        labels = np.zeros(shape, dtype=np.uint8)
        out = Image(labels, scan.spacing.copy(), scan.origin.copy(), scan.direction.copy(), source=scan.source)
        if forest_post is None:
            return Contours(out, None, None, present, np.full(len(self.organs), np.nan))
        crop, mask, bounds = where.crop, where.mask, where.bounds
        if float(self.posterior_smoothing_mm) > 0:
            sigma = float(self.posterior_smoothing_mm) / crop.spacing[::-1]
            forest_post = smooth_posteriors(forest_post, mask, sigma)
        crop_labels, post = self._labels(forest_post, scan, crop, bounds, boxes, mask, where.prior, where.evidence)
        x0, x1, y0, y1, z0, z1 = (int(v) for v in bounds)
        labels[z0:z1 + 1, y0:y1 + 1, x0:x1 + 1] = crop_labels
        full = np.zeros((len(self.organs), *shape), dtype=np.float32)
        total = np.maximum(post.sum(axis=0), 1e-12)
        share = calibrated(post[1:] / total, self._calibration())
        full[:, z0:z1 + 1, y0:y1 + 1, x0:x1 + 1] = share
        means = np.array([share[k][crop_labels == k + 1].mean() if np.any(crop_labels == k + 1) else np.nan
                          for k in range(len(self.organs))])
        return Contours(out, full, where.region, present, means)


@dataclass
class _Region:
    """Where one scan's forest ran: the scan, its boxes (n_organs, 6) mm, the region's and the crop's inclusive
    voxel bounds (6,), the crop, the region's mask on it (z, y, x) and the atlas read there (or None); all but the
    scan and the boxes None when no organ is present; and the localizer's evidence (n_organs, 2) or None."""

    scan: Image
    boxes: np.ndarray
    region: np.ndarray | None
    bounds: np.ndarray | None
    crop: Image | None
    mask: np.ndarray | None
    prior: np.ndarray | None
    evidence: np.ndarray | None = None


class _AtlasPriors:
    """The box atlas read in each training crop relative to its jittered boxes, computed when the forest's image
    stack asks for it (all at once would hold 28 bytes per crop voxel for 7 organs)."""

    def __init__(self, model: OrganContourer, crops: list[Image], boxes: list[np.ndarray]) -> None:
        self.model, self.crops, self.boxes = model, crops, boxes

    def __len__(self) -> int:
        return len(self.crops)

    def __getitem__(self, k: int) -> np.ndarray:
        return self.model.box_prior(self.crops[k], self.boxes[k])


def calibrated(share: np.ndarray, pairs: np.ndarray | None) -> np.ndarray:
    """Posterior shares (K, ...) through each organ's sigmoid(a logit(s) + b) (`pairs` (K, 2)); a share of 0
    (outside the region) stays 0. None: the shares as they are."""
    if pairs is None:
        return share
    out = np.zeros(share.shape, dtype=np.float32)
    for k, (a, b) in enumerate(pairs):
        s = share[k]
        inside = s > 0
        clipped = np.clip(s[inside], 1e-6, 1.0 - 1e-6).astype(np.float64)
        out[k][inside] = 1.0 / (1.0 + np.exp(-(a * np.log(clipped / (1.0 - clipped)) + b)))
    return out


def smooth_posteriors(post: np.ndarray, mask: np.ndarray, sigma_voxels: np.ndarray) -> np.ndarray:
    """Posteriors (K, z, y, x) averaged over a Gaussian of `sigma_voxels` (z, y, x) within the region `mask`
    (normalised by the mask's own smoothed weight, so that the region's edge is not pulled towards zero)."""
    from scipy import ndimage

    weight = ndimage.gaussian_filter(mask.astype(np.float32), sigma_voxels)
    inside = np.maximum(weight, 1e-6)
    out = np.empty_like(post)
    for k in range(post.shape[0]):
        out[k] = ndimage.gaussian_filter(post[k] * mask, sigma_voxels) / inside
    out[:, ~mask] = post[:, ~mask]
    return out


def cut_organ(labels: np.ndarray, label: int, share: np.ndarray, where: np.ndarray, guide: np.ndarray,
              spacing: np.ndarray, smoothness: float) -> None:
    """Re-decide organ `label` by a binary graph cut of its posterior `share` (z, y, x) against the rest over the
    bounding box of `where` (bool), in place in `labels` (z, y, x) uint8: voxels of other organs and outside
    `where` cannot join it. guide: (z, y, x, 1) intensities; spacing: (z, y, x) mm."""
    from imageforest.imaging.regularize import graph_cut

    if not where.any():
        return
    box = tuple(slice(int(v.min()), int(v.max()) + 1) for v in np.nonzero(where))
    own = labels[box]
    free = (own == 0) | (own == label)
    fixed = np.where(free & where[box], -1, 0).astype(np.int32)
    p = share[box]
    posterior = np.stack([1.0 - p, p], axis=-1).astype(np.float32)
    cut = graph_cut(posterior, guide[box], spacing, smoothness, fixed=fixed)
    own[free & (cut == 1)] = label
    own[free & (cut == 0)] = 0


def drop_unexpected(labels: np.ndarray, prior: np.ndarray, share: float) -> None:
    """Clear, in place, each organ k + 1 of `labels` (z, y, x) whose voxels number fewer than `share` times the sum
    of its atlas map `prior[k]` (K, z, y, x) over the same voxels."""
    counts = np.bincount(labels.ravel(), minlength=len(prior) + 1)[1:]
    expected = prior.reshape(len(prior), -1).sum(axis=1, dtype=np.float64)
    for k in np.flatnonzero((counts > 0) & (counts < share * expected)):
        labels[labels == k + 1] = 0


def drop_unlikely(labels: np.ndarray, share: np.ndarray, prior: np.ndarray, evidence: np.ndarray,
                  logit: np.ndarray, threshold: float) -> None:
    """Clear, in place, each organ k + 1 of `labels` (z, y, x) whose absence probability under `logit` (see
    `OrganContourer`'s `absence_logit`) exceeds `threshold`: from its voxel count against the sum of its atlas map
    `prior[k]`, its mean posterior share `share[k]` over its voxels, and the localizer's `evidence[k]`
    (presence probability, mean wall spread in mm)."""
    counts = np.bincount(labels.ravel(), minlength=len(prior) + 1)[1:]
    expected = prior.reshape(len(prior), -1).sum(axis=1, dtype=np.float64)
    for k in np.flatnonzero(counts > 0):
        if not np.all(np.isfinite(evidence[k])):
            continue
        voxels = labels == k + 1
        z = (logit[0] + logit[1] * np.log(counts[k] / max(expected[k], 1e-6) + 1e-3)
             + logit[2] * float(share[k][voxels].mean()) + logit[3] * evidence[k, 0] + logit[4] * evidence[k, 1])
        if 1.0 / (1.0 + np.exp(-z)) > threshold:
            labels[voxels] = 0


def keep_largest(labels: np.ndarray, n_organs: int) -> np.ndarray:
    """Each organ's largest 26-connected component; its other voxels become background."""
    out = labels.copy()
    structure = np.ones((3, 3, 3), dtype=bool)
    for k in range(1, n_organs + 1):
        comp, n = ndimage.label(labels == k, structure)
        if n > 1:
            sizes = np.bincount(comp.ravel())
            sizes[0] = 0
            out[(comp > 0) & (comp != np.argmax(sizes))] = 0
    return out


def contourer_from_record(meta: dict, arrays: dict[str, np.ndarray], source: str = "model") -> OrganContourer:
    """The contourer a model file's (metadata, arrays) hold (`imageforest model-info` reads files through it)."""
    return OrganContourer.from_record(meta, arrays, source)
