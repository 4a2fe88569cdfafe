"""Folders of images with object boxes, and reading colour images.

A training folder holds `boxes.json` and the images, either beside it or in `rgb/` or `images/`. `boxes.json` maps
an image's file name to its boxes [x0, y0, x1, y1] in that image's pixels, in one of three forms::

    {"a.jpg": [[10, 20, 110, 90]], ...}                       # a list of boxes
    {"a.jpg": {"boxes": [[10, 20, 110, 90]]}, ...}            # a mapping with "boxes"
    {"a.jpg": [{"box_xyxy": [10, 20, 110, 90], "azimuth_deg": 93.0}], ...}   # objects, with viewpoints
    {"horse001.jpg": {"bbox_xyxy_in_gray_frame": [63, 49, 305, 203],
                      "gray_size_wh": [315, 232], "rgb_size_wh": [800, 590]}, ...}

The last is the Weizmann horses' layout (Borenstein and Ullman): one box per image, given in the frame of the smaller
grey images; it is scaled to the colour image's size.

A folder of cropped views with their viewpoints (`open_crop_folder`; the layout of the Weizmann Cars ViewPoint set
of Glasner et al., 2012) holds `crops/` and one or more `poses_K_bins.txt`, and optionally `negatives/` (photographs
without the object)::

    947 2 8                                           # number of crops, 2, K
    car_003_00000000.png 0 0 100 77 50 39 93 90 3     # name x y w h cx cy azimuth_deg zenith_deg bin
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

    def viewpoints(self, name: str) -> np.ndarray | None:
        """(k,) azimuths in degrees of an image's objects, or None when its entry gives none."""
        entry = self.raw[name]
        if not (isinstance(entry, list) and entry and all(isinstance(e, dict) for e in entry)):
            return None
        if not all("azimuth_deg" in e for e in entry):
            return None
        try:
            azimuth = np.asarray([e["azimuth_deg"] for e in entry], dtype=np.float64)
        except (TypeError, ValueError):
            raise InvalidInputError(f"boxes.json: the azimuths of {name} are not numbers") from None
        if not np.isfinite(azimuth).all():
            raise InvalidInputError(f"boxes.json: an azimuth of {name} is not a finite number")
        return np.mod(azimuth, 360.0)

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
    elif isinstance(entry, list) and entry and all(isinstance(e, dict) for e in entry):
        if not all("box_xyxy" in e for e in entry):
            raise InvalidInputError(f"boxes.json: every object of {name} needs its box_xyxy")
        raw = [e["box_xyxy"] for e in entry]
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


@dataclass
class CropFolder:
    """Cropped views of objects with their viewpoints.

    Attributes
    ----------
    root : the folder;  crop_dir : where the crops are
    names : crop file names, in the order of the poses file
    boxes : (n, 4) float64 [x0, y0, x1, y1] of the object in each crop's pixels
    azimuth : (n,) float64 viewpoint azimuth in degrees [0, 360)
    negatives_dir : `negatives/` when the folder holds it, else None
    """

    root: Path
    crop_dir: Path
    names: list[str]
    boxes: np.ndarray
    azimuth: np.ndarray
    negatives_dir: Path | None

    def load(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(RGB crop, (1, 4) box in its pixels), the box checked against the crop's size."""
        rgb = read_rgb(self.crop_dir / self.names[k])
        box = self.boxes[k][None]
        h, w = rgb.shape[:2]
        if box[0, 2] > w + 0.5 or box[0, 3] > h + 0.5:
            raise InvalidInputError(f"{self.names[k]}: its box {box[0].tolist()} reaches outside the {w}x{h} crop")
        return rgb, np.minimum(box, [w, h, w, h])


def is_crop_folder(folder: str | Path) -> bool:
    """Whether a folder has the layout of cropped views with viewpoints (`crops/` and a poses file)."""
    root = Path(folder)
    return (root / "crops").is_dir() and any(root.glob("poses_*_bins.txt"))


def _read_poses(path: Path) -> tuple[list[str], np.ndarray]:
    """Names and the (n, 9) numbers of a poses file (see the module's docstring)."""
    try:
        lines = [ln.split() for ln in path.read_text().splitlines() if ln.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"{path}: not readable ({str(exc)[:120]})") from None
    if not lines or len(lines[0]) != 3 or not all(v.isdigit() for v in lines[0]):
        raise InvalidInputError(f"{path}: the first line must be 'N 2 K' (number of crops, 2, viewpoint bins)")
    n = int(lines[0][0])
    rows = lines[1:]
    if len(rows) != n or n == 0:
        raise InvalidInputError(f"{path}: the first line announces {n} crops but {len(rows)} lines follow")
    names, numbers = [], []
    for k, row in enumerate(rows, start=2):
        if len(row) != 10:
            raise InvalidInputError(f"{path}, line {k}: expected 'name x y w h cx cy azimuth zenith bin', "
                                    f"got {len(row)} fields")
        try:
            numbers.append([float(v) for v in row[1:]])
        except ValueError:
            raise InvalidInputError(f"{path}, line {k}: the fields after the name must be numbers") from None
        names.append(row[0])
    values = np.asarray(numbers)
    if not np.isfinite(values).all():
        raise InvalidInputError(f"{path}: a pose holds NaN or infinite numbers")
    return names, values


def open_crop_folder(folder: str | Path) -> CropFolder:
    """Read a folder of cropped views (`crops/`, `poses_K_bins.txt`, optional `negatives/`); InvalidInputError
    when the layout or a pose is wrong. The azimuth is the same in every poses file; the one with the fewest bins
    is read."""
    root = Path(folder)
    if not is_crop_folder(root):
        raise InvalidInputError(f"{root}: no crops/ folder with a poses_K_bins.txt beside it")
    poses = sorted(root.glob("poses_*_bins.txt"), key=lambda p: (len(p.name), p.name))[0]
    names, v = _read_poses(poses)
    x, y, w, h, azimuth = v[:, 0], v[:, 1], v[:, 2], v[:, 3], v[:, 6]
    bad = (x < 0) | (y < 0) | (w <= 0) | (h <= 0)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise InvalidInputError(f"{poses}: the box of {names[k]} is empty or starts outside its crop")
    if np.any((azimuth < -360) | (azimuth > 720)):
        raise InvalidInputError(f"{poses}: azimuths must be in degrees (0 to 360)")
    crop_dir = root / "crops"
    missing = [n for n in names if not (crop_dir / n).is_file()]
    if missing:
        raise InvalidInputError(f"{crop_dir}: {len(missing)} crop(s) the poses file names are missing, e.g. "
                                f"{missing[0]}")
    negatives = root / "negatives"
    return CropFolder(root, crop_dir.resolve(), names, np.c_[x, y, x + w, y + h], np.mod(azimuth, 360.0),
                      negatives.resolve() if negatives.is_dir() else None)


def list_images(folder: str | Path) -> list[Path]:
    """Every image file directly in a folder, sorted."""
    root = Path(folder)
    if not root.is_dir():
        raise InvalidInputError(f"{root}: not a folder")
    return sorted(p for p in root.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
