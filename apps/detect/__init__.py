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

from pathlib import Path

from imageforest.applications import App, lazy_command
from imageforest.lazy import lazy_attributes

_LAZY = {
    "Detection": "imageforest.apps.detect.model",
    "DetectionResult": "imageforest.apps.detect.model",
    "HoughForestDetector": "imageforest.apps.detect.model",
    "open_box_folder": "imageforest.apps.detect.datasets",
    "read_rgb": "imageforest.apps.detect.datasets",
}

# What this application declares to the suite (its entry point in pyproject.toml names this object).
app = App(
    name="detect",
    description="object detection with Hough forests",
    commands=(
        lazy_command("detect", "imageforest.apps.detect.cli:detect",
                     "Detect objects in colour IMAGES: boxes [x0, y0, x1, y1] in each image's pixels."),
        lazy_command("train-detector", "imageforest.apps.detect.cli:train_detector_command",
                     "Train a detector on DATA: images with boxes.json."),
    ),
    readers={"HoughForestDetector": "imageforest.apps.detect.model:HoughForestDetector.from_record"},
    warmup="imageforest.apps.detect.scripts.warmup:warm_up",
    models={"horses": Path(__file__).parent / "models" / "horses.npz",
            "cars": Path(__file__).parent / "models" / "cars.npz"},
)

__all__ = sorted([*_LAZY, "app"])


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)
