"""Object detection with Hough forests: ``imageforest detect IMAGE... -o OUT``.

Patches of an image vote for object centres through a forest whose nodes reduce either the class uncertainty or
the offset uncertainty of the patches (Gall and Lempitsky, "Class-specific Hough forests for object detection",
CVPR 2009). The Python API (imported on first use)::

    from imageforest.apps.detect import HoughForestDetector, load_detector, read_rgb
    detector = load_detector()                 # the shipped horse model (or a path)
    result = detector.detect(read_rgb("horse.jpg"))
    result.detections[0].box_xyxy, result.detections[0].score
"""

from __future__ import annotations

from imageforest.lazy import lazy_attributes

_LAZY = {
    "Detection": "imageforest.apps.detect.model",
    "DetectionResult": "imageforest.apps.detect.model",
    "HoughForestDetector": "imageforest.apps.detect.model",
    "open_box_folder": "imageforest.apps.detect.datasets",
    "read_rgb": "imageforest.apps.detect.datasets",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)
