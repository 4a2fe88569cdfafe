"""Training data on disk: depth maps with part labels, in the two layouts the trainer reads.

- Rendered bodies (`imageforest.apps.bodyparts.renderer`): `<stem>_depth.png` (uint16 mm), `<stem>_parts.png`
  (uint8 part numbers) and `<stem>_joints.json` (part names, camera, joints in camera mm).
- Hand depth parts (`hand-depth-parts`, rendered by another project): `<stem>_depth.png` (uint16) and
  `<stem>_labels.png` (RGBA; forearm red, palm blue, fingers green, thumb violet, transparent background). The
  folder may be the data set's own or its `train/`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from imageforest.apps.bodyparts.depth import Camera, read_depth
from imageforest.exceptions import InvalidInputError

HAND_PARTS = ("forearm", "palm", "fingers", "thumb")
HAND_COLOURS = ((255, 0, 0), (0, 0, 255), (0, 255, 0), (124, 30, 255))  # parts 1-4, alpha 255

# Shotton et al.'s 16 joints, each proposed from the parts around it
BODY_JOINT_PARTS = {
    "head": ("head_upper_left", "head_upper_right", "head_lower_left", "head_lower_right"),
    "neck": ("neck",),
    **{f"{joint}_{side}": (f"{joint}_{side}",) for joint in ("shoulder", "elbow", "wrist", "hand", "knee", "ankle",
                                                             "foot") for side in ("left", "right")},
}


@dataclass(frozen=True)
class Sample:
    """One training map on disk: its depth file, its labels file, and its joints file (rendered layout)."""

    depth: Path
    labels: Path
    joints: Path | None


@dataclass
class DataSet:
    """The maps of a folder in one layout, with what the layout says about parts and camera."""

    layout: str  # "rendered" or "hands"
    samples: list[Sample]
    part_names: list[str]

    def load(self, sample: Sample) -> tuple[np.ndarray, np.ndarray]:
        """Depth (height, width) float32 mm and part numbers (height, width) uint8, 0 = background."""
        from imageforest.imaging.pictures import load_picture

        # the depth as `imageforest bodyparts` reads it (a model trains only on maps it could parse)
        depth = read_depth(sample.depth)
        raw, _ = load_picture(sample.labels, "part labels", depth.size, labels=True)
        if self.layout == "rendered":
            if raw.ndim != 2:
                raise InvalidInputError(f"{sample.labels}: part labels are one channel of part numbers")
            labels = raw.astype(np.uint8)
            if labels.max() > len(self.part_names):
                raise InvalidInputError(f"{sample.labels}: part {labels.max()} beyond the {len(self.part_names)} "
                                        "parts named")
        else:
            if raw.ndim != 3 or raw.shape[2] != 4:
                raise InvalidInputError(f"{sample.labels}: hand labels are an RGBA colour map")
            labels = np.zeros(raw.shape[:2], dtype=np.uint8)
            opaque = raw[..., 3] == 255
            for k, colour in enumerate(HAND_COLOURS):
                labels[opaque & np.all(raw[..., :3] == colour, axis=-1)] = k + 1
        if labels.shape != depth.shape:
            raise InvalidInputError(f"{sample.labels}: labels {labels.shape[::-1]} and depth {depth.shape[::-1]} "
                                    "differ in size")
        labels[depth == 0] = 0  # a label needs a depth to be learnt from
        return depth, labels

    def camera(self, sample: Sample, shape: tuple[int, int]) -> Camera:
        """The sample's intrinsics: from its joints file when rendered, else the Kinect-like default."""
        if sample.joints is not None:
            cam = _json(sample.joints).get("camera")
            try:
                camera = Camera(float(cam["fx"]), float(cam["fy"]), float(cam["cx"]), float(cam["cy"]))
            except (TypeError, KeyError, ValueError):
                raise InvalidInputError(f"{sample.joints}: no camera (fx, fy, cx, cy) in the joints file") from None
            return camera.checked(shape)
        return Camera.kinect(shape[1], shape[0])

    def joints(self, sample: Sample) -> dict[str, dict] | None:
        """The sample's true joints (rendered layout): name -> {camera_mm, pixel, visible}."""
        if sample.joints is None:
            return None
        joints = _json(sample.joints).get("joints")
        if not isinstance(joints, dict):
            raise InvalidInputError(f"{sample.joints}: no joints in the joints file")
        return joints

    def joint_parts(self) -> dict[str, list[int]] | None:
        """Joint name -> part numbers, for bodies with Shotton et al.'s parts; None otherwise."""
        if not set(p for parts in BODY_JOINT_PARTS.values() for p in parts) <= set(self.part_names):
            return None
        return {j: [self.part_names.index(p) + 1 for p in parts] for j, parts in BODY_JOINT_PARTS.items()}


def _json(path: Path) -> dict:
    """A JSON object from `path`; InvalidInputError for unreadable, malformed or absurdly nested files."""
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as exc:
        raise InvalidInputError(f"{path}: not readable JSON ({str(exc)[:120]})") from None
    if not isinstance(value, dict):
        raise InvalidInputError(f"{path}: expected a JSON object")
    return value


def open_dataset(folder: str | Path) -> DataSet:
    """Find the maps of a training folder and tell its layout.

    Raises
    ------
    InvalidInputError
        Not a folder, or neither layout's files in it.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise InvalidInputError(f"{folder}: not a folder of training maps")
    if not any(folder.glob("*_depth.png")) and (folder / "train").is_dir():
        folder = folder / "train"
    depths = sorted(folder.glob("*_depth.png"))
    if not depths:
        raise InvalidInputError(f"{folder}: no *_depth.png maps")
    rendered = [d for d in depths if d.with_name(d.name.replace("_depth.png", "_parts.png")).is_file()]
    hands = [d for d in depths if d.with_name(d.name.replace("_depth.png", "_labels.png")).is_file()]
    if rendered and len(rendered) >= len(hands):
        samples = []
        for d in rendered:
            j = d.with_name(d.name.replace("_depth.png", "_joints.json"))
            samples.append(Sample(d, d.with_name(d.name.replace("_depth.png", "_parts.png")),
                                  j if j.is_file() else None))
        names = None
        for s in samples:
            if s.joints is not None:
                names = _json(s.joints).get("parts")
                break
        if not isinstance(names, list) or not names:
            raise InvalidInputError(f"{folder}: rendered maps need a *_joints.json that names the parts")
        return DataSet("rendered", samples, [str(n) for n in names])
    if hands:
        return DataSet("hands", [Sample(d, d.with_name(d.name.replace("_depth.png", "_labels.png")), None)
                                 for d in hands], list(HAND_PARTS))
    raise InvalidInputError(f"{folder}: depth maps without part labels (*_parts.png or *_labels.png)")
