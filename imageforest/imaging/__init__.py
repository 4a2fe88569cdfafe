"""The imaging layer: images with geometry, integral images, lazily evaluated image features, image forests.

    from imageforest.imaging import read_image, ImageClassificationForest, BoxFeatures, DepthProbes

Names are imported on first use (PEP 562): reading a scan should not pay for the filter bank's scipy.ndimage or
the estimators.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "BoxFeatures": "imageforest.imaging.features",
    "DepthProbes": "imageforest.imaging.features",
    "ImageStack": "imageforest.imaging.features",
    "FILTERS": "imageforest.imaging.filters",
    "FilterBank": "imageforest.imaging.filters",
    "ImageClassificationForest": "imageforest.imaging.forests",
    "all_points": "imageforest.imaging.forests",
    "integral_image": "imageforest.imaging.integral",
    "Image": "imageforest.imaging.io",
    "ImageReadError": "imageforest.imaging.io",
    "read_image": "imageforest.imaging.io",
    "resample": "imageforest.imaging.io",
    "write_image": "imageforest.imaging.io",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'imageforest.imaging' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


__all__ = sorted(_LAZY)
