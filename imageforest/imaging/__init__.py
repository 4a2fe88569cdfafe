"""The imaging layer: images with geometry, integral images, lazily evaluated image features, image forests.

    from imageforest.imaging import read_image, ImageClassificationForest, BoxFeatures, DepthProbes
"""

from imageforest.imaging.features import BoxFeatures, DepthProbes, ImageStack
from imageforest.imaging.filters import FILTERS, FilterBank
from imageforest.imaging.forests import ImageClassificationForest, all_points
from imageforest.imaging.integral import integral_image
from imageforest.imaging.io import Image, ImageReadError, read_image, resample, write_image

__all__ = [
    "FILTERS",
    "BoxFeatures",
    "DepthProbes",
    "FilterBank",
    "Image",
    "ImageClassificationForest",
    "ImageReadError",
    "ImageStack",
    "all_points",
    "integral_image",
    "read_image",
    "resample",
    "write_image",
]
