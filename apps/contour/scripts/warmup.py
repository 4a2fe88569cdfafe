"""Compile the contourer's numba kernels into the on-disk cache (run by `make install`).

    python -m imageforest.apps.contour.scripts.warmup

Trains a tiny contourer on two small phantoms and contours a third, which compiles the entangled forest's growth
and descent; the localizer's own warm-up compiles the box-finding half of `imageforest contour`.
"""

from __future__ import annotations

import time

import numpy as np

from imageforest.apps.localize.phantom import ORGANS, head_neck_phantom


def warm_up() -> None:
    """The application's warm-up (`imageforest.App.warmup`)."""
    from imageforest.apps.contour.model import OrganContourer
    from imageforest.imaging.ct_organs import OrganSlices

    t0 = time.perf_counter()
    phantoms = [head_neck_phantom(seed, size=(40, 40, 32), spacing=(9.0, 9.0, 7.0)) for seed in range(3)]
    boxes = [OrganSlices.from_labels(lab, list(range(1, len(ORGANS) + 1))).boxes() for _, lab in phantoms]
    model = OrganContourer(ORGANS, n_trees=2, max_depth=4, entangled_depths=(2,), n_candidates=8, organ_points=30,
                           background_points=200, random_state=0)
    model.fit_scans([ct for ct, _ in phantoms[:2]], [np.asarray(lab.array) for _, lab in phantoms[:2]], boxes[:2])
    model.contour(phantoms[2][0], boxes[2])
    print(f"contour kernels compiled and cached in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    warm_up()
