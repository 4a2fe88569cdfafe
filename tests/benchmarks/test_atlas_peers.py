"""The atlas peers (benchmarks/atlas_registration.py, the contouring's multi-atlas segmentation) on small phantoms:
the alignment brings an atlas's organs onto the scan's, and an organ that some atlases leave uncontoured is voted
on by the atlases that contour it."""

import numpy as np
import pytest
import SimpleITK as sitk

from benchmarks.atlas_registration import align_affine, clipped_ct
from benchmarks.contour.atlas import MultiAtlasSegmentation
from imageforest.apps.localize.phantom import ORGANS, head_neck_phantom


def _dice(a: np.ndarray, b: np.ndarray) -> float:
    return 2.0 * np.sum(a & b) / max(1, np.sum(a) + np.sum(b))


@pytest.fixture(scope="module")
def phantoms():
    return [head_neck_phantom(seed, size=(80, 80, 64), spacing=(5.0, 5.0, 4.0)) for seed in (3, 4, 5)]


def test_alignment_brings_the_atlas_organs_onto_the_scan(phantoms):
    (scan, scan_labels), (atlas, atlas_labels) = phantoms[0], phantoms[1]
    fixed, moving = clipped_ct(scan), clipped_ct(atlas)
    roi = sitk.GetImageFromArray((atlas_labels.array > 0).astype(np.uint8))
    roi.CopyInformation(atlas.to_sitk())
    transform, similarity = align_affine(fixed, moving, roi)
    labels = sitk.GetImageFromArray(atlas_labels.array)
    labels.CopyInformation(atlas.to_sitk())
    warped = sitk.GetArrayFromImage(sitk.Resample(labels, fixed, transform, sitk.sitkNearestNeighbor, 0))
    truth = scan_labels.array > 0
    assert similarity > 0.5
    assert _dice(warped > 0, truth) > _dice(atlas_labels.array > 0, truth) + 0.05


def test_an_organ_some_atlases_leave_out_is_voted_by_those_that_contour_it(phantoms):
    scans = [ct for ct, _ in phantoms[1:]]
    maps = [lab.array.copy() for _, lab in phantoms[1:]]
    larynx = ORGANS.index("Larynx") + 1
    maps[0][maps[0] == larynx] = 0  # one of the two atlases has no larynx contoured
    model = MultiAtlasSegmentation(n_atlases=2, n_candidates=2, demons_iterations=0).fit(scans, maps)
    out = model.predict(phantoms[0][0])
    assert out.shape == phantoms[0][0].array.shape and out.dtype == np.uint8
    truth = phantoms[0][1].array
    # a plain majority of two atlases would need both; the one that contours the larynx carries it
    assert _dice(out == larynx, truth == larynx) > 0.3
    assert _dice(out > 0, truth > 0) > 0.5
