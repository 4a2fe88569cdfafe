"""Reading images and scribbles, writing masks and maps: what the command line and the plugin exchange with disk.

Pictures (PNG, JPEG, BMP, TIFF; grey or RGB) and volumes (anything `imageforest.imaging.read_image` reads) come in;
scribbles are label images of the same grid: a palette or greyscale PNG/TIFF for pictures (palette indices are the
labels), any integer volume for volumes; 0 = not labelled. Every write goes to a temporary file in the destination
folder first and is renamed over the target, so a failed write leaves no partial file.
"""

from __future__ import annotations

import io
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import numpy as np

from imageforest.exceptions import InvalidInputError
from imageforest.forest.serialization import atomic_write as write_atomically
from imageforest.imaging.io import Image, read_image, write_image

# ZARR_SUFFIX: an OME-Zarr image folder (`*.ome.zarr`), a picture or a volume
from imageforest.imaging.ome_zarr import ZARR_SUFFIX, is_zarr_path

PICTURE_SUFFIXES = (".png", ".bmp", ".gif", ".tif", ".tiff", ".jpg", ".jpeg")
LABEL_PICTURE_SUFFIXES = (".png", ".tif", ".tiff", ".bmp")
VOLUME_SUFFIXES = (".nii", ".nii.gz", ".nrrd", ".mha", ".mhd")


def _suffix(path: Path) -> str:
    name = path.name.lower()
    for ext in (".nii.gz", *VOLUME_SUFFIXES, *PICTURE_SUFFIXES, ".npy"):
        if name.endswith(ext):
            return ext
    return path.suffix.lower()


# Pixels (or voxels) an image to segment may hold (4096 x 4096, or 256^3; IMAGEFOREST_MAX_PIXELS raises it): a
# segmentation holds about 140 bytes a pixel (features, posteriors, geodesic distances, the cut's graph), so this
# keeps it within about 2.5 GB.
MAX_SEGMENT_PIXELS = 1 << 24
# Pixels a picture may hold when a saved model segments it: in tiles, about 16 bytes a pixel beside the picture
# (labels, two classes' posteriors, uncertainty), so 2^27 (e.g. 11,000 x 11,000) stays within about 3 GB; when
# only the labels are written, about 1 byte a pixel beside the picture's 3 (and its decoding), so 2^28 (16,000 x
# 16,000) does.
MAX_APPLY_PIXELS = 1 << 27
MAX_LABEL_PIXELS = 1 << 28
# An OME-Zarr picture read tile by tile (labels only): a byte a pixel for its labels, so 2^30 (32,768 x 32,768)
# stays within about 2 GB beside the tiles'.
MAX_LAZY_PIXELS = 1 << 30
# The same with the labels written tile by tile into an OME-Zarr mask (`staged_labels`): memory no longer grows
# with the picture; 2^34 (131,072 x 131,072, hours of tiles) bounds only the run.
MAX_STREAMED_PIXELS = 1 << 34


def read_segmentation_image(path: str | os.PathLike, tiled: bool = False, labels_only: bool = False,
                            streamed: bool = False) -> Image:
    """A picture or a volume to segment (raises `ImageReadError`, an `InvalidInputError`-like ValueError). With
    `tiled` (a saved model applied tile by tile) pictures may be larger: up to `MAX_APPLY_PIXELS`, or
    `MAX_LABEL_PIXELS` when only the labels are kept (`labels_only`); an OME-Zarr picture is then not read at all
    but sliced tile by tile (its array a dask array; up to `MAX_LAZY_PIXELS`, or `MAX_STREAMED_PIXELS` when its
    labels go to disk tile by tile, `streamed`)."""
    from imageforest.imaging.pictures import max_pixels

    limit = max_pixels(MAX_SEGMENT_PIXELS)
    if tiled and labels_only and is_zarr_path(path):  # read chunk by chunk as the tiles need them
        from imageforest.imaging.ome_zarr import read_ome_zarr

        image = read_ome_zarr(path, max(limit, MAX_STREAMED_PIXELS if streamed else MAX_LAZY_PIXELS), lazy=True)
    else:
        largest = MAX_LABEL_PIXELS if labels_only else MAX_APPLY_PIXELS
        image = read_image(path, max(limit, largest) if tiled else limit)
    shape = image.array.shape
    if len(shape) == 4 or (image.ndim == 3 and len(shape) != 3):
        raise InvalidInputError(f"{path}: a {len(shape)}-D image with shape {shape}; segmentation "
                                "takes 2-D pictures and 3-D volumes")
    if image.ndim == 3 and int(np.prod(shape)) > limit:  # volumes are segmented whole
        raise InvalidInputError(f"{path}: a volume of {int(np.prod(shape)):,} voxels; at most {limit:,} "
                                "(IMAGEFOREST_MAX_PIXELS raises the limit)")
    if image.ndim == 3 and not isinstance(image.array, np.ndarray):
        image.array = np.asarray(image.array)  # a volume opened chunk by chunk: read whole, now that it fits
    return image


def read_scribbles(path: str | os.PathLike, image: Image, what: str = "scribbles") -> np.ndarray:
    """Scribbles (or another label map, named `what` in messages, e.g. an automatic segmentation to start from)
    for `image` as int64 labels on its spatial grid ((y, x) or (z, y, x)), 0 = not labelled."""
    from imageforest.imaging.pictures import load_picture, max_pixels, regular_file

    path = Path(path)
    shape = image.array.shape[: image.ndim]
    if image.ndim == 2 and _suffix(path) in PICTURE_SUFFIXES:
        arr, mode = load_picture(path, what, max_pixels(MAX_SEGMENT_PIXELS), labels=True)
        if arr.ndim == 3:
            if mode in ("RGB", "RGBA") and np.all(arr[..., 0:1] == arr[..., :3]):
                arr = arr[..., 0]  # a grey label image stored as RGB
            else:
                raise InvalidInputError(f"{path}: {what} are a colour ({mode}) image; give a label image "
                                        "(palette or greyscale PNG, 0 = not labelled, 1..K = classes)")
    else:
        if not path.is_dir():
            regular_file(path, what)
        labels = read_image(path)
        arr = labels.array
        if image.ndim == 3 and labels.ndim == 3 and arr.shape == shape:
            _check_same_grid(labels, image, path, what)
    if arr.shape != shape:
        raise InvalidInputError(f"{path}: {what} of shape {arr.shape} do not match the image's grid {shape}")
    if arr.dtype.kind == "f" and (not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr))):
        raise InvalidInputError(f"{path}: {what} must be whole-number labels")
    if arr.dtype.kind not in "biuf":
        raise InvalidInputError(f"{path}: {what} must be integer labels, got {arr.dtype}")
    if arr.size and arr.min() < 0:
        raise InvalidInputError(f"{path}: {what} must be >= 0 (0 = not labelled)")
    return arr.astype(np.int64)


def _check_same_grid(labels: Image, image: Image, path: Path, what: str = "scribbles") -> None:
    """Scribbles of a volume lie on its grid: the same spacing, origin and direction, not only the same shape (a
    label map of another scan would label other anatomy)."""
    tol = 1e-3 * float(np.min(image.spacing))
    problems = []
    if not np.allclose(labels.spacing, image.spacing, rtol=1e-4, atol=1e-6):
        problems.append(f"spacing {tuple(np.round(labels.spacing, 4))} against {tuple(np.round(image.spacing, 4))} mm")
    if not np.allclose(labels.origin, image.origin, atol=max(tol, 1e-4)):
        problems.append(f"origin {tuple(np.round(labels.origin, 2))} against {tuple(np.round(image.origin, 2))} mm")
    if not np.allclose(labels.direction, image.direction, atol=1e-4):
        problems.append("another direction")
    if problems:
        raise InvalidInputError(f"{path}: {what} on another grid than the image ({'; '.join(problems)})")


def atomic_write(path: str | os.PathLike, write: Callable[[BinaryIO], None]) -> None:
    """`imageforest.forest.serialization.atomic_write` (a temporary file renamed into place), with a missing
    folder reported as bad input."""
    path = Path(path)
    if not path.parent.is_dir():
        raise InvalidInputError(f"{path}: the folder {path.parent} does not exist")
    write_atomically(path, write)


def _like(array: np.ndarray, image: Image) -> Image:
    return Image(array, image.spacing.copy(), image.origin.copy(), image.direction.copy(), source=image.source)


def write_labels(labels: np.ndarray, path: str | os.PathLike, image: Image) -> None:
    """A label map on `image`'s grid: PNG/TIFF/BMP for pictures (8-bit, 16-bit past 255), a volume format for
    volumes (the image's geometry)."""
    path = Path(path)
    suffix = _suffix(path)
    if suffix == ZARR_SUFFIX:
        from imageforest.imaging.ome_zarr import write_ome_zarr

        write_ome_zarr(labels, path, image)  # as uint8, or uint16 past 255
        return
    labels = np.asarray(labels)  # an on-disk array goes whole into the formats other than OME-Zarr
    if image.ndim == 2:
        if suffix not in LABEL_PICTURE_SUFFIXES:
            raise InvalidInputError(f"{path}: write a picture's mask as {', '.join(LABEL_PICTURE_SUFFIXES)}")
        from PIL import Image as PILImage

        if labels.max() > 255 and suffix == ".bmp":
            raise InvalidInputError(f"{path}: labels above 255 need PNG or TIFF")
        arr = labels.astype(np.uint8 if labels.max() <= 255 else np.uint16)
        picture = PILImage.fromarray(arr)
        if suffix == ".png" and arr.dtype == np.uint8:
            # a palette PNG: the pixel values stay the label numbers, and any viewer shows them in colour
            picture = picture.convert("P")
            picture.putpalette(label_palette().ravel().tolist())
        atomic_write(path, lambda fh: picture.save(fh, format=_pil_format(suffix)))
        return
    if suffix not in VOLUME_SUFFIXES:
        raise InvalidInputError(f"{path}: write a volume's mask as {', '.join(VOLUME_SUFFIXES)}")
    write_image(_like(labels.astype(np.uint8 if labels.max() <= 255 else np.uint16), image), path,
                image.file_orientation)


@contextmanager
def staged_labels(mask: Path | None, overlay: Path | None, maps: bool) -> Iterator[Path | None]:
    """A new folder beside an OME-Zarr `mask` where a picture segmented in tiles keeps its labels on disk
    (`segment_file(..., labels_to=...)`), removed afterwards; None when the labels must be in memory anyway (another
    mask format, an overlay, or posterior maps)."""
    if mask is None or not is_zarr_path(mask) or overlay is not None or maps or not mask.parent.is_dir():
        yield None
        return
    folder = Path(tempfile.mkdtemp(prefix=f".{mask.name}.tiles.", dir=mask.parent))
    try:
        yield folder / "labels.zarr"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def label_palette() -> np.ndarray:
    """(256, 3) uint8 colours of label values: 0 black, then ten distinct colours, repeated."""
    base = np.array([[230, 25, 75], [60, 180, 75], [255, 225, 25], [0, 130, 200], [245, 130, 48], [145, 30, 180],
                     [70, 240, 240], [240, 50, 230], [210, 245, 60], [250, 190, 212]], dtype=np.uint8)
    palette = np.zeros((256, 3), np.uint8)
    palette[1:] = base[np.arange(255) % len(base)]
    return palette


def check_output_suffixes(image_path: Path, mask: Path | None, proba: Path | None, uncertainty: Path | None,
                          overlay: Path | None, model: Path | None) -> None:
    """Refuse, before any work, an output whose suffix cannot hold what it is given for an image of this kind
    (told by the image's suffix: a picture, or a volume)."""
    picture = _suffix(image_path) in PICTURE_SUFFIXES
    if _suffix(image_path) == ZARR_SUFFIX:  # a picture or a volume: told when it is read (the writers check then)
        masks = LABEL_PICTURE_SUFFIXES + VOLUME_SUFFIXES + (ZARR_SUFFIX,)
        maps = (".npy", ".tif", ".tiff", ".png", ZARR_SUFFIX, *VOLUME_SUFFIXES)
        kind, probas = "an image", maps
    else:
        masks = (LABEL_PICTURE_SUFFIXES if picture else VOLUME_SUFFIXES) + (ZARR_SUFFIX,)
        maps = (".npy", ".tif", ".tiff", ZARR_SUFFIX) + ((".png",) if picture else VOLUME_SUFFIXES)
        kind = "a picture" if picture else "a volume"
        probas = (".npy", ".tif", ".tiff", ZARR_SUFFIX) if picture else maps
    for flag, path, what, allowed in (
            ("-o", mask, f"{kind}'s mask as", masks),
            ("--proba", proba, f"{kind}'s probabilities as", probas),
            ("--uncertainty", uncertainty, f"{kind}'s uncertainty as", maps),
            ("--overlay", overlay, "the overlay as", (".png",)), ("--save-model", model, "a model as", (".npz",))):
        if path is not None and _suffix(path) not in allowed:
            raise InvalidInputError(f"{flag}: {path}: write {what} {', '.join(allowed)}")


def write_overlay(image: Image, labels: np.ndarray, path: str | os.PathLike) -> None:
    """A PNG of the segmentation over the image (a picture; for a volume its axial, coronal and sagittal planes
    through the segmented objects' centre, superior up), each label but the largest (the background) tinted in its
    palette colour and outlined."""
    from PIL import Image as PILImage
    from scipy import ndimage

    palette = label_palette().astype(np.float32)
    values, counts = np.unique(labels, return_counts=True)
    background = int(values[np.argmax(counts)])
    shown = np.where(labels == background, 0, labels)  # the background stays as it is: the objects stand out

    def panel(grey: np.ndarray, lab: np.ndarray, rgb: np.ndarray | None = None) -> np.ndarray:
        base = (np.repeat(grey[..., None], 3, axis=2) if rgb is None else rgb).astype(np.float32)
        colour = palette[np.minimum(lab, 255)]
        inside = lab > 0
        out = base.copy()
        out[inside] = 0.55 * base[inside] + 0.45 * colour[inside]
        edge = inside & ~ndimage.binary_erosion(inside & (lab == ndimage.grey_erosion(lab, size=3)))
        out[edge] = colour[edge]
        return np.clip(out, 0, 255).astype(np.uint8)

    def to_grey(values: np.ndarray) -> np.ndarray:
        lo, hi = np.percentile(values, [1, 99]) if values.size else (0.0, 1.0)
        return np.clip((values - lo) / max(hi - lo, 1e-6) * 255.0, 0, 255)

    arr = image.array
    if image.ndim == 2:
        rgb = arr[..., :3].astype(np.float32) if arr.ndim == 3 else None
        if rgb is not None and rgb.max() > 255:
            rgb = to_grey(rgb)
        picture = panel(to_grey(arr.astype(np.float32)) if arr.ndim == 2 else np.zeros(arr.shape[:2]), shown, rgb)
    else:
        vol = to_grey(arr.astype(np.float32))
        # the planes cross the largest segmented object: stray voxels elsewhere must not move them off it
        parts, n_parts = ndimage.label(shown > 0)
        if n_parts:
            largest = 1 + int(np.argmax(np.bincount(parts.ravel())[1:]))
            centre = np.array(np.nonzero(parts == largest)).mean(axis=1).round().astype(int)
        else:
            centre = np.array(shown.shape) // 2
        z, y, x = centre
        sx, sy, sz = (float(v) for v in image.spacing)
        side = max(256, *arr.shape)  # panels of at least 256 pixels: small volumes are enlarged

        def scaled(view: np.ndarray, row_mm: float, col_mm: float) -> np.ndarray:
            """The panel with square pixels in mm (thick slices would look squashed), enlarged to `side`."""
            rows, cols = view.shape[0] * row_mm, view.shape[1] * col_mm
            zoom = side / max(rows, cols)
            size = (max(1, round(cols * zoom)), max(1, round(rows * zoom)))
            return np.asarray(PILImage.fromarray(view).resize(size, PILImage.NEAREST))

        views = [scaled(panel(vol[z], shown[z]), sy, sx),
                 scaled(panel(vol[::-1, y, :], shown[::-1, y, :]), sz, sx),
                 scaled(panel(vol[::-1, :, x], shown[::-1, :, x]), sz, sy)]
        height = max(v.shape[0] for v in views)
        views = [np.pad(v, ((0, height - v.shape[0]), (0, 4), (0, 0))) for v in views]
        picture = np.concatenate(views, axis=1)
    atomic_write(Path(path), lambda fh: PILImage.fromarray(picture).save(fh, format="PNG"))


def write_map(values: np.ndarray, path: str | os.PathLike, image: Image) -> None:
    """A float map (probabilities (..., K) or uncertainty) on `image`'s grid: `.npy` always; float32 TIFF for
    pictures; a volume format (vector voxels for probabilities) for volumes; for a picture's scalar map also PNG,
    scaled so that 255 is the largest value."""
    path = Path(path)
    suffix = _suffix(path)
    values = np.asarray(values, dtype=np.float32)
    if suffix == ZARR_SUFFIX:
        from imageforest.imaging.ome_zarr import write_ome_zarr

        write_ome_zarr(values, path, image)
    elif suffix == ".npy":
        atomic_write(path, lambda fh: np.save(fh, values, allow_pickle=False))
    elif image.ndim == 2 and suffix in (".tif", ".tiff"):
        import tifffile

        atomic_write(path, lambda fh: fh.write(_tiff_bytes(values, tifffile)))
    elif image.ndim == 2 and suffix == ".png" and values.ndim == 2:
        from PIL import Image as PILImage

        top = float(values.max()) if values.size and values.max() > 0 else 1.0
        scaled = np.round(values / top * 255.0).astype(np.uint8)
        atomic_write(path, lambda fh: PILImage.fromarray(scaled).save(fh, format="PNG"))
    elif image.ndim == 3 and suffix in VOLUME_SUFFIXES:
        write_image(_like(values, image), path, image.file_orientation)
    else:
        kinds = ".npy, .tif, .zarr" + (", .png (a scalar map)" if image.ndim == 2
                                       else ", " + ", ".join(VOLUME_SUFFIXES))
        raise InvalidInputError(f"{path}: write this map as {kinds}")


def _tiff_bytes(values: np.ndarray, tifffile) -> bytes:
    """A float TIFF in memory: tifffile wants a named file, and the atomic writer hands out an unnamed one."""
    buf = io.BytesIO()
    tifffile.imwrite(buf, values)
    return buf.getvalue()


def _pil_format(suffix: str) -> str:
    return {".png": "PNG", ".tif": "TIFF", ".tiff": "TIFF", ".bmp": "BMP"}[suffix]
