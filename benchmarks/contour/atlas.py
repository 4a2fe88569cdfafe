"""The multi-atlas peer: register k training scans (atlases) to the test scan with SimpleITK, affine then a
B-spline, warp their label maps and take the majority vote per voxel (background when no organ wins a majority
over it)."""

from __future__ import annotations

import numpy as np
import SimpleITK as sitk

from imageforest.imaging.io import Image


def _sitk(image: Image) -> sitk.Image:
    return sitk.Cast(image.to_sitk(), sitk.sitkFloat32)


class MultiAtlasSegmentation:
    """Majority vote of k atlases' label maps warped onto the scan.

    Parameters
    ----------
    n_atlases : the training scans with the most organs contoured serve as atlases
    affine_iterations, bspline_iterations : optimiser iterations per resolution level
    mesh : B-spline control points per axis
    """

    def __init__(self, n_atlases: int = 5, affine_iterations: int = 100, bspline_iterations: int = 20,
                 mesh: int = 4, seed: int = 0) -> None:
        self.n_atlases = n_atlases
        self.affine_iterations = affine_iterations
        self.bspline_iterations = bspline_iterations
        self.mesh = mesh
        self.seed = seed

    def fit(self, scans: list[Image], label_maps: list[np.ndarray]) -> MultiAtlasSegmentation:
        n_present = np.array([np.unique(lab).size for lab in label_maps])
        order = np.argsort(-n_present, kind="stable")[: self.n_atlases]
        self.atlases_ = []
        for i in order:
            lab = sitk.GetImageFromArray(np.asarray(label_maps[i], dtype=np.uint8))
            lab.CopyInformation(scans[i].to_sitk())
            self.atlases_.append((_sitk(scans[i]), lab))
        self.n_labels_ = int(max(int(np.max(lab)) for lab in label_maps)) + 1
        return self

    def _method(self) -> sitk.ImageRegistrationMethod:
        reg = sitk.ImageRegistrationMethod()
        reg.SetMetricAsMattesMutualInformation(numberOfHistogramBins=32)
        reg.SetMetricSamplingStrategy(reg.RANDOM)
        reg.SetMetricSamplingPercentage(0.1, seed=self.seed)
        reg.SetInterpolator(sitk.sitkLinear)
        reg.SetShrinkFactorsPerLevel([2, 1])
        reg.SetSmoothingSigmasPerLevel([1.0, 0.0])
        return reg

    def _register(self, fixed: sitk.Image, moving: sitk.Image) -> sitk.Transform:
        init = sitk.CenteredTransformInitializer(fixed, moving, sitk.AffineTransform(3),
                                                 sitk.CenteredTransformInitializerFilter.MOMENTS)
        reg = self._method()
        reg.SetOptimizerAsRegularStepGradientDescent(learningRate=1.0, minStep=1e-3,
                                                     numberOfIterations=self.affine_iterations)
        reg.SetOptimizerScalesFromPhysicalShift()
        reg.SetInitialTransform(init, inPlace=False)
        affine = reg.Execute(fixed, moving)
        bspline = sitk.BSplineTransformInitializer(fixed, [self.mesh] * 3)
        reg = self._method()
        reg.SetShrinkFactorsPerLevel([4, 2])  # the deformable step on coarser grids: minutes, not tens of minutes
        reg.SetSmoothingSigmasPerLevel([2.0, 1.0])
        reg.SetOptimizerAsLBFGSB(gradientConvergenceTolerance=1e-5, numberOfIterations=self.bspline_iterations)
        reg.SetMovingInitialTransform(affine)
        reg.SetInitialTransform(bspline, inPlace=True)
        reg.Execute(fixed, moving)
        return sitk.CompositeTransform([affine, bspline])

    def predict(self, scan: Image) -> np.ndarray:
        """Label map (z, y, x) uint8 on the scan's grid."""
        fixed = _sitk(scan)
        votes = np.zeros((self.n_labels_, *scan.array.shape), dtype=np.uint8)
        for moving, labels in self.atlases_:
            transform = self._register(fixed, moving)
            warped = sitk.Resample(labels, fixed, transform, sitk.sitkNearestNeighbor, 0, sitk.sitkUInt8)
            arr = sitk.GetArrayFromImage(warped)
            for k in range(self.n_labels_):
                votes[k] += arr == k
        out = np.argmax(votes, axis=0).astype(np.uint8)
        # an organ needs a majority of the atlases, not just more votes than each other organ
        out[votes.max(axis=0) * 2 <= len(self.atlases_)] = 0
        return out
