"""The multi-atlas peer: register training scans (atlases) to the test scan with SimpleITK, warp their label maps
and take the majority vote per voxel (background when no organ wins a majority over it).

Each atlas is aligned in three steps, as head-and-neck atlas segmentation does it (Han et al., "Atlas-based
auto-segmentation of head and neck CT images", MICCAI 2008; Iglesias & Sabuncu, "Multi-atlas segmentation of
biomedical images: a survey", 2015):

1. rigid, on the bodies (CT above -250 HU), correlation of the CT clipped to soft tissue and bone;
2. affine, measured only near the organs (the atlas's organs after step 1, dilated by `roi_mm`): head-and-neck
   scans differ most in how far they reach into the chest and the skull, and a whole-scan affine spends its
   freedom matching those ends instead of the neck;
3. deformable: fast symmetric-forces demons (Vercauteren et al., 2007) over two resolutions, the atlas's
   intensities matched to the scan's histogram first.

`n_candidates` atlases are aligned affinely and the `n_atlases` whose CT correlates best with the scan near the
organs go on to the deformable step and the vote (atlas selection).
"""

from __future__ import annotations

import numpy as np
import SimpleITK as sitk

from imageforest.imaging.io import Image

BODY_HU = -250.0  # the body mask's threshold: above air, lung and the challenge's masked -1024
CLIP_HU = (-300.0, 1200.0)  # soft tissue to bone: air inside and outside the body count alike


def _sitk(image: Image) -> sitk.Image:
    return sitk.Cast(image.to_sitk(), sitk.sitkFloat32)


def _clip(image: sitk.Image) -> sitk.Image:
    return sitk.Clamp(image, sitk.sitkFloat32, *CLIP_HU)


class MultiAtlasSegmentation:
    """Majority vote of atlases' label maps warped onto the scan.

    Parameters
    ----------
    n_atlases : atlases that vote
    n_candidates : atlases aligned affinely, of which the `n_atlases` most similar to the scan vote (the
        training scans with the most organs contoured first)
    roi_mm : how far around the atlas's organs the affine step is measured (mm)
    demons_iterations : iterations per resolution of the deformable step (0: affine only)
    demons_sigma : smoothing of the displacement field (voxels)
    """

    def __init__(self, n_atlases: int = 5, n_candidates: int = 10, roi_mm: float = 30.0,
                 demons_iterations: int = 50, demons_sigma: float = 1.5, seed: int = 0) -> None:
        self.n_atlases = n_atlases
        self.n_candidates = n_candidates
        self.roi_mm = roi_mm
        self.demons_iterations = demons_iterations
        self.demons_sigma = demons_sigma
        self.seed = seed

    def fit(self, scans: list[Image], label_maps: list[np.ndarray]) -> MultiAtlasSegmentation:
        n_present = np.array([np.unique(lab).size for lab in label_maps])
        order = np.argsort(-n_present, kind="stable")[: max(self.n_candidates, self.n_atlases)]
        self.n_labels_ = int(max(int(np.max(lab)) for lab in label_maps)) + 1
        self.atlases_ = []
        for i in order:
            lab = sitk.GetImageFromArray(np.asarray(label_maps[i], dtype=np.uint8))
            lab.CopyInformation(scans[i].to_sitk())
            contoured = np.bincount(np.ravel(label_maps[i]), minlength=self.n_labels_)[: self.n_labels_] > 0
            self.atlases_.append((_clip(_sitk(scans[i])), lab, contoured))
        return self

    def _method(self, mask: sitk.Image) -> sitk.ImageRegistrationMethod:
        reg = sitk.ImageRegistrationMethod()
        reg.SetMetricAsCorrelation()
        reg.SetMetricSamplingStrategy(reg.RANDOM)
        reg.SetMetricSamplingPercentage(0.2, seed=self.seed)
        reg.SetMetricFixedMask(mask)
        reg.SetInterpolator(sitk.sitkLinear)
        reg.SetShrinkFactorsPerLevel([4, 2, 1])
        reg.SetSmoothingSigmasPerLevel([2.0, 1.0, 0.0])
        reg.SmoothingSigmasAreSpecifiedInPhysicalUnitsOff()
        reg.SetOptimizerAsRegularStepGradientDescent(learningRate=1.0, minStep=1e-3, numberOfIterations=200)
        reg.SetOptimizerScalesFromPhysicalShift()
        return reg

    def _affine(self, fixed: sitk.Image, body: sitk.Image, moving: sitk.Image,
                labels: sitk.Image) -> tuple[sitk.AffineTransform, sitk.Image]:
        """The atlas's affine alignment to the scan and the region it was measured over."""
        init = sitk.CenteredTransformInitializer(fixed, moving, sitk.Euler3DTransform(),
                                                 sitk.CenteredTransformInitializerFilter.MOMENTS)
        reg = self._method(body)
        reg.SetInitialTransform(init, inPlace=False)
        rigid = sitk.Euler3DTransform(reg.Execute(fixed, moving).GetNthTransform(0))
        affine = sitk.AffineTransform(3)
        affine.SetCenter(rigid.GetCenter())
        affine.SetMatrix(rigid.GetMatrix())
        affine.SetTranslation(rigid.GetTranslation())
        organs = sitk.Resample(labels, fixed, affine, sitk.sitkNearestNeighbor, 0, sitk.sitkUInt8) > 0
        radius = [max(1, round(self.roi_mm / s)) for s in fixed.GetSpacing()]
        roi = sitk.Cast(sitk.BinaryDilate(organs, radius) & body, sitk.sitkUInt8)
        reg = self._method(roi)
        reg.SetInitialTransform(affine, inPlace=True)
        return sitk.AffineTransform(reg.Execute(fixed, moving)), roi

    def _demons(self, fixed: sitk.Image, moving: sitk.Image) -> sitk.Transform:
        """Displacement field taking the scan's grid into the (affinely aligned) atlas, coarse to fine."""
        moving = sitk.HistogramMatching(moving, fixed, numberOfHistogramLevels=256, numberOfMatchPoints=15,
                                        thresholdAtMeanIntensity=False)
        field = None
        for shrink in (2, 1):
            f, m = fixed, moving
            if shrink > 1:
                sigma = 0.5 * shrink * float(np.mean(fixed.GetSpacing()))
                f = sitk.Shrink(sitk.SmoothingRecursiveGaussian(fixed, sigma), [shrink] * 3)
                m = sitk.Shrink(sitk.SmoothingRecursiveGaussian(moving, sigma), [shrink] * 3)
            demons = sitk.FastSymmetricForcesDemonsRegistrationFilter()
            demons.SetNumberOfIterations(self.demons_iterations)
            demons.SetSmoothDisplacementField(True)
            demons.SetStandardDeviations(self.demons_sigma)
            if field is None:
                field = demons.Execute(f, m)
            else:
                field = demons.Execute(f, m, sitk.Resample(field, f, sitk.Transform(), sitk.sitkLinear, 0.0,
                                                           field.GetPixelID()))
        field = sitk.Resample(field, fixed, sitk.Transform(), sitk.sitkLinear, 0.0, field.GetPixelID())
        return sitk.DisplacementFieldTransform(sitk.Cast(field, sitk.sitkVectorFloat64))

    def predict(self, scan: Image) -> np.ndarray:
        """Label map (z, y, x) uint8 on the scan's grid."""
        fixed = _clip(_sitk(scan))
        body = sitk.Cast(fixed > BODY_HU, sitk.sitkUInt8)
        aligned = []
        for moving, labels, contoured in self.atlases_:
            affine, roi = self._affine(fixed, body, moving, labels)
            warped = sitk.Resample(moving, fixed, affine, sitk.sitkLinear, CLIP_HU[0])
            inside = sitk.GetArrayViewFromImage(roi) > 0
            a = sitk.GetArrayViewFromImage(fixed)[inside]
            b = sitk.GetArrayViewFromImage(warped)[inside]
            similarity = float(np.corrcoef(a, b)[0, 1]) if a.size > 1 else -1.0
            aligned.append((similarity, warped,
                            sitk.Resample(labels, fixed, affine, sitk.sitkNearestNeighbor, 0, sitk.sitkUInt8),
                            contoured))
        aligned.sort(key=lambda t: -t[0])
        votes = np.zeros((self.n_labels_, *scan.array.shape), dtype=np.float32)
        voters = np.zeros(self.n_labels_)
        for _, warped, labels, contoured in aligned[: self.n_atlases]:
            if self.demons_iterations > 0:
                labels = sitk.Resample(labels, fixed, self._demons(fixed, warped), sitk.sitkNearestNeighbor, 0,
                                       sitk.sitkUInt8)
            arr = sitk.GetArrayViewFromImage(labels)
            for k in range(1, self.n_labels_):
                votes[k] += arr == k
            voters += contoured
        # Not every atlas contours every organ: an organ's share is of the atlases that contour it, and it needs
        # more than half of them
        share = votes / np.maximum(voters, 1)[:, None, None, None]
        out = np.argmax(share, axis=0).astype(np.uint8)
        out[share.max(axis=0) <= 0.5] = 0
        return out
