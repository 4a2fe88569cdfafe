"""The detection entry points shared by the CLI, the benchmarks and pipelines.

    from imageforest.apps.detect.api import load_detector, detect_file
    detector = load_detector()                     # the shipped horse detector (load_detector("cars"): the cars)
    document, result, rgb = detect_file("horse.jpg", detector)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from imageforest.apps.detect import app
from imageforest.apps.detect.datasets import read_rgb
from imageforest.apps.detect.model import DetectionResult, HoughForestDetector
from imageforest.apps.detect.report import detections_document
from imageforest.forest.serialization import model_file

SHIPPED = app.models  # name -> file, as the application declares them
DEFAULT_MODEL = SHIPPED["horses"]


def load_detector(path: str | Path | None = None) -> HoughForestDetector:
    """Load a Hough-forest detector: a model file, or a shipped model by name ('horses', the default, or 'cars';
    a file of that name in the working folder wins)."""
    if path is not None and str(path) in SHIPPED and not Path(path).exists():
        return HoughForestDetector.load(model_file(SHIPPED[str(path)], SHIPPED[str(path)]))
    return HoughForestDetector.load(model_file(path, DEFAULT_MODEL))


def model_name(model: HoughForestDetector) -> str:
    return str(getattr(model, "model_card_", {}).get("name", "custom"))


def detect_file(path: str | Path, model: HoughForestDetector, threshold: float | None = None,
                keep_hough: bool = False) -> tuple[dict, DetectionResult, np.ndarray]:
    """Read a colour image, detect objects, and build the detections document (boxes in the file's pixels)."""
    rgb = read_rgb(path)
    thr = model.threshold_ if threshold is None else float(threshold)
    result = model.detect(rgb, threshold=thr, keep_hough=keep_hough)
    document = detections_document(result, model, str(path), model_name(model), (rgb.shape[1], rgb.shape[0]), thr)
    return document, result, rgb
