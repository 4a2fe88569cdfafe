"""Compile the body-parts numba kernels into the on-disk cache (run by `make install`).

Without this step the first `imageforest bodyparts` after an install would spend seconds compiling.

    python -m imageforest.apps.bodyparts.scripts.warmup
"""

from __future__ import annotations

import time

import numpy as np

from imageforest.apps.bodyparts.api import DEFAULT_MODEL, load_body_model


def main() -> None:
    if not DEFAULT_MODEL.is_file():
        print(f"warm-up skipped: no default model at {DEFAULT_MODEL}")
        return
    t0 = time.perf_counter()
    yy, xx = np.mgrid[:120, :160]
    depth = np.where(((yy - 60) / 45.0) ** 2 + ((xx - 80) / 15.0) ** 2 < 1, 2500.0, 0.0)  # a standing blob
    model = load_body_model()
    model.parse(depth.astype(np.float32))  # maps as read (16-bit or float32 mm): float32 tables
    model.parse(depth)  # float64 arrays from a pipeline
    print(f"body-parts kernels compiled and cached in {time.perf_counter() - t0:.1f} s")


def warm_up() -> None:
    """The application's warm-up (`imageforest.App.warmup`)."""
    main()


if __name__ == "__main__":
    main()
