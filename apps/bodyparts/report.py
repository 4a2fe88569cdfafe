"""What `imageforest bodyparts` writes: the part-label PNG, the joints JSON, probabilities, and an overlay picture.

Every file is written atomically (a temporary file beside it, then moved into place).
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np

from imageforest.apps.bodyparts.model import BodyParts, BodyPartsForest
from imageforest.forest.serialization import atomic_write
from imageforest.outputs import write_json  # noqa: F401  (the command imports it from here)

JOINTS_FORMAT = 1


def palette(n_parts: int) -> np.ndarray:
    """(n_parts + 1, 3) uint8 colours, black for background; fixed, so a part has one colour in every picture."""
    rng = np.random.default_rng(7)
    hues = (np.arange(n_parts) * 0.61803398875) % 1.0
    out = np.zeros((n_parts + 1, 3), dtype=np.uint8)
    import colorsys

    for k, h in enumerate(hues):
        r, g, b = colorsys.hsv_to_rgb(h, 0.55 + 0.4 * rng.random(), 0.75 + 0.25 * rng.random())
        out[k + 1] = (int(255 * r), int(255 * g), int(255 * b))
    return out


def joints_document(result: BodyParts, model: BodyPartsForest, source: str, model_name: str) -> dict:
    """The joints JSON: per joint its proposals (camera mm, pixel, confidence in cm^2 of voting surface)."""
    counts = np.bincount(result.labels.ravel(), minlength=len(model.part_names_) + 1)[1:]
    return {
        "format": JOINTS_FORMAT,
        "depth": source,
        "model": {"name": model_name, "parts": model.part_names_},
        "camera": result.camera.to_dict(),
        "size": [int(result.labels.shape[1]), int(result.labels.shape[0])],
        "body_pixels": int(counts.sum()),
        "part_pixels": {name: int(c) for name, c in zip(model.part_names_, counts, strict=True) if c},
        "joints": {joint: [p.to_dict() for p in props] for joint, props in result.joints.items()},
        "timing_s": {k: round(v, 4) for k, v in result.timing_s.items()},
    }


def write_parts_png(labels: np.ndarray, path: str | os.PathLike) -> None:
    """Part numbers as an 8-bit grey PNG (0 = background)."""
    from PIL import Image as PILImage

    atomic_write(path, lambda fh: PILImage.fromarray(labels.astype(np.uint8)).save(fh, format="PNG"))


def write_probabilities(p: np.ndarray, path: str | os.PathLike) -> None:
    """(height, width, K) float32 posteriors as a NumPy .npy."""
    atomic_write(path, lambda fh: np.save(fh, p.astype(np.float32), allow_pickle=False))


def overlay_image(depth: np.ndarray, result: BodyParts, n_parts: int) -> np.ndarray:
    """(height, 2 * width, 3) uint8: the depth map (near bright) beside the parts, joints marked on both."""
    d = depth.astype(np.float64)
    body = d > 0
    grey = np.zeros(d.shape)
    if body.any():
        lo, hi = np.percentile(d[body], [1, 99])
        grey[body] = 230 - 170 * np.clip((d[body] - lo) / max(hi - lo, 1.0), 0, 1)
    left = np.repeat(grey[..., None], 3, axis=2).astype(np.uint8)
    right = palette(n_parts)[result.labels]
    right[~body] = 30
    pic = np.concatenate([left, right], axis=1)
    width = depth.shape[1]
    r = max(2, depth.shape[1] // 160)
    for props in result.joints.values():
        if not props:
            continue
        u, v = props[0].pixel
        for du in (0, width):
            _disc(pic, int(v), int(u) + du, r + 1, (0, 0, 0))
            _disc(pic, int(v), int(u) + du, r, (255, 255, 255))
    return pic


def _disc(pic: np.ndarray, y: int, x: int, r: int, colour) -> None:
    y0, y1, x0, x1 = max(0, y - r), min(pic.shape[0], y + r + 1), max(0, x - r), min(pic.shape[1], x + r + 1)
    if y0 >= y1 or x0 >= x1:
        return
    yy, xx = np.ogrid[y0:y1, x0:x1]
    pic[y0:y1, x0:x1][(yy - y) ** 2 + (xx - x) ** 2 <= r * r] = colour


def write_overlay(depth: np.ndarray, result: BodyParts, n_parts: int, path: str | os.PathLike) -> None:
    """The overlay as a PNG: depth and parts side by side, cropped to the body, scaled up to at least 640 pixels
    across."""
    from PIL import Image as PILImage

    full = overlay_image(depth, result, n_parts)
    yy, xx = np.nonzero(depth > 0)
    width = depth.shape[1]
    m = max(8, width // 40)  # the body with a margin: a far body is a small part of the frame
    y0, y1 = max(0, yy.min() - m), min(depth.shape[0], yy.max() + m + 1)
    x0, x1 = max(0, xx.min() - m), min(width, xx.max() + m + 1)
    pic = PILImage.fromarray(np.ascontiguousarray(np.concatenate([full[y0:y1, x0:x1],
                                                                  full[y0:y1, width + x0:width + x1]], axis=1)))
    if pic.width < 640:
        k = -(-640 // pic.width)
        pic = pic.resize((pic.width * k, pic.height * k), PILImage.Resampling.NEAREST)
    buf = io.BytesIO()
    pic.save(buf, format="PNG")
    atomic_write(Path(path), lambda fh: fh.write(buf.getvalue()))
