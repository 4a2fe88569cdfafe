"""The detection entry points shared by the CLI, the benchmarks and pipelines.

    from imageforest.apps.detect.api import load_detector, detect_file
    detector = load_detector()                     # the default horse detector shipped in the package
    document, result, rgb = detect_file("horse.jpg", detector)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from imageforest.apps.detect.datasets import read_rgb
from imageforest.apps.detect.model import DetectionResult, HoughForestDetector
from imageforest.apps.detect.report import detections_document
from imageforest.forest.serialization import model_file

DEFAULT_MODEL = Path(__file__).parent / "models" / "horses.npz"


def load_detector(path: str | Path | None = None) -> HoughForestDetector:
    """Load a Hough-forest detector file (default: the shipped horse detector)."""
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
