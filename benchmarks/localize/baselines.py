"""The three baselines the localizer is measured against (benchmarks/localize/cross_validate.py).

- `BodyRelativeMeanBox`: each organ's population mean box, in coordinates relative to the body's bounding box
  (0 at the body's lower face, 1 at its upper face, per axis), placed in the test scan's body box.
- `MultiAtlasAffine`: atlases (training scans with their boxes) aligned to the test scan by a rigid then an
  affine transform measured near the atlas's boxes (`benchmarks/atlas_registration.py`); the k that agree best
  with the scan there map their box corners into it, and the per-wall median over them is the answer.
- `ExtraTreesVoting`: the quick regression-voting prototype a user would write first: per organ, scikit-learn's
  ExtraTreesRegressor on a fixed set of random displaced-box means (mm, on the 4 mm working grid's integral image)
  regresses every body voxel's displacements to the organ's six walls; a scan's box is the per-wall median of all
  its voxels' votes. No vote selection, no presence model (an organ is reported where the training scans mostly
  had it), no fine stages: what separates it from `OrganLocalizer` is the method, not the features.
"""

from __future__ import annotations

import warnings

import numpy as np
import SimpleITK as sitk

from benchmarks.atlas_registration import align_affine, clipped_ct
from imageforest.apps.localize.snapping import voxel_box
from imageforest.imaging.ct import AIR_HU, body_edges, body_mask, voxel_positions, working_image
from imageforest.imaging.ct_organs import WALL_AXIS, box_to_index
from imageforest.imaging.features import BoxFeatures, ImageStack
from imageforest.imaging.io import Image


def body_box(work: Image) -> np.ndarray:
    """(6,) outer faces in mm of the body voxels (HU > -500) of a scan, [x_lo, x_hi, y_lo, y_hi, z_lo, z_hi]."""
    mask = body_mask(work)
    return body_edges(mask, work) if mask.any() else np.full(6, np.nan)


class BodyRelativeMeanBox:
    """Population mean box relative to the body's bounding box."""

    def __init__(self, spacing_mm: float = 4.0) -> None:
        self.spacing_mm = spacing_mm

    def fit(self, scans: list[Image], boxes: list[np.ndarray]) -> BodyRelativeMeanBox:
        rel, present = [], []
        for scan, b in zip(scans, boxes, strict=True):
            body = body_box(working_image(scan, self.spacing_mm))
            lo, size = body[0::2], body[1::2] - body[0::2]
            rel.append((b - np.repeat(lo, 2)) / np.repeat(size, 2))
            present.append(~np.isnan(b[:, 0]))
        rel_arr = np.array(rel)
        self.relative_ = np.nanmean(rel_arr, axis=0)
        self.present_ = np.mean(present, axis=0) >= 0.5
        return self

    def predict(self, scan: Image) -> tuple[np.ndarray, np.ndarray]:
        body = body_box(working_image(scan, self.spacing_mm))
        lo, size = body[0::2], body[1::2] - body[0::2]
        boxes = np.repeat(lo, 2) + self.relative_ * np.repeat(size, 2)
        return np.array([voxel_box(scan, b) for b in boxes]), self.present_.copy()


class MultiAtlasAffine:
    """Affine alignment of atlases to the test scan; per-wall median of the k best-aligned atlases' boxes.

    Parameters
    ----------
    n_atlases : atlases whose boxes are pooled
    n_candidates : atlases aligned, of which the `n_atlases` most similar to the scan near their boxes are pooled
        (the training scans with the most organs contoured first)
    spacing_mm : the working grid the images are aligned on (mm)
    """

    def __init__(self, n_atlases: int = 5, n_candidates: int = 10, spacing_mm: float = 4.0, seed: int = 0) -> None:
        self.n_atlases = n_atlases
        self.n_candidates = n_candidates
        self.spacing_mm = spacing_mm
        self.seed = seed

    def fit(self, scans: list[Image], boxes: list[np.ndarray]) -> MultiAtlasAffine:
        """Keep the scans with the most organs contoured as atlases, each with a mask of its boxes."""
        n_present = np.array([np.sum(~np.isnan(b[:, 0])) for b in boxes])
        order = np.argsort(-n_present, kind="stable")[: max(self.n_candidates, self.n_atlases)]
        self.atlases_ = []
        for i in order:
            work = working_image(scans[i], self.spacing_mm)
            inside = np.zeros(work.array.shape, dtype=np.uint8)
            for b in boxes[i][~np.isnan(boxes[i][:, 0])]:
                lo, hi = box_to_index(work, b)
                inside[lo[2]:hi[2] + 1, lo[1]:hi[1] + 1, lo[0]:hi[0] + 1] = 1
            roi = sitk.GetImageFromArray(inside)
            roi.CopyInformation(work.to_sitk())
            self.atlases_.append((clipped_ct(work), roi, boxes[i]))
        return self

    def predict(self, scan: Image) -> tuple[np.ndarray, np.ndarray]:
        fixed = clipped_ct(working_image(scan, self.spacing_mm))
        aligned = []
        for moving, roi, boxes in self.atlases_:
            transform, similarity = align_affine(fixed, moving, roi, seed=self.seed)
            aligned.append((similarity, transform, boxes))
        aligned.sort(key=lambda t: -t[0])
        mapped = []
        for _, transform, boxes in aligned[: self.n_atlases]:
            inverse = transform.GetInverse()  # the registration maps fixed points to moving points
            out = np.full((boxes.shape[0], 6), np.nan)
            for k, b in enumerate(boxes):
                if np.isnan(b[0]):
                    continue
                corners = np.array([[x, y, z] for x in b[0:2] for y in b[2:4] for z in b[4:6]])
                pts = np.array([inverse.TransformPoint(tuple(float(v) for v in c)) for c in corners])
                out[k] = np.ravel(np.c_[pts.min(axis=0), pts.max(axis=0)])
            mapped.append(out)
        stack = np.array(mapped)
        # An organ no atlas holds has an all-NaN column: its median is NaN (absent), which is no cause for a warning.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            median = np.array([voxel_box(scan, b) for b in np.nanmedian(stack, axis=0)])
        present = np.mean(~np.isnan(stack[:, :, 0]), axis=0) >= 0.5
        return median, present


class ExtraTreesVoting:
    """Per-organ scikit-learn ExtraTreesRegressor on random box features; every voxel votes, per-wall median.

    Parameters
    ----------
    n_features : random displaced-box means per voxel (offsets up to `max_offset_mm`, sides `box_size_mm`, mm)
    points_per_scan : random body voxels per training scan; vote_points : body voxels voting per test scan
    n_trees, min_samples_leaf, max_features : the ExtraTreesRegressor's
    """

    def __init__(self, n_features: int = 200, max_offset_mm: float = 80.0, box_size_mm=(4.0, 40.0),
                 points_per_scan: int = 400, vote_points: int = 4000, n_trees: int = 16, min_samples_leaf: int = 5,
                 max_features: float = 0.3, spacing_mm: float = 4.0, n_jobs: int = -1, seed: int = 0) -> None:
        self.n_features = n_features
        self.max_offset_mm = max_offset_mm
        self.box_size_mm = box_size_mm
        self.points_per_scan = points_per_scan
        self.vote_points = vote_points
        self.n_trees = n_trees
        self.min_samples_leaf = min_samples_leaf
        self.max_features = max_features
        self.spacing_mm = spacing_mm
        self.n_jobs = n_jobs
        self.seed = seed

    def _features(self, work: Image, zyx: np.ndarray) -> np.ndarray:
        """(n, n_features) float32 box means around the voxels zyx (n, 3) of a working-grid image."""
        stack = ImageStack.from_images([work], integral=True)
        points = np.c_[np.zeros(len(zyx)), zyx].astype(np.int32)
        n = len(points)
        responses = self.family_.responses((stack, points), self.params_, np.arange(n, dtype=np.int64),
                                           np.zeros(n, dtype=np.int64))
        return np.ascontiguousarray(responses.T)

    def fit(self, scans: list[Image], boxes: list[np.ndarray]) -> ExtraTreesVoting:
        from sklearn.ensemble import ExtraTreesRegressor  # a dev dependency, needed by this benchmark peer only

        rng = np.random.default_rng(self.seed)
        self.family_ = BoxFeatures(max_offset_mm=float(self.max_offset_mm), box_size_mm=tuple(self.box_size_mm),
                                   fill=AIR_HU)
        self.params_ = self.family_.sample(rng, 1, int(self.n_features))
        n_org = boxes[0].shape[0]
        X, Y = [], []
        for scan, b in zip(scans, boxes, strict=True):
            work = working_image(scan, self.spacing_mm)
            zz, yy, xx = np.nonzero(body_mask(work))
            if zz.size == 0:  # nothing to learn from a scan without body voxels
                continue
            pick = np.sort(rng.choice(zz.size, size=min(int(self.points_per_scan), zz.size), replace=False))
            zyx = np.c_[zz[pick], yy[pick], xx[pick]]
            X.append(self._features(work, zyx))
            pos = voxel_positions(work, zyx)[:, WALL_AXIS]  # (n, 6) the voxel's coordinate along each wall's axis
            Y.append(b[None, :, :] - pos[:, None, :])  # (n, n_organs, 6), NaN where the organ is not contoured
        X_all, Y_all = np.concatenate(X), np.concatenate(Y)
        self.models_ = []
        for o in range(n_org):
            rows = ~np.isnan(Y_all[:, o, 0])
            if not rows.any():
                self.models_.append(None)
                continue
            model = ExtraTreesRegressor(n_estimators=int(self.n_trees), min_samples_leaf=int(self.min_samples_leaf),
                                        max_features=self.max_features, n_jobs=self.n_jobs,
                                        random_state=int(rng.integers(2**31)))
            self.models_.append(model.fit(X_all[rows], Y_all[rows, o]))
        self.present_ = np.mean([~np.isnan(b[:, 0]) for b in boxes], axis=0) >= 0.5
        return self

    def predict(self, scan: Image) -> tuple[np.ndarray, np.ndarray]:
        work = working_image(scan, self.spacing_mm)
        zz, yy, xx = np.nonzero(body_mask(work))
        out = np.full((len(self.models_), 6), np.nan)
        if zz.size == 0:
            return out, np.zeros(len(self.models_), dtype=bool)
        pick = np.linspace(0, zz.size - 1, min(int(self.vote_points), zz.size)).round().astype(np.int64)
        zyx = np.c_[zz[pick], yy[pick], xx[pick]]
        X = self._features(work, zyx)
        pos = voxel_positions(work, zyx)[:, WALL_AXIS]
        for o, model in enumerate(self.models_):
            if model is not None:
                out[o] = voxel_box(scan, np.median(pos + model.predict(X), axis=0))
        return out, self.present_ & ~np.isnan(out[:, 0])
