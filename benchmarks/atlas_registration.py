"""Aligning an atlas (a training CT) to a scan with SimpleITK: the step both atlas peers share (the localizer's
multi-atlas boxes, the contouring's multi-atlas labels).

Two steps, as head-and-neck atlas segmentation does it (Han et al., "Atlas-based auto-segmentation of head and neck
CT images", MICCAI 2008; Iglesias & Sabuncu, "Multi-atlas segmentation of biomedical images: a survey", 2015):

1. rigid, measured over the scan's body (CT above -250 HU), correlation of the CT clipped to soft tissue and bone;
2. affine, measured only near the atlas's organs (its region of interest after step 1, dilated by `roi_mm`):
   head-and-neck scans differ most in how far they reach into the chest and the skull, and a whole-scan affine
   spends its freedom matching those ends instead of the neck.

The correlation inside that region afterwards ranks the atlases (atlas selection).
"""

from __future__ import annotations

import numpy as np
import SimpleITK as sitk

from imageforest.imaging.io import Image

BODY_HU = -250.0  # the body mask's threshold: above air, lung and the openkbp challenge's masked -1024
CLIP_HU = (-300.0, 1200.0)  # soft tissue to bone: air inside and outside the body count alike


def clipped_ct(image: Image) -> sitk.Image:
    """The scan as a float32 SimpleITK image, clipped to `CLIP_HU`."""
    return sitk.Clamp(sitk.Cast(image.to_sitk(), sitk.sitkFloat32), sitk.sitkFloat32, *CLIP_HU)


def _method(mask: sitk.Image, seed: int) -> sitk.ImageRegistrationMethod:
    reg = sitk.ImageRegistrationMethod()
    reg.SetMetricAsCorrelation()
    reg.SetMetricSamplingStrategy(reg.RANDOM)
    reg.SetMetricSamplingPercentage(0.2, seed=seed)
    reg.SetMetricFixedMask(mask)
    reg.SetInterpolator(sitk.sitkLinear)
    reg.SetShrinkFactorsPerLevel([4, 2, 1])
    reg.SetSmoothingSigmasPerLevel([2.0, 1.0, 0.0])
    reg.SmoothingSigmasAreSpecifiedInPhysicalUnitsOff()
    reg.SetOptimizerAsRegularStepGradientDescent(learningRate=1.0, minStep=1e-3, numberOfIterations=200)
    reg.SetOptimizerScalesFromPhysicalShift()
    return reg


def align_affine(fixed: sitk.Image, moving: sitk.Image, moving_roi: sitk.Image, roi_mm: float = 30.0,
                 seed: int = 0) -> tuple[sitk.AffineTransform, float]:
    """The affine transform taking the scan's points (`fixed`) to the atlas's (`moving`), and how well they agree.

    Parameters
    ----------
    fixed, moving : `clipped_ct` images of the scan and of the atlas
    moving_roi : uint8 mask on the atlas's grid of the region that matters (its organs, or their boxes)
    roi_mm : margin around that region, mapped into the scan, over which the affine step is measured: as many
        voxels along every axis as make `roi_mm` along the finest (30 mm is 47-65 mm in the planes of the openkbp
        scans, whose slices lie 2-3 mm apart)

    Returns
    -------
    transform : fixed -> moving points, for `sitk.Resample(atlas_image, fixed, transform, ...)`
    similarity : correlation of the scan's and the aligned atlas's CT over the region (-1 when it is empty)
    """
    body = sitk.Cast(fixed > BODY_HU, sitk.sitkUInt8)
    init = sitk.CenteredTransformInitializer(fixed, moving, sitk.Euler3DTransform(),
                                             sitk.CenteredTransformInitializerFilter.MOMENTS)
    reg = _method(body, seed)
    reg.SetInitialTransform(init, inPlace=False)
    rigid = sitk.Euler3DTransform(reg.Execute(fixed, moving).GetNthTransform(0))
    affine = sitk.AffineTransform(3)
    affine.SetCenter(rigid.GetCenter())
    affine.SetMatrix(rigid.GetMatrix())
    affine.SetTranslation(rigid.GetTranslation())
    region = sitk.Resample(moving_roi, fixed, affine, sitk.sitkNearestNeighbor, 0, sitk.sitkUInt8) > 0
    radius = max(1, round(roi_mm / min(fixed.GetSpacing())))
    roi = sitk.Cast(sitk.BinaryDilate(region, [radius] * 3) & body, sitk.sitkUInt8)
    if not np.any(sitk.GetArrayViewFromImage(roi)):
        return affine, -1.0
    reg = _method(roi, seed)
    reg.SetInitialTransform(affine, inPlace=True)
    affine = sitk.AffineTransform(reg.Execute(fixed, moving))
    warped = sitk.Resample(moving, fixed, affine, sitk.sitkLinear, CLIP_HU[0])
    inside = sitk.GetArrayViewFromImage(roi) > 0
    a = sitk.GetArrayViewFromImage(fixed)[inside]
    b = sitk.GetArrayViewFromImage(warped)[inside]
    return affine, float(np.corrcoef(a, b)[0, 1]) if a.size > 1 else -1.0
