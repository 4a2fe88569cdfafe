"""Folders of images with object boxes, and reading colour images.

A training folder holds `boxes.json` and the images, either beside it or in `rgb/` or `images/`. `boxes.json` maps
an image's file name to its boxes [x0, y0, x1, y1] in that image's pixels, in one of three forms::

    {"a.jpg": [[10, 20, 110, 90]], ...}                       # a list of boxes
    {"a.jpg": {"boxes": [[10, 20, 110, 90]]}, ...}            # a mapping with "boxes"
    {"horse001.jpg": {"bbox_xyxy_in_gray_frame": [63, 49, 305, 203],
                      "gray_size_wh": [315, 232], "rgb_size_wh": [800, 590]}, ...}

The last is the Weizmann horses' layout (Borenstein and Ullman): one box per image, given in the frame of the smaller
grey images; it is scaled to the colour image's size.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from imageforest.exceptions import InvalidInputError
from imageforest.imaging.channels import as_rgb

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff")
# Pixels an image may hold (IMAGEFOREST_MAX_PIXELS raises it): the decoded picture as float32 RGB takes 12 bytes a
# pixel before it is scaled down to the detector's working size, so this keeps a read within about 1 GB.
MAX_IMAGE_PIXELS = 80_000_000


def read_rgb(path: str | Path) -> np.ndarray:
    """An image file as (h, w, 3) float32 RGB in [0, 1]; InvalidInputError if unreadable or grey."""
    from imageforest.imaging.pictures import load_picture, max_pixels

    arr, mode = load_picture(path, "image", max_pixels(MAX_IMAGE_PIXELS))
    if mode in ("L", "I", "I;16", "I;16B", "F", "1", "LA"):
        raise InvalidInputError(f"{path} is a grey image; the detector's channels need a colour (RGB) image")
    if mode not in ("RGB", "RGBA"):  # a palette or CMYK picture: Pillow's conversion (the file is checked above)
        from PIL import Image as PILImage

        with PILImage.open(path) as im:
            arr = np.asarray(im.convert("RGB"))
    return as_rgb(arr, str(path))


@dataclass
class BoxFolder:
    """A folder of images with boxes.

    Attributes
    ----------
    root : the folder;  image_dir : where the images are
    names : image file names that boxes.json names and the folder holds, sorted
    raw : boxes.json as read (name -> its entry); `load` turns an entry into boxes in the image's pixels
    """

    root: Path
    image_dir: Path
    names: list[str]
    raw: dict

    def load(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(RGB image, (k, 4) boxes in its pixels)."""
        rgb = read_rgb(self.image_dir / name)
        boxes, frame = _boxes_of(self.raw[name], name)
        if frame is not None:
            sx = rgb.shape[1] / frame[0]
            sy = rgb.shape[0] / frame[1]
            boxes = boxes * np.array([sx, sy, sx, sy])
            boxes = np.clip(boxes, 0, [rgb.shape[1], rgb.shape[0]] * 2)
        return rgb, boxes


def _boxes_of(entry, name: str) -> tuple[np.ndarray, tuple[float, float] | None]:
    frame = None
    if isinstance(entry, dict) and "bbox_xyxy_in_gray_frame" in entry:
        raw = [entry["bbox_xyxy_in_gray_frame"]]
        frame = tuple(float(v) for v in entry.get("gray_size_wh", ()))
        if len(frame) != 2 or min(frame) <= 0:
            raise InvalidInputError(f"boxes.json: {name} gives a box in the grey frame without its size")
    elif isinstance(entry, dict):
        raw = entry.get("boxes")
    else:
        raw = entry
    try:
        boxes = np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidInputError(f"boxes.json: the boxes of {name} are not numbers") from None
    if boxes.ndim == 1 and boxes.size == 4:
        boxes = boxes[None]
    if boxes.size == 0:
        raise InvalidInputError(f"boxes.json: {name} has no boxes; every training image needs at least one object")
    if boxes.ndim != 2 or boxes.shape[1] != 4:
        raise InvalidInputError(f"boxes.json: {name} must list boxes [x0, y0, x1, y1], got shape {boxes.shape}")
    return boxes, frame


def open_box_folder(folder: str | Path) -> BoxFolder:
    """Read `boxes.json` and find the images it names; InvalidInputError if the layout is not recognised."""
    root = Path(folder)
    if not root.is_dir():
        raise InvalidInputError(f"{root}: not a folder")
    path = root / "boxes.json"
    if not path.is_file():
        raise InvalidInputError(f"{root}: no boxes.json (image name -> boxes [x0, y0, x1, y1])")
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as exc:  # a file nested a million deep overflows the parser
        raise InvalidInputError(f"{path}: not readable JSON ({str(exc)[:120]})") from None
    if not isinstance(raw, dict) or not raw:
        raise InvalidInputError(f"{path}: expected a mapping from image names to boxes")
    for sub in ("rgb", "images", "."):
        image_dir = root / sub
        names = sorted(n for n in raw if (image_dir / n).is_file())
        if names:
            break
    else:
        raise InvalidInputError(f"{root}: none of the images boxes.json names is in the folder, rgb/ or images/")
    return BoxFolder(root, image_dir.resolve(), names, raw)


def list_images(folder: str | Path) -> list[Path]:
    """Every image file directly in a folder, sorted."""
    root = Path(folder)
    if not root.is_dir():
        raise InvalidInputError(f"{root}: not a folder")
    return sorted(p for p in root.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
