"""The body-parts entry points shared by the CLI, the benchmarks and pipelines.

    from imageforest.apps.bodyparts.api import load_body_model, parse_depth_file
    model = load_body_model()                      # the default body model shipped in the package
    result = model.parse(depth_mm)                 # any (height, width) depth map in mm, 0 = background
    document, result, depth = parse_depth_file("frame.png", model)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from imageforest.apps.bodyparts.depth import Camera, read_depth
from imageforest.apps.bodyparts.model import BodyParts, BodyPartsForest
from imageforest.apps.bodyparts.report import joints_document
from imageforest.forest.serialization import model_file

DEFAULT_MODEL = Path(__file__).parent / "models" / "bodies.npz"


def load_body_model(path: str | Path | None = None) -> BodyPartsForest:
    """Load a body-parts model file (default: the shipped body model)."""
    return BodyPartsForest.load(model_file(path, DEFAULT_MODEL))


def model_name(model: BodyPartsForest) -> str:
    return str(getattr(model, "model_card_", {}).get("name", "custom"))


def parse_depth_file(path: str | Path, model: BodyPartsForest, camera: dict | None = None,
                     probabilities: bool = False) -> tuple[dict, BodyParts, np.ndarray]:
    """Read a depth file, label its parts, propose joints, and build the joints document.

    `camera` holds any of fx, fy, cx, cy (px); the rest are the Kinect-like defaults for the map's size.
    """
    depth = read_depth(path)
    cam = Camera.for_map(depth.shape, **(camera or {}))
    result = model.parse(depth, cam, probabilities=probabilities)
    return joints_document(result, model, str(path), model_name(model)), result, depth
