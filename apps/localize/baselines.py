"""The two baselines the localizer is measured against (benchmarks/localize_eval.py).

- `BodyRelativeMeanBox`: each organ's population mean box, in coordinates relative to the body's bounding box
  (0 at the body's lower face, 1 at its upper face, per axis), placed in the test scan's body box.
- `MultiAtlasAffine`: k atlases (training scans with their boxes) registered to the test scan by an affine
  transform (SimpleITK, Mattes mutual information, two resolution levels); each atlas's box corners are mapped
  into the test scan and the per-wall median over the atlases is the answer.
"""

from __future__ import annotations

import warnings

import numpy as np
import SimpleITK as sitk

from apps.localize.scans import body_edges, body_mask, voxel_box, working_image
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


def _as_sitk(work: Image) -> sitk.Image:
    img = work.to_sitk()
    return sitk.Cast(img, sitk.sitkFloat32)


class MultiAtlasAffine:
    """Affine registration of k atlases to the test scan; per-wall median of the mapped atlas boxes."""

    def __init__(self, n_atlases: int = 5, spacing_mm: float = 4.0, iterations: int = 100, seed: int = 0) -> None:
        self.n_atlases = n_atlases
        self.spacing_mm = spacing_mm
        self.iterations = iterations
        self.seed = seed

    def fit(self, scans: list[Image], boxes: list[np.ndarray]) -> MultiAtlasAffine:
        """Keep the k scans with the most organs contoured as atlases."""
        n_present = np.array([np.sum(~np.isnan(b[:, 0])) for b in boxes])
        order = np.argsort(-n_present, kind="stable")[: self.n_atlases]
        self.atlases_ = [(_as_sitk(working_image(scans[i], self.spacing_mm)), boxes[i]) for i in order]
        return self

    def _register(self, fixed: sitk.Image, moving: sitk.Image) -> sitk.Transform:
        init = sitk.CenteredTransformInitializer(fixed, moving, sitk.AffineTransform(3),
                                                 sitk.CenteredTransformInitializerFilter.MOMENTS)
        reg = sitk.ImageRegistrationMethod()
        reg.SetMetricAsMattesMutualInformation(numberOfHistogramBins=32)
        reg.SetMetricSamplingStrategy(reg.RANDOM)
        reg.SetMetricSamplingPercentage(0.1, seed=self.seed)
        reg.SetInterpolator(sitk.sitkLinear)
        reg.SetOptimizerAsRegularStepGradientDescent(learningRate=1.0, minStep=1e-3,
                                                     numberOfIterations=self.iterations)
        reg.SetOptimizerScalesFromPhysicalShift()
        reg.SetShrinkFactorsPerLevel([2, 1])
        reg.SetSmoothingSigmasPerLevel([1.0, 0.0])
        reg.SetInitialTransform(init, inPlace=False)
        return reg.Execute(fixed, moving)

    def predict(self, scan: Image) -> tuple[np.ndarray, np.ndarray]:
        fixed = _as_sitk(working_image(scan, self.spacing_mm))
        mapped = []
        for moving, boxes in self.atlases_:
            transform = self._register(fixed, moving)
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
