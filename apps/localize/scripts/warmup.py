"""Compile the localizer's numba kernels into the on-disk cache (run by `make install`).

numba compiles a kernel on its first call and caches the machine code beside the sources (`cache=True`); without
this step the first `imageforest localize` after an install would spend several seconds compiling.

    python -m imageforest.apps.localize.scripts.warmup [--training]

`--training` compiles the training path instead (`imageforest train-localizer`, `OrganLocalizer.fit`) on two small
phantoms: `make install` runs it after the engine's warm-up, so a user's first training does not compile it.
"""

from __future__ import annotations

import sys
import time

from imageforest.apps.localize.api import DEFAULT_MODEL, load_localizer
from imageforest.apps.localize.phantom import ORGANS, head_neck_phantom


def main() -> None:
    if not DEFAULT_MODEL.is_file():
        print(f"warm-up skipped: no default model at {DEFAULT_MODEL}")
        return
    t0 = time.perf_counter()
    ct, _ = head_neck_phantom(0, size=(48, 48, 40), spacing=(8.0, 8.0, 6.0))
    load_localizer().localize(ct)
    print(f"localizer kernels compiled and cached in {time.perf_counter() - t0:.1f} s")


def training() -> None:
    from imageforest.apps.localize.model import OrganLocalizer
    from imageforest.imaging.ct_organs import OrganSlices

    t0 = time.perf_counter()
    phantoms = [head_neck_phantom(seed, size=(48, 48, 40), spacing=(8.0, 8.0, 6.0)) for seed in range(2)]
    scans = [ct for ct, _ in phantoms]
    truths = [OrganSlices.from_labels(labels, list(range(1, len(ORGANS) + 1))) for _, labels in phantoms]
    OrganLocalizer(list(ORGANS), n_trees=2, max_depth=4, n_candidates=8, min_samples_leaf=5, points_per_scan=200,
                   crops_per_scan=1, random_state=0).fit(scans, truths)
    print(f"localizer training kernels compiled and cached in {time.perf_counter() - t0:.1f} s")


def warm_up() -> None:
    """The application's warm-up (`imageforest.App.warmup`): localizing, then training."""
    main()
    training()


if __name__ == "__main__":
    training() if "--training" in sys.argv[1:] else main()
