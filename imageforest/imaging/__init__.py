"""The imaging layer: images with geometry, integral images, lazily evaluated image features, image forests.

    from imageforest.imaging import read_image, ImageClassificationForest, BoxFeatures, DepthProbes

Names are imported on first use (PEP 562): reading a scan should not pay for the filter bank's scipy.ndimage or
the estimators.
"""

from __future__ import annotations

from imageforest.lazy import lazy_attributes

_LAZY = {
    "BoxFeatures": "imageforest.imaging.features",
    "DepthProbes": "imageforest.imaging.features",
    "ImageStack": "imageforest.imaging.features",
    "PixelPairs": "imageforest.imaging.pixel_pairs",
    "hough_channels": "imageforest.imaging.channels",
    "FILTERS": "imageforest.imaging.filters",
    "FilterBank": "imageforest.imaging.filters",
    "ImageClassificationForest": "imageforest.imaging.forests",
    "ImageRegressionForest": "imageforest.imaging.forests",
    "all_points": "imageforest.imaging.forests",
    "integral_image": "imageforest.imaging.integral",
    "Image": "imageforest.imaging.io",
    "ImageReadError": "imageforest.imaging.io",
    "read_image": "imageforest.imaging.io",
    "resample": "imageforest.imaging.io",
    "write_image": "imageforest.imaging.io",
}


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)


__all__ = sorted(_LAZY)
