"""OME-Zarr (OME-NGFF) images in and out, through the `ome-zarr` package (`pip install 'imageforest[zarr]'`).

An OME-Zarr image is a folder (`*.ome.zarr`, `*.zarr`) holding a multiscale pyramid; imageforest reads its full
resolution (level 0) as an `Image`:

- axes of type "time" must have one point, and are dropped;
- a "channel" axis of 1 is dropped; of 3 or 4 (RGB, RGBA) on a 2-D image it becomes the last axis, as a picture's
  colour axis;
- two space axes (y, x) make a picture; three (z, y, x) a volume, its voxel size from the level's "scale"
  transformation converted to mm by each axis's unit (a missing unit is taken as mm) and its origin from the
  "translation"; the direction is the identity (OME-Zarr axes are not oriented in a patient).

A picture may also be opened without reading it (`read_ome_zarr(..., lazy=True)`): its array is then a
`ChunkedArray` that reads the chunks a slice needs, which is how a saved model segments a picture larger than memory
tile by tile.

Label maps and float maps (posteriors, uncertainty) are written as OME-Zarr images on the same axes and scale
(`write_ome_zarr`), into a new folder renamed into place when complete. Labels too large for memory are written
tile by tile into an on-disk array first (`label_store`), which `write_ome_zarr` then copies chunk by chunk.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from imageforest.imaging.io import Image, ImageReadError, max_voxels

ZARR_SUFFIX = ".zarr"
# mm per unit of the units the OME-NGFF specification names for space axes (UDUNITS-2)
MM_PER_UNIT = {"meter": 1e3, "decimeter": 1e2, "centimeter": 10.0, "millimeter": 1.0, "micrometer": 1e-3,
               "nanometer": 1e-6, "angstrom": 1e-7, "picometer": 1e-9, "kilometer": 1e6, "inch": 25.4,
               "foot": 304.8}


def is_zarr_path(path: str | os.PathLike) -> bool:
    """Whether a path names an OME-Zarr image by its name (`*.zarr`, `*.ome.zarr`), existing or not."""
    return Path(path).name.lower().endswith(ZARR_SUFFIX)


def _modules():
    try:
        import zarr
        from ome_zarr.io import parse_url
        from ome_zarr.reader import Multiscales, Reader
        from ome_zarr.scale import Methods
        from ome_zarr.writer import write_image
    except ImportError as exc:  # an optional dependency
        raise ImageReadError(f"OME-Zarr needs the ome-zarr package: pip install 'imageforest[zarr]' ({exc})") from None
    return zarr, parse_url, Reader, Multiscales, write_image, Methods


def read_ome_zarr(path: str | os.PathLike, max_points: int | None = None, lazy: bool = False) -> Image:
    """The full-resolution level of an OME-Zarr image (see the module notes). With `lazy` the image's array is a
    dask array that reads chunks when sliced (a picture larger than memory, segmented tile by tile); its values are
    checked chunk by chunk, and only `max_points` limits its size.

    Raises
    ------
    ImageReadError
        Not an OME-Zarr image, no multiscale image in it, axes imageforest cannot take (time series, many channels,
        one or more than three space axes), more than `max_points` pixels or voxels, or NaN values.
    """
    path = Path(path)
    _, parse_url, Reader, Multiscales, _, _ = _modules()

    def fail(what: str) -> ImageReadError:
        return ImageReadError(f"{path}: {what}")

    location = parse_url(str(path), mode="r")
    if location is None:
        raise fail("not an OME-Zarr image (no Zarr metadata)")
    try:
        nodes = list(Reader(location)())
    except Exception as exc:  # the reader raises whatever the malformed metadata makes it meet
        raise fail(f"unreadable OME-Zarr metadata ({type(exc).__name__}: {str(exc)[:200]})") from None
    node = next((n for n in nodes if any(isinstance(s, Multiscales) for s in n.specs) and n.data), None)
    if node is None:
        raise fail("holds no multiscale image (OME-Zarr 'multiscales' metadata)")
    data = node.data[0]
    axes = node.metadata.get("axes") or [{"name": n} for n in "tczyx"[-data.ndim:]]
    axes = [a if isinstance(a, dict) else {"name": str(a)} for a in axes]
    if len(axes) != data.ndim:
        raise fail(f"declares {len(axes)} axes for an array of {data.ndim}")
    kinds = [a.get("type") or ("space" if a["name"] in "zyx" else "time" if a["name"] == "t" else "channel")
             for a in axes]
    scale, translation = _level_transforms(node.metadata.get("coordinateTransformations"), data.ndim)
    keep, index = [], []
    channel = None
    for k, kind in enumerate(kinds):
        if kind == "time":
            if data.shape[k] != 1:
                raise fail(f"is a time series of {data.shape[k]} points; imageforest reads one image")
            index.append(0)
        elif kind == "channel":
            if data.shape[k] == 1:
                index.append(0)
            elif channel is not None or data.shape[k] not in (3, 4):
                raise fail(f"has {data.shape[k]} channels; imageforest reads grey, RGB or RGBA images")
            else:
                channel = len(keep)
                keep.append(k)
                index.append(slice(None))
        else:
            keep.append(k)
            index.append(slice(None))
    space = [k for k in keep if kinds[k] != "channel"]
    if len(space) not in (2, 3):
        raise fail(f"has {len(space)} space axes; imageforest reads 2-D images and 3-D volumes")
    if channel is not None and len(space) == 3:
        raise fail("is a colour volume; imageforest reads colour pictures and scalar volumes")
    count = float(np.prod([data.shape[k] for k in space]))
    if not lazy and count * (1 if channel is None else data.shape[keep[channel]]) > max_voxels():
        raise fail(f"holds {' x '.join(str(data.shape[k]) for k in keep)} values, over the "
                   f"{max_voxels() / 1e6:.0f} million read at most (IMAGEFOREST_MAX_VOXELS)")
    if max_points is not None and count > max_points:
        raise fail(f"{' x '.join(str(data.shape[k]) for k in space)} pixels or voxels, over the "
                   f"{max_points / 1e6:.1f} million this command reads (IMAGEFOREST_MAX_PIXELS raises the limit)")
    array = data[tuple(index)]
    if channel is not None:
        array = np.moveaxis(array, channel, -1)  # dask arrays move lazily
    if array.dtype.kind not in "biuf":
        raise fail(f"holds {array.dtype} values; imageforest reads numbers")
    try:
        if not lazy:
            array = np.asarray(array)
        if array.dtype.kind == "f" and not bool(np.isfinite(array).all()):
            raise fail("contains NaN or infinite values")
    except ImageReadError:
        raise
    except Exception as exc:  # a damaged chunk: whatever its codec raises
        raise fail(f"unreadable chunk data ({type(exc).__name__}: {str(exc)[:200]})") from None
    if 0 in array.shape:
        raise fail(f"is empty (shape {array.shape})")
    mm = np.array([MM_PER_UNIT.get(str(axes[k].get("unit", "millimeter")).lower(), np.nan) for k in space])
    if np.any(np.isnan(mm)):
        units = sorted({str(axes[k].get("unit")) for k in space})
        raise fail(f"has space units {units}; imageforest reads {', '.join(MM_PER_UNIT)}")
    spacing = np.array([scale[k] for k in space]) * mm
    origin = np.array([translation[k] for k in space]) * mm
    if not np.all(np.isfinite(spacing)) or np.any(spacing <= 0):
        raise fail(f"has an invalid scale {tuple(float(s) for s in spacing)}")
    return Image(ChunkedArray(array, path) if lazy else np.ascontiguousarray(array), spacing[::-1].copy(),
                 origin[::-1].copy(), np.eye(len(space)), source=str(path))


class ChunkedArray:
    """An image array read chunk by chunk as it is sliced: `array[key]` is a numpy array, and a damaged chunk an
    `ImageReadError` naming the file."""

    def __init__(self, array, path: str | os.PathLike) -> None:
        self._array, self.path = array, Path(path)
        self.shape, self.dtype = tuple(int(n) for n in array.shape), np.dtype(array.dtype)
        self.ndim = len(self.shape)

    def __getitem__(self, key) -> np.ndarray:
        try:
            return np.asarray(self._array[key])
        except Exception as exc:  # whatever the chunk's codec raises
            raise ImageReadError(f"{self.path}: unreadable chunk data ({type(exc).__name__}: {str(exc)[:200]})"
                                 ) from None

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = self[...]
        return out if dtype is None else out.astype(dtype)


def _level_transforms(transforms, ndim: int) -> tuple[list[float], list[float]]:
    """Level 0's scale and translation per array axis (ones and zeros where the metadata gives none)."""
    scale, translation = [1.0] * ndim, [0.0] * ndim
    level = transforms[0] if transforms else []
    for t in level or []:
        if t.get("type") == "scale" and len(t.get("scale", [])) == ndim:
            scale = [float(v) for v in t["scale"]]
        elif t.get("type") == "translation" and len(t.get("translation", [])) == ndim:
            translation = [float(v) for v in t["translation"]]
    return scale, translation


def label_store(path: str | os.PathLike, shape: tuple[int, ...], dtype, chunk: int):
    """A new on-disk zarr array at `path` (a folder) of `shape` and `dtype` in `chunk`-sided chunks, for labels
    written piece by piece (`SegmentationForest.segment_tiles(..., labels_out=...)`) and then copied into an
    OME-Zarr image by `write_ome_zarr` without being read whole."""
    zarr = _modules()[0]
    return zarr.open_array(str(path), mode="w", shape=tuple(int(n) for n in shape),
                           chunks=(int(chunk),) * len(shape), dtype=np.dtype(dtype))


def write_ome_zarr(values: np.ndarray, path: str | os.PathLike, image: Image, levels: int = 3) -> None:
    """Write a label map or a float map on `image`'s grid as an OME-Zarr image.

    values : (y, x) or (z, y, x) labels (written as uint8, or uint16 past 255; the pyramid downsampled by nearest
        neighbour, so every level holds label values) or floats (float32, downsampled by averaging), or a float map
        with a last axis of K channels (the posteriors; channel first in the file); labels may also be a zarr or
        dask array (`label_store`), read and written chunk by chunk
    image : the image the map lies on: its voxel size is the scale (mm for volumes, pixels for pictures) and its
        origin the translation of level 0
    levels : pyramid levels, each halving y and x

    Written into a temporary folder beside `path` and renamed into place (an existing `path` is replaced only once
    the new one is complete; `imageforest.outputs.replace_folder`).
    """
    from imageforest.outputs import replace_folder

    zarr, parse_url, _, _, write_image, Methods = _modules()
    path = Path(path)
    if not path.parent.is_dir():
        raise FileNotFoundError(f"{path}: the folder {path.parent} does not exist")
    n_space = image.ndim
    if not isinstance(values, np.ndarray) and hasattr(values, "chunks") and np.dtype(values.dtype).kind in "biu":
        import dask.array as da

        values = values if isinstance(values, da.Array) else da.from_zarr(values)
        top = int(values.max().compute()) if values.size else 0
    else:
        values = np.asarray(values)
        top = int(values.max(initial=0)) if values.dtype.kind in "biu" else 0
    labels = values.dtype.kind in "biu"
    if labels:
        values = values.astype(np.uint8 if top <= 255 else np.uint16)
    else:
        values = values.astype(np.float32)
    if values.ndim == n_space + 1:
        values = np.moveaxis(values, -1, 0)  # channels first, as OME-Zarr orders them
    elif values.ndim != n_space:
        raise ValueError(f"a map of shape {values.shape} does not lie on a {n_space}-D image")
    space = "zyx"[-n_space:]
    axes = ("c" if values.ndim > n_space else "") + space
    spacing = np.asarray(image.spacing, dtype=np.float64)[::-1]  # (z, y, x) or (y, x)
    origin = np.asarray(image.origin, dtype=np.float64)[::-1]
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        root = zarr.group(store=parse_url(str(tmp), mode="w").store)
        write_image(values, root, axes=axes, scale_factors=tuple(2**k for k in range(1, max(1, levels))),
                    method=Methods.NEAREST if labels else Methods.RESIZE,
                    scale={**({"c": 1.0} if "c" in axes else {}),
                           **dict(zip(space, (float(v) for v in spacing), strict=True))},
                    axes_units={a: "millimeter" for a in space} if n_space == 3 else None)
        _set_origin(root, origin, spacing, len(axes) - n_space)
        replace_folder(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _set_origin(root, origin: np.ndarray, spacing: np.ndarray, n_leading: int) -> None:
    """Give every level of the written multiscale image the translation of `origin` (ome-zarr's writer takes the
    voxel size alone): level k's first voxel centre lies at origin + (its downsampling factor - 1) / 2 voxels."""
    attrs = root.attrs.asdict()
    meta = attrs["ome"] if "ome" in attrs else attrs
    for dataset in meta["multiscales"][0]["datasets"]:
        transforms = [t for t in dataset["coordinateTransformations"] if t.get("type") != "translation"]
        step = np.asarray(next(t["scale"] for t in transforms if t.get("type") == "scale"), dtype=np.float64)
        factor = step[n_leading:] / spacing
        shift = np.r_[np.zeros(n_leading), origin + (factor - 1) / 2 * spacing]
        dataset["coordinateTransformations"] = [*transforms, {"type": "translation", "translation": shift.tolist()}]
    root.attrs.update(attrs)
