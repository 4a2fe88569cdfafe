"""What `imageforest detect` writes: the detections JSON and an overlay picture (boxes, and the Hough image).

Every file is written atomically (a temporary file beside it, then moved into place).
"""

from __future__ import annotations

import io
import os

import numpy as np

from imageforest.apps.detect.model import DetectionResult, HoughForestDetector
from imageforest.forest.serialization import atomic_write
from imageforest.outputs import write_json  # noqa: F401  (the command imports it from here)

DETECTIONS_FORMAT = 1
BOX_COLOUR = (255, 210, 0)


def detections_document(result: DetectionResult, model: HoughForestDetector, source: str, model_name: str,
                        size_wh: tuple[int, int], threshold: float) -> dict:
    """The detections JSON: boxes [x0, y0, x1, y1] in the input image's pixels, strongest first."""
    return {
        "format": DETECTIONS_FORMAT,
        "image": source,
        "model": {"name": model_name, "object_size": float(model.object_size), "threshold": float(threshold),
                  "viewpoints": bool(model.knows_viewpoints)},
        "size": [int(size_wh[0]), int(size_wh[1])],
        "detections": [d.to_json() for d in result.detections],
        "scales": [round(s, 4) for s in result.scales],
        "timing_s": {k: round(v, 4) for k, v in result.timing_s.items()},
    }


def heat(values: np.ndarray) -> np.ndarray:
    """(h, w) non-negative values as (h, w, 3) uint8 colours, dark blue (0) through red to yellow (the maximum)."""
    top = float(values.max()) if values.size else 0.0
    t = np.clip(values / top, 0.0, 1.0) if top > 0 else np.zeros_like(values)
    r = np.clip(2.0 * t, 0, 1)
    g = np.clip(2.0 * t - 1.0, 0, 1)
    b = np.clip(0.5 - t, 0, 0.5)
    return (np.stack([r, g, b], axis=-1) * 255).astype(np.uint8)


def overlay_image(rgb: np.ndarray, result: DetectionResult) -> np.ndarray:
    """(h, 2 w, 3) uint8: the image with its boxes and scores, beside the Hough image (maximum over scales)."""
    from PIL import Image as PILImage
    from PIL import ImageDraw

    h, w = rgb.shape[:2]
    left = PILImage.fromarray((np.clip(rgb, 0, 1) * 255).round().astype(np.uint8))
    hough = np.max(np.stack(result.hough), axis=0) if result.hough else np.zeros((h, w), np.float32)
    right = PILImage.fromarray(heat(hough))
    pic = PILImage.new("RGB", (2 * w, h))
    pic.paste(left, (0, 0))
    pic.paste(right, (w, 0))
    draw = ImageDraw.Draw(pic)
    line = max(1, round(min(h, w) / 150))
    for rank, d in enumerate(result.detections):
        x0, y0, x1, y1 = d.box_xyxy
        for dx in (0, w):
            draw.rectangle([x0 + dx, y0, x1 + dx - 1, y1 - 1], outline=BOX_COLOUR if rank == 0 else (255, 255, 255),
                           width=line)
        colour = BOX_COLOUR if rank == 0 else (255, 255, 255)
        label = f"{d.score:.2f}"
        if d.viewpoint is not None:
            radius = max(8.0, 0.12 * min(x1 - x0, y1 - y0))
            draw_compass(draw, (x1 - radius - 4, y0 + radius + 4), radius, d.viewpoint[0], colour, line)
            label += f"  az {d.viewpoint[0]:.0f}\N{DEGREE SIGN} \N{PLUS-MINUS SIGN}{d.viewpoint[1]:.0f}"
        draw.text((x0 + 3, y0 + 2), label, fill=colour)
    return np.asarray(pic)


def draw_compass(draw, centre: tuple[float, float], radius: float, azimuth_deg: float, colour, width: int) -> None:
    """A compass rose seen from above, the camera at its bottom: the arrow is the object's heading, pointing right
    at azimuth 0 (side view, facing right), up at 90 (its back to the camera), left at 180, down at 270 (facing
    the camera)."""
    cx, cy = centre
    draw.ellipse([cx - radius, cy - radius, cx + radius, cy + radius], outline=colour, width=max(1, width // 2))
    a = np.deg2rad(azimuth_deg)
    dx, dy = np.cos(a), -np.sin(a)
    tip = (cx + 0.9 * radius * dx, cy + 0.9 * radius * dy)
    tail = (cx - 0.6 * radius * dx, cy - 0.6 * radius * dy)
    draw.line([tail, tip], fill=colour, width=width + 1)
    # the arrow head: two strokes back from the tip, 30 degrees either side
    for side in (-1, 1):
        b = a + np.pi + side * np.pi / 6
        draw.line([tip, (tip[0] + 0.45 * radius * np.cos(b), tip[1] - 0.45 * radius * np.sin(b))], fill=colour,
                  width=width + 1)


def write_overlay(rgb: np.ndarray, result: DetectionResult, path: str | os.PathLike) -> None:
    from PIL import Image as PILImage

    buf = io.BytesIO()
    PILImage.fromarray(overlay_image(rgb, result)).save(buf, format="PNG")
    atomic_write(path, lambda fh: fh.write(buf.getvalue()))
