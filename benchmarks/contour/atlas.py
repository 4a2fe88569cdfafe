"""The multi-atlas peer: register training scans (atlases) to the test scan with SimpleITK, warp their label maps
and take the majority vote per voxel (background when no organ wins a majority over it).

Each atlas is aligned affinely near its organs (`benchmarks/atlas_registration.py`), then deformably: fast
symmetric-forces demons (Vercauteren et al., "Non-parametric diffeomorphic image registration with the demons
algorithm", MICCAI 2007) over two resolutions, the atlas's intensities matched to the scan's histogram first.
`n_candidates` atlases are aligned affinely and the `n_atlases` whose CT correlates best with the scan near the
organs go on to the deformable step and the vote (atlas selection).
"""

from __future__ import annotations

import numpy as np
import SimpleITK as sitk

from benchmarks.atlas_registration import CLIP_HU, align_affine, clipped_ct
from imageforest.imaging.io import Image


class MultiAtlasSegmentation:
    """Majority vote of atlases' label maps warped onto the scan.

    Parameters
    ----------
    n_atlases : atlases that vote
    n_candidates : atlases aligned affinely, of which the `n_atlases` most similar to the scan vote (the
        training scans with the most organs contoured first)
    roi_mm : how far around the atlas's organs the affine step is measured (mm along the scan's finest axis)
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
            self.atlases_.append((clipped_ct(scans[i]), lab, contoured))
        return self

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
        fixed = clipped_ct(scan)
        aligned = []
        for moving, labels, contoured in self.atlases_:
            affine, similarity = align_affine(fixed, moving, labels > 0, self.roi_mm, self.seed)
            aligned.append((similarity, sitk.Resample(moving, fixed, affine, sitk.sitkLinear, CLIP_HU[0]),
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
