"""Depth maps in and camera geometry: reading a depth file, and pixels to 3-D camera coordinates.

A depth map is (height, width) float32 in millimetres along the optical axis, 0 where the sensor saw nothing
(background or a missing pixel). The camera is a pinhole with the principal point at (cx, cy) in a pixel
convention where pixel column i spans [i, i + 1): its centre is at i + 0.5.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from imageforest.exceptions import InvalidInputError
from imageforest.imaging.io import ImageReadError

# A Kinect-like depth camera: 57 degrees of horizontal field of view, so fx = fy = 570 px at 640 x 480.
KINECT_FOCAL_640 = 570.0
DEPTH_SUFFIXES = (".png", ".tif", ".tiff", ".npy")
# Pixels a depth map may hold (2048 x 2048; IMAGEFOREST_MAX_PIXELS raises it): parsing holds about 200 bytes a pixel
# (31 part posteriors of float32 among them), so this keeps a frame within about 1 GB.
MAX_DEPTH_PIXELS = 1 << 22
# Readings beyond this are no body a depth camera sees (sensors report "no reading" as 65,535 or far values):
# they count as background
MAX_DEPTH_MM = 10_000.0


def _read_npy(path: Path, limit: int) -> np.ndarray:
    """A `.npy` depth map, its header (shape, dtype) checked against the file's size and `limit` before any data
    is read."""
    from imageforest.forest.serialization import npy_header

    try:
        with open(path, "rb") as fh:
            dtype, shape = npy_header(fh, path.name)
            offset = fh.tell()
    except (ValueError, OSError, SyntaxError) as exc:
        raise ImageReadError(f"{path}: not a readable depth map: not a NumPy array file ({exc})") from None
    if dtype.hasobject or dtype.kind not in "uif":
        raise ImageReadError(f"{path}: not a readable depth map: it holds {dtype} values, not numbers in mm")
    count = int(np.prod(shape, dtype=np.float64)) if shape else 1
    if count > limit:
        raise ImageReadError(f"{path}: {' x '.join(map(str, shape))} values, over the {limit / 1e6:.1f} million "
                             "pixels this command reads (set IMAGEFOREST_MAX_PIXELS to raise it)")
    if path.stat().st_size < offset + count * dtype.itemsize:
        raise ImageReadError(f"{path}: truncated (its header promises {' x '.join(map(str, shape))} {dtype})")
    return np.load(path, allow_pickle=False)


@dataclass(frozen=True)
class Camera:
    """Pinhole intrinsics in pixels of the depth map they describe."""

    fx: float
    fy: float
    cx: float
    cy: float

    @classmethod
    def kinect(cls, width: int, height: int) -> Camera:
        """The Kinect-like default for a map of this size (the focal length scales with the width)."""
        f = KINECT_FOCAL_640 * width / 640.0
        return cls(f, f, width / 2.0, height / 2.0)

    @classmethod
    def for_map(cls, shape: tuple[int, int], fx: float | None = None, fy: float | None = None,
                cx: float | None = None, cy: float | None = None) -> Camera:
        """The Kinect default for a (height, width) map with any of its values replaced."""
        base = cls.kinect(shape[1], shape[0])
        cam = cls(fx if fx is not None else base.fx, fy if fy is not None else (fx if fx is not None else base.fy),
                  cx if cx is not None else base.cx, cy if cy is not None else base.cy)
        return cam.checked(shape)

    def checked(self, shape: tuple[int, int]) -> Camera:
        """This camera, checked against a (height, width) map: finite intrinsics, the principal point in the middle
        half of the map and a horizontal field of view of 10 to 150 degrees. A camera for a map of another size
        (the Kinect default for 640 x 480 on a 320 x 240 map) puts the joints metres off; it is refused."""
        height, width = shape
        values = (self.fx, self.fy, self.cx, self.cy)
        if not all(isinstance(v, (int, float, np.floating, np.integer)) and np.isfinite(v) for v in values):
            raise InvalidInputError(f"camera intrinsics must be finite numbers, got {self}")
        for name, f, side in (("fx", self.fx, width), ("fy", self.fy, height)):
            if not 0.13 * side <= f <= 11.4 * side:  # field of view 150 to 10 degrees
                raise InvalidInputError(f"camera {name} = {f:g} px gives a {side}-pixel side a field of view outside "
                                        "10-150 degrees: a focal length for another map size or unit?")
        for name, c, side in (("cx", self.cx, width), ("cy", self.cy, height)):
            if not 0.25 * side <= c <= 0.75 * side:
                raise InvalidInputError(f"camera {name} = {c:g} px lies outside the middle half of the map's {side} "
                                        "pixels: intrinsics for a map of another size?")
        return self

    def to_dict(self) -> dict[str, float]:
        return {"fx": self.fx, "fy": self.fy, "cx": self.cx, "cy": self.cy}

    def back_project(self, y: np.ndarray, x: np.ndarray, depth_mm: np.ndarray) -> np.ndarray:
        """Pixels (row y, column x; their centres) at depth z mm -> (n, 3) camera mm (x right, y down, z ahead)."""
        z = np.asarray(depth_mm, dtype=np.float64)
        return np.stack([(np.asarray(x) + 0.5 - self.cx) * z / self.fx,
                         (np.asarray(y) + 0.5 - self.cy) * z / self.fy, z], axis=1)

    def project(self, points_mm: np.ndarray) -> np.ndarray:
        """(n, 3) camera mm -> (n, 2) pixel coordinates (x, y), continuous (pixel i spans [i, i + 1))."""
        p = np.asarray(points_mm, dtype=np.float64).reshape(-1, 3)
        z = np.where(p[:, 2] > 0, p[:, 2], np.nan)
        return np.stack([self.fx * p[:, 0] / z + self.cx, self.fy * p[:, 1] / z + self.cy], axis=1)


def check_depth(depth, what: str = "depth map") -> np.ndarray:
    """A depth map as (height, width) float32 mm (the array itself when it is float32 already, unless readings
    beyond `MAX_DEPTH_MM` are set to background); refuses colour images, non-finite or negative values, and maps
    where every pixel is background.

    Raises
    ------
    InvalidInputError
    """
    arr = np.asarray(depth)
    if arr.ndim == 3 and arr.shape[2] in (3, 4):
        raise InvalidInputError(f"{what}: a colour image ({arr.shape[2]} channels), not a depth map; give the "
                                "16-bit depth in mm")
    if arr.ndim != 2:
        raise InvalidInputError(f"{what}: a depth map is a 2-D array (height, width), got shape {arr.shape}")
    if arr.dtype.kind not in "uif" or arr.dtype == np.bool_:
        raise InvalidInputError(f"{what}: depth must be numbers (mm), got {arr.dtype}")
    if min(arr.shape) < 8:
        raise InvalidInputError(f"{what}: {arr.shape[1]} x {arr.shape[0]} pixels is too small for a depth map")
    out = arr.astype(np.float32, copy=False)  # a float32 map is checked as it is, not copied
    if not np.all(np.isfinite(out)):
        raise InvalidInputError(f"{what}: depth holds NaN or infinite values; use 0 for missing pixels")
    if np.any(out < 0):
        raise InvalidInputError(f"{what}: depth holds negative values; use 0 for missing pixels")
    if not np.any(out > 0):
        raise InvalidInputError(f"{what}: every pixel is 0 (background): nothing to label")
    far = out > MAX_DEPTH_MM
    if np.any(far):
        out = np.where(far, np.float32(0), out)
        if not np.any(out > 0):
            raise InvalidInputError(f"{what}: every reading is beyond {MAX_DEPTH_MM / 1000:g} m (no body a depth "
                                    "camera sees; 65,535 is many sensors' 'no reading'): nothing to label")
    return out


def read_depth(path: str | os.PathLike) -> np.ndarray:
    """Read a depth map in mm from a 16-bit PNG or TIFF (or a float TIFF), or a NumPy `.npy`.

    Returns
    -------
    (height, width) float32 mm, 0 = background

    Raises
    ------
    ImageReadError
        Missing, unreadable, or not a depth map (a colour or 8-bit picture, all zeros, NaN, negative values).
    """
    from imageforest.imaging.pictures import load_picture, max_pixels, regular_file

    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in DEPTH_SUFFIXES:
        raise ImageReadError(f"{path}: depth is read from {', '.join(DEPTH_SUFFIXES)} files, not '{suffix}'")
    limit = max_pixels(MAX_DEPTH_PIXELS)
    if suffix == ".npy":
        arr = _read_npy(regular_file(path, "depth map"), limit)
    else:
        arr, mode = load_picture(path, "depth map", limit)
        if mode in ("RGB", "RGBA", "P", "PA", "LA", "CMYK", "YCbCr", "HSV", "LAB"):
            raise ImageReadError(f"{path}: a colour image ({mode}), not a depth map; give the 16-bit depth in mm")
        if mode in ("L", "1"):
            raise ImageReadError(f"{path}: an 8-bit picture, not a depth map; depth is 16-bit (mm)")
    try:
        return check_depth(arr, str(path))
    except InvalidInputError as exc:
        raise ImageReadError(str(exc)) from None
