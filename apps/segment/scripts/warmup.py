"""Compile the segmentation numba kernels into the on-disk cache (run by `make install`).

Without this step the first segmentation after an install (`imageforest segment`, or the first stroke in napari)
would spend about two seconds compiling the geodesic distances and the posterior pooling. A picture and a volume
are segmented, as their paths differ (volumes weigh classes, for one).

    python -m imageforest.apps.segment.scripts.warmup
"""

from __future__ import annotations

import time

import numpy as np

from imageforest.apps.segment import SegmentationSession
from imageforest.apps.segment.synthetic import disc_picture, strokes


def main() -> None:
    t0 = time.perf_counter()
    segment_samples()
    print(f"segmentation kernels compiled and cached in {time.perf_counter() - t0:.1f} s")


def segment_samples() -> None:
    """Segment a small picture and a small volume, an update after a stroke included: every kernel an interactive
    session runs is then compiled (the first time) or loaded from numba's cache (in a new process)."""
    picture, _ = disc_picture()
    session = SegmentationSession(picture)
    session.set_scribbles(strokes())
    session.update()
    session.suggest(3)
    # a volume: the picture's red channel stacked into 6 slices, the strokes on the middle one and the object's
    # on one more (a class painted on separate slices is held near them)
    volume = np.repeat(picture[None, :, :, 0].astype(np.float32), 6, axis=0)
    scribbles = np.zeros(volume.shape, dtype=np.uint8)
    scribbles[3] = strokes()
    scribbles[1][scribbles[3] == 1] = 1
    session = SegmentationSession(volume, spacing=(3.0, 1.0, 1.0))
    first = scribbles.copy()
    first[3, :, : first.shape[2] // 2] = 0
    session.set_scribbles(first)
    session.update()
    session.set_scribbles(scribbles)  # one more stroke: the local update's paths
    session.update()
    session.suggest(3)


def warm_up() -> None:
    """The application's warm-up (`imageforest.App.warmup`)."""
    main()


if __name__ == "__main__":
    main()
