"""Compile the localizer's numba kernels into the on-disk cache (run by `make install`).

numba compiles a kernel on its first call and caches the machine code beside the sources (`cache=True`); without
this step the first `imageforest localize` after an install would spend several seconds compiling.

    python -m imageforest.apps.localize.scripts.warmup
"""

from __future__ import annotations

import time

from imageforest.apps.localize.api import DEFAULT_MODEL, load_localizer
from imageforest.apps.localize.phantom import head_neck_phantom


def main() -> None:
    if not DEFAULT_MODEL.is_file():
        print(f"warm-up skipped: no default model at {DEFAULT_MODEL}")
        return
    t0 = time.perf_counter()
    ct, _ = head_neck_phantom(0, size=(48, 48, 40), spacing=(8.0, 8.0, 6.0))
    load_localizer().localize(ct)
    print(f"localizer kernels compiled and cached in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
