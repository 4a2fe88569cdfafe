"""What `imageforest localize` writes: the JSON document, the stderr table and the box label map.

JSON schema (documented in the README; other tools and our benchmarks read it)::

    {"scan": "...", "model": {"name": "...", "version": "..."}, "coordinate_system": "LPS", "units": "mm",
     "organs": {"Brainstem": {"present": true, "probability": 0.97,
                              "box_mm": {"x": [lo, hi], "y": [lo, hi], "z": [lo, hi]},
                              "box_std_mm": {"x": [s, s], "y": [s, s], "z": [s, s]},
                              "box_index": {"min": [i, j, k], "max": [i, j, k]}}, ...},
     "timing_s": {"read": ..., "localize": ..., "total": ...}}

`box_mm` bounds are the outer faces of the extreme voxels (LPS mm); `box_index` are inclusive voxel indices
(x, y, z) of the input scan's voxels whose centres lie in the box. An organ judged absent has no box.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from imageforest.apps.localize.results import Localization
from imageforest.imaging.ct_organs import box_to_index
from imageforest.imaging.io import Image, write_image
from imageforest.outputs import write_json as write_json_file


def _axes(values: np.ndarray, digits: int) -> dict[str, list[float]]:
    return {axis: [round(float(values[2 * k]), digits), round(float(values[2 * k + 1]), digits)]
            for k, axis in enumerate("xyz")}


def localization_json(result: Localization, scan: Image, scan_name: str, model: dict, timing: dict,
                      organs: list[str] | None = None) -> dict:
    """The JSON document for one scan; `organs` restricts (and orders) the organs reported."""
    wanted = organs or [o.name for o in result.organs]
    by_name = {o.name: o for o in result.organs}
    out: dict = {}
    for name in wanted:
        est = by_name[name]
        entry: dict = {"present": bool(est.present), "probability": round(float(est.probability), 4)}
        if est.present:
            lo, hi = box_to_index(scan, est.box_mm)
            entry["box_mm"] = _axes(est.box_mm, 2)
            entry["box_std_mm"] = _axes(est.box_std_mm, 2)
            entry["box_index"] = {"min": [int(v) for v in lo], "max": [int(v) for v in hi]}
        out[name] = entry
    return {"scan": scan_name, "model": model, "coordinate_system": "LPS", "units": "mm", "organs": out,
            "timing_s": {k: round(float(v), 4) for k, v in timing.items()}}


def write_json(document: dict, path: str | Path) -> None:
    """Write one JSON document atomically."""
    write_json_file(document, path, indent=2)


def table(document: dict) -> str:
    """A readable summary of one JSON document."""
    lines = [f"{document['scan']}",
             f"  {'organ':<14} {'present':>7} {'prob':>5}   {'x (mm)':>17} {'y (mm)':>17} {'z (mm)':>17}  "
             f"{'wall std (mm)':>13}"]
    for name, e in document["organs"].items():
        if e["present"]:
            ranges = "".join(f" {lo:8.1f}..{hi:<8.1f}" for lo, hi in (e["box_mm"][a] for a in "xyz"))
            std = np.mean([v for a in "xyz" for v in e["box_std_mm"][a]])
            lines.append(f"  {name:<14} {'yes':>7} {e['probability']:5.2f}  {ranges}  {std:13.1f}")
        else:
            lines.append(f"  {name:<14} {'no':>7} {e['probability']:5.2f}")
    t = document["timing_s"]
    lines.append(f"  read {t.get('read', 0):.2f} s, localize {t.get('localize', 0):.2f} s, "
                 f"total {t.get('total', 0):.2f} s")
    lines.extend(f"  Warning: {w}" for w in document.get("warnings", []))
    return "\n".join(lines)


def box_label_map(result: Localization, scan: Image, organs: list[str] | None = None) -> Image:
    """A uint8 label map on the scan's grid: voxels inside organ k's box (k = 1.. in model order) get k.

    Where boxes overlap, the smaller box wins (it is the more specific statement).
    """
    names = [o.name for o in result.organs]
    wanted = set(organs or names)
    labels = np.zeros(scan.array.shape[:3], dtype=np.uint8)
    present = [(k, o) for k, o in enumerate(result.organs) if o.present and o.name in wanted]
    volume = [float(np.prod(o.box_mm[1::2] - o.box_mm[0::2])) for _, o in present]
    for (k, o), _ in sorted(zip(present, volume, strict=True), key=lambda kv: -kv[1]):
        lo, hi = box_to_index(scan, o.box_mm)
        labels[lo[2]:hi[2] + 1, lo[1]:hi[1] + 1, lo[0]:hi[0] + 1] = k + 1
    return Image(labels, scan.spacing.copy(), scan.origin.copy(), scan.direction.copy(), scan.source,
                 [f"organ boxes: {', '.join(f'{k + 1}={n}' for k, n in enumerate(names))}"])


def write_mask(result: Localization, scan: Image, path: str | Path, organs: list[str] | None = None) -> None:
    write_image(box_label_map(result, scan, organs), path, scan.file_orientation)  # in the scan file's axes
