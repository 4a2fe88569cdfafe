"""Body parts and joints from depth maps: ``imageforest bodyparts DEPTH... -o OUT``.

Every pixel of a depth map is classified into a body part by a forest of depth-difference probes, and joints are
proposed by mean shift over the part probabilities in 3-D (Shotton et al., "Real-time human pose recognition in
parts from single depth images", CVPR 2011). The Python API (imported on first use)::

    from imageforest.apps.bodyparts import load_body_model, read_depth, Camera
    model = load_body_model()                  # the shipped body model (or a path)
    result = model.parse(read_depth("frame.png"), Camera.kinect(640, 480))
    result.labels, result.joints["head"][0].position_mm
"""

from __future__ import annotations

from pathlib import Path

from imageforest.applications import App, lazy_command
from imageforest.lazy import lazy_attributes

_LAZY = {
    "BodyParts": "imageforest.apps.bodyparts.model",
    "BodyPartsForest": "imageforest.apps.bodyparts.model",
    "Camera": "imageforest.apps.bodyparts.depth",
    "JointProposal": "imageforest.apps.bodyparts.joints",
    "load_body_model": "imageforest.apps.bodyparts.api",
    "open_dataset": "imageforest.apps.bodyparts.datasets",
    "parse_depth_file": "imageforest.apps.bodyparts.api",
    "propose_joints": "imageforest.apps.bodyparts.joints",
    "read_depth": "imageforest.apps.bodyparts.depth",
    "stack_depths": "imageforest.apps.bodyparts.model",
    "train_bodyparts": "imageforest.apps.bodyparts.training",
}

# What this application declares to the suite (its entry point in pyproject.toml names this object).
app = App(
    name="bodyparts",
    description="body parts and joints from depth maps",
    commands=(
        lazy_command("bodyparts", "imageforest.apps.bodyparts.cli:bodyparts",
                     "Label every body pixel of DEPTH maps with its part, and propose joints."),
        lazy_command("train-bodyparts", "imageforest.apps.bodyparts.cli:train_bodyparts_command",
                     "Train a body-parts model on DATA: rendered bodies or hands."),
    ),
    readers={"BodyPartsForest": "imageforest.apps.bodyparts.model:BodyPartsForest.from_record"},
    warmup="imageforest.apps.bodyparts.scripts.warmup:warm_up",
    models={"bodies": Path(__file__).parent / "models" / "bodies.npz"},
)

__all__ = sorted([*_LAZY, "app"])


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)
