"""The contour tests' phantom scans and the small forest trained on them (shared by tests/apps/contour)."""

from pathlib import Path

import numpy as np

from imageforest.apps.contour.model import OrganContourer
from imageforest.apps.localize.phantom import ORGANS, head_neck_phantom
from imageforest.imaging.ct_organs import OrganSlices
from imageforest.imaging.io import write_image

SIZE, SPACING = (64, 64, 56), (7.8, 7.8, 5.0)
# The box atlas of 2-voxel-wide phantom organs is too coarse to weigh or to read as context (tested apart)
SMALL = {"n_trees": 3, "max_depth": 10, "entangled_depths": (6,), "n_candidates": 30, "organ_points": 150,
         "background_points": 1500, "min_samples_leaf": 4, "background_scale": 1.0, "prior_weight": 0.0,
         "prior_maps": False, "random_state": 0}


def phantom_case(seed: int):
    """(CT, label map, true boxes (7, 6) mm) of one phantom."""
    ct, lab = head_neck_phantom(seed, size=SIZE, spacing=SPACING)
    return ct, lab, OrganSlices.from_labels(lab, list(range(1, 8))).boxes()


def trained_phantom_model(root: Path):
    """(root, model, cases): the small forest trained on phantoms 0-3 and saved as root/model.npz, phantom 4
    written as root/scan.nii.gz, and the five cases."""
    cases = [phantom_case(seed) for seed in range(5)]
    model = OrganContourer(ORGANS, **SMALL).fit_scans([c[0] for c in cases[:4]],
                                                      [np.asarray(c[1].array) for c in cases[:4]],
                                                      [c[2] for c in cases[:4]])
    model.model_card_ = {"name": "test-phantoms", "version": "0"}
    model.save(root / "model.npz")
    write_image(cases[4][0], root / "scan.nii.gz")
    return root, model, cases
