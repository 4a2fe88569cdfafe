"""Organ boxes given to the contourer instead of the localizer's: a `localize` JSON document, as written or edited.

    boxes, evidence = read_boxes("scan.json", ["Brainstem", ...], scan="scan.nii.gz")

A user reviews the boxes `imageforest localize` wrote (or writes them by hand) and contours inside them with
`imageforest contour SCAN --boxes scan.json`. The document is the one `localize` writes: ``organs`` maps each organ's
name to ``present`` and, when present, ``box_mm`` ({"x": [lo, hi], "y": [...], "z": [...]}, LPS mm). Where an organ
also carries the localizer's ``probability`` and ``box_std_mm``, they are its evidence for the contourer's absence
check; a box without them is taken as given.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from imageforest.batches import SCAN_SUFFIXES
from imageforest.exceptions import InvalidInputError
from imageforest.imaging.io import Image
from imageforest.outputs import output_stems

# `localize` writes its walls, which lie on voxel faces, rounded to 0.01 mm; a wall this close to a face is taken
# at the face, so that contouring in a document's boxes gives the labels contouring after the localizer gives
SNAP_MM = 0.01


def read_boxes(path: str | Path, organs: list[str] | tuple[str, ...], scan: str | Path | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
    """The boxes (n_organs, 6) mm (x_lo, x_hi, y_lo, y_hi, z_lo, z_hi in LPS; NaN rows for organs marked absent)
    and the evidence (n_organs, 2) (presence probability, mean wall spread in mm; NaN where the document gives
    none) for `organs`, in their order, from the boxes document at `path`.

    Raises InvalidInputError when the file cannot be read or is not such a document, when it lacks one of the
    organs or gives a box whose walls are not finite and increasing, and, with `scan`, when the document names
    another scan than `scan` (compared by name, as `localize` names its outputs)."""
    path = Path(path)
    try:
        document = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"--boxes: cannot read {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise InvalidInputError(f"--boxes: {path} is not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(document, dict) or "organs" not in document:
        raise InvalidInputError(f"--boxes: {path} is not a boxes document: give the JSON `imageforest localize` "
                                f"writes (an \"organs\" entry naming each organ's box_mm)")
    if document.get("coordinate_system", "LPS") != "LPS" or document.get("units", "mm") != "mm":
        raise InvalidInputError(f"--boxes: {path} gives its boxes in {document.get('coordinate_system')} "
                                f"{document.get('units')}; the contourer reads LPS millimetres")
    if scan is not None and isinstance(document.get("scan"), str):
        if output_stems([Path(scan)], SCAN_SUFFIXES) != output_stems([Path(document["scan"])], SCAN_SUFFIXES):
            raise InvalidInputError(f"--boxes: {path} holds the boxes of {Path(document['scan']).name}, not of "
                                    f"{Path(scan).name}")
    return boxes_from_document(document, organs, path)


def boxes_from_document(document: dict, organs: list[str] | tuple[str, ...], source: str | Path = "the document"
                        ) -> tuple[np.ndarray, np.ndarray]:
    """`read_boxes` of a document already read (its "organs" entries); `source` names it in the messages."""
    entries = _by_name(document["organs"], source)
    boxes = np.full((len(organs), 6), np.nan)
    evidence = np.full((len(organs), 2), np.nan)
    for k, name in enumerate(organs):
        if name not in entries:
            raise InvalidInputError(f"--boxes: {source} gives no entry for {name} (the model contours "
                                    f"{', '.join(organs)}); mark an organ that is not there \"present\": false")
        entry = entries[name]
        if not entry.get("present", True):
            continue
        boxes[k] = _box(entry.get("box_mm"), name, source)
        probability, spread = entry.get("probability"), entry.get("box_std_mm")
        if _number(probability) and 0.0 <= probability <= 1.0 and isinstance(spread, dict):
            walls = [v for axis in "xyz" for v in (spread.get(axis) or []) if _number(v)]
            if walls:
                evidence[k] = (float(probability), float(np.mean(walls)))
    return boxes, evidence


def _by_name(organs, path: str | Path) -> dict[str, dict]:
    """{name: entry} from `localize`'s mapping or from a list of entries with a "name" (the contour JSON's)."""
    if isinstance(organs, dict) and all(isinstance(v, dict) for v in organs.values()):
        return organs
    if isinstance(organs, list) and all(isinstance(v, dict) and isinstance(v.get("name"), str) for v in organs):
        return {v["name"]: v for v in organs}
    raise InvalidInputError(f"--boxes: {path}: \"organs\" must map each organ's name to its entry")


def _box(box, name: str, path: str | Path) -> np.ndarray:
    """(6,) walls from {"x": [lo, hi], "y": [lo, hi], "z": [lo, hi]}."""
    try:
        walls = [box[axis][i] for axis in "xyz" for i in (0, 1)]
    except (TypeError, KeyError, IndexError):
        raise InvalidInputError(f"--boxes: {path}: {name} is present but its box_mm is not "
                                f"{{\"x\": [lo, hi], \"y\": [lo, hi], \"z\": [lo, hi]}}") from None
    if not all(_number(v) for v in walls) or any(walls[i] >= walls[i + 1] for i in (0, 2, 4)):
        raise InvalidInputError(f"--boxes: {path}: {name}'s box_mm needs finite walls with lo < hi on each axis, "
                                f"got {box}")
    return np.asarray(walls, dtype=np.float64)


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def snap_to_faces(boxes: np.ndarray, scan: Image) -> np.ndarray:
    """`boxes` (n, 6) mm with each wall within SNAP_MM of a face between `scan`'s voxels moved onto that face (a
    scan whose axes are not along x, y and z keeps its boxes as given)."""
    direction = np.abs(np.asarray(scan.direction, dtype=np.float64))
    if not np.allclose(np.sort(direction, axis=1)[:, :-1], 0.0) or not np.allclose(direction.max(axis=1), 1.0):
        return boxes
    out = boxes.copy()
    for k, box in enumerate(boxes):
        if not np.isfinite(box).all():
            continue
        corners = scan.physical_to_index(np.array([box[0::2], box[1::2]]))  # continuous (x, y, z) indices
        faces = np.round(corners - 0.5) + 0.5
        near = np.abs(corners - faces) * np.asarray(scan.spacing) <= SNAP_MM
        phys = scan.index_to_physical(np.where(near, faces, corners))
        lo, hi = phys.min(axis=0), phys.max(axis=0)
        out[k] = (lo[0], hi[0], lo[1], hi[1], lo[2], hi[2])
    return out
