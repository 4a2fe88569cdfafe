"""Compile the detection numba kernels into the on-disk cache (run by `make install`).

Without this step the first `imageforest detect` after an install would spend seconds compiling.

    python -m imageforest.apps.detect.scripts.warmup
"""

from __future__ import annotations

import time

import numpy as np

from imageforest.apps.detect.api import DEFAULT_MODEL, SHIPPED, load_detector


def main() -> None:
    if not DEFAULT_MODEL.is_file():
        print(f"warm-up skipped: no default model at {DEFAULT_MODEL}")
        return
    t0 = time.perf_counter()
    rgb = np.zeros((60, 80, 3), np.float32)
    rgb[20:40, 20:60] = (0.4, 0.25, 0.1)  # a brown block on black
    load_detector().detect(rgb)
    if SHIPPED["cars"].is_file():  # the viewpoint kernel too
        load_detector("cars").detect(rgb, threshold=0.0)
    print(f"detection kernels compiled and cached in {time.perf_counter() - t0:.1f} s")


def warm_up() -> None:
    """The application's warm-up (`imageforest.App.warmup`)."""
    main()


if __name__ == "__main__":
    main()
