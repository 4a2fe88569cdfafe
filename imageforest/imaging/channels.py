"""Feature channels of colour images for patch tests: the 32 channels of Gall and Lempitsky's Hough forests.

Per pixel: L*a*b* colour (3), absolute first and second derivatives of L* in x and y (4), and 9 gradient-orientation
channels (the gradient magnitude of each unsigned-orientation bin summed over 5x5 pixels, a dense HOG-like
descriptor): 16 channels, each then min- and max-filtered over 5x5 pixels, which makes a pixel-pair test tolerant to
a shift of two pixels. Values are float32: L* in 0..100, a*, b* in about -100..100, derivatives in L* per pixel.

Reference: J. Gall and V. Lempitsky, "Class-specific Hough forests for object detection", CVPR 2009.
"""

from __future__ import annotations

import numpy as np

from imageforest.exceptions import InvalidInputError
from imageforest.forest.threads import run_ranges
from imageforest.kernels import njit

N_BINS = 9
BASE_NAMES = ("L", "a", "b", "|dx|", "|dy|", "|dxx|", "|dyy|", *(f"orientation_{k}" for k in range(N_BINS)))
CHANNEL_NAMES = tuple(f"{kind}({name})" for kind in ("min", "max") for name in BASE_NAMES)
N_CHANNELS = len(CHANNEL_NAMES)  # 32


def as_rgb(image: np.ndarray, what: str = "image") -> np.ndarray:
    """An (h, w, 3) float32 RGB image in [0, 1] from uint8/uint16/float RGB or RGBA (alpha dropped).

    Raises InvalidInputError for grey images (the channels need colour), empty images or non-finite values.
    """
    arr = np.asarray(image)
    if arr.ndim == 2 or (arr.ndim == 3 and arr.shape[2] in (1, 2)):
        raise InvalidInputError(f"{what} is a grey image; the detector's channels need a colour (RGB) image")
    if arr.ndim != 3 or arr.shape[2] not in (3, 4):
        raise InvalidInputError(f"{what} must be an RGB image (height, width, 3), got shape {arr.shape}")
    if arr.shape[0] < 2 or arr.shape[1] < 2:
        raise InvalidInputError(f"{what} is too small ({arr.shape[1]}x{arr.shape[0]} pixels)")
    arr = arr[..., :3]
    if arr.dtype == np.uint8:
        return arr.astype(np.float32) / np.float32(255.0)
    if arr.dtype == np.uint16:
        return arr.astype(np.float32) / np.float32(65535.0)
    if arr.dtype.kind not in "iuf":
        raise InvalidInputError(f"{what} must hold numbers, got {arr.dtype}")
    out = arr.astype(np.float32)
    if not np.isfinite(out).all():
        raise InvalidInputError(f"{what} holds NaN or infinite values")
    top = float(out.max()) if out.size else 0.0
    if out.min() < 0 or top > 255:
        raise InvalidInputError(f"{what}: float colours must lie in [0, 1] (or 0..255), got {out.min()}..{top}")
    return out / np.float32(255.0) if top > 1.0 else out


def hough_channels(rgb: np.ndarray, window: int = 5) -> np.ndarray:
    """The 32 feature channels of an RGB image.

    Parameters
    ----------
    rgb : (h, w, 3) float in [0, 1] (see `as_rgb`)
    window : side in pixels of the orientation sums and of the min/max filters

    Returns
    -------
    (32, h, w) float32, channels in `CHANNEL_NAMES` order.
    """
    from scipy import ndimage
    from skimage.color import rgb2lab

    lab = rgb2lab(np.asarray(rgb, dtype=np.float32)).astype(np.float32)
    L = np.ascontiguousarray(lab[..., 0])
    dx = ndimage.sobel(L, axis=1) / np.float32(8.0)
    dy = ndimage.sobel(L, axis=0) / np.float32(8.0)
    dxx = ndimage.sobel(dx, axis=1) / np.float32(8.0)
    dyy = ndimage.sobel(dy, axis=0) / np.float32(8.0)
    base = np.empty((len(BASE_NAMES), *L.shape), dtype=np.float32)
    base[0] = L
    base[1] = lab[..., 1]
    base[2] = lab[..., 2]
    base[3], base[4], base[5], base[6] = np.abs(dx), np.abs(dy), np.abs(dxx), np.abs(dyy)
    magnitude = np.hypot(dx, dy)
    angle = np.mod(np.arctan2(dy, dx), np.pi)  # unsigned orientation: a light-dark edge and its reverse agree
    bins = np.minimum((angle * (N_BINS / np.pi)).astype(np.int64), N_BINS - 1)
    for k in range(N_BINS):
        base[7 + k] = ndimage.uniform_filter(np.where(bins == k, magnitude, 0.0).astype(np.float32), window,
                                             mode="nearest") * np.float32(window * window)
    out = np.empty((N_CHANNELS, *L.shape), dtype=np.float32)
    run_ranges(_min_max_range, len(BASE_NAMES), base, window, out)
    return out


@njit(cache=True, nogil=True)
def _min_max_range(k0, k1, base, window, out):  # pragma: no cover - numba
    """Minimum (into out[k]) and maximum (into out[n + k]) of base[k] (n, h, w) over window x window pixels, border
    pixels repeated (scipy's `minimum_filter` / `maximum_filter` with mode "nearest"), for channels k0..k1: one
    pass for both, rows then columns, since the square's extremes are the extremes of its rows' extremes."""
    n, h, w = base.shape
    before = window // 2
    after = window - 1 - before
    lo = np.empty((h, w), dtype=np.float32)
    hi = np.empty((h, w), dtype=np.float32)
    for k in range(k0, k1):
        for y in range(h):
            for x in range(w):
                v = base[k, y, x]
                a, b = v, v
                for d in range(-before, after + 1):
                    u = base[k, y, min(max(x + d, 0), w - 1)]
                    a = min(a, u)
                    b = max(b, u)
                lo[y, x] = a
                hi[y, x] = b
        for y in range(h):
            for x in range(w):
                out[k, y, x] = lo[y, x]
                out[n + k, y, x] = hi[y, x]
            for d in range(-before, after + 1):
                yy = min(max(y + d, 0), h - 1)
                for x in range(w):
                    out[k, y, x] = min(out[k, y, x], lo[yy, x])
                    out[n + k, y, x] = max(out[n + k, y, x], hi[yy, x])
