"""Reading and writing images with their physical geometry (SimpleITK underneath).

Every image is an `Image`: voxels plus spacing, origin and direction, with 3-D volumes reoriented to LPS (x: patient
right to left, y: anterior to posterior, z: inferior to superior), as DICOM does; the file's own orientation is kept
(`Image.file_orientation`) so that outputs on its grid are written back in the same axes. Arrays are indexed (z, y, x);
geometry vectors are (x, y, z). 2-D images (PNG, JPEG, TIFF, BMP, 16-bit depth PNGs in millimetres) are (y, x) with
2-vectors, or (y, x, channels) for colour.

Bad files (missing, truncated, not an image, 4-D, empty, zero or NaN spacing, NaN voxels) raise `ImageReadError`
naming the file and what is wrong.
"""

from __future__ import annotations

import gzip
import logging
import math
import os
import struct
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import SimpleITK as sitk

from imageforest.exceptions import ImageForestError
from imageforest.forest.serialization import file_mode, is_char_device

log = logging.getLogger(__name__)

PLANAR_SUFFIXES = (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp")
SPACING_MM = (1e-3, 1e3)  # voxel sizes read outside this range are refused (a header error, not an image)


def max_voxels() -> int:
    """Voxels `read_image` reads at most (default 2^30, 2 GB of int16): IMAGEFOREST_MAX_VOXELS raises it."""
    try:
        return int(os.environ.get("IMAGEFOREST_MAX_VOXELS", 1 << 30))
    except ValueError:
        return 1 << 30


class ImageReadError(ImageForestError, ValueError):
    """An image file cannot be used: the message names the file and the problem."""


@dataclass
class Image:
    """Voxels with their geometry.

    Attributes
    ----------
    array : ndarray
        (z, y, x) for volumes, (y, x) or (y, x, channels) for planar images.
    spacing : (ndim,) float64
        Voxel size in mm, (x, y[, z]) order.
    origin : (ndim,) float64
        Physical position of voxel (0, 0[, 0]) in mm, (x, y[, z]) order, LPS for volumes.
    direction : (ndim, ndim) float64
        Columns are the physical directions of the x, y[, z] index axes.
    source : str
        Where the image came from, with any note a reader made (e.g. which DICOM series was picked).
    file_orientation : str or None
        For a volume read from a file: the orientation of the file's own index axes (e.g. "RAS"), before the
        reader turned them to LPS; outputs on its grid are written back in it (`write_image(..., orientation=)`).
    """

    array: np.ndarray
    spacing: np.ndarray
    origin: np.ndarray
    direction: np.ndarray
    source: str = ""
    notes: list[str] = field(default_factory=list)
    file_orientation: str | None = None

    @property
    def ndim(self) -> int:
        """Spatial dimensions (2 or 3)."""
        return int(self.spacing.shape[0])

    @property
    def size(self) -> tuple[int, ...]:
        """Voxel counts in (x, y[, z]) order."""
        return tuple(int(s) for s in self.array.shape[: self.ndim][::-1])

    def index_to_physical(self, index: np.ndarray) -> np.ndarray:
        """Continuous voxel indices (n, ndim) in (x, y[, z]) order -> physical points (n, ndim) in mm."""
        index = np.atleast_2d(np.asarray(index, dtype=np.float64))
        return self.origin + (index * self.spacing) @ self.direction.T

    def physical_to_index(self, points: np.ndarray) -> np.ndarray:
        """Physical points (n, ndim) in mm -> continuous voxel indices (n, ndim) in (x, y[, z]) order."""
        points = np.atleast_2d(np.asarray(points, dtype=np.float64))
        return np.linalg.solve(self.direction, (points - self.origin).T).T / self.spacing

    def to_sitk(self) -> sitk.Image:
        """A SimpleITK image with the same voxels and geometry."""
        img = sitk.GetImageFromArray(self.array, isVector=self.array.ndim > self.ndim)
        img.SetSpacing(tuple(float(s) for s in self.spacing))
        img.SetOrigin(tuple(float(o) for o in self.origin))
        img.SetDirection(tuple(float(d) for d in self.direction.ravel()))
        return img

    @classmethod
    def from_sitk(cls, img: sitk.Image, source: str = "") -> Image:
        """Wrap a SimpleITK image (no reorientation)."""
        ndim = img.GetDimension()
        return cls(array=sitk.GetArrayFromImage(img), spacing=np.array(img.GetSpacing(), dtype=np.float64),
                   origin=np.array(img.GetOrigin(), dtype=np.float64),
                   direction=np.array(img.GetDirection(), dtype=np.float64).reshape(ndim, ndim), source=source)


def _fail(path, what: str) -> ImageReadError:
    return ImageReadError(f"{path}: {what}")


def _nifti_truncation(path: Path) -> str | None:
    """Why a NIfTI file is incomplete, or None. ITK zero-fills a truncated file silently, so the header's
    voxel-data size is checked against the file size (.nii) or the gzip trailer's length field (.nii.gz)."""
    name = path.name.lower()
    if not (name.endswith(".nii") or name.endswith(".nii.gz")):
        return None
    opener = gzip.open if name.endswith(".gz") else open
    if name.endswith(".gz"):
        with open(path, "rb") as fh:
            if fh.read(2) != b"\x1f\x8b":
                return "is not gzip-compressed, as its .gz name says (a NIfTI file renamed, or not a scan?)"
    try:
        with opener(path, "rb") as fh:
            head = fh.read(540)
    except (OSError, EOFError):
        return "its compressed stream is damaged"
    if len(head) < 348:
        return "its header is cut short"
    for order in "<>":
        size = struct.unpack(order + "i", head[:4])[0]
        if size == 348:
            dims = struct.unpack(order + "8h", head[40:56])
            datatype = struct.unpack(order + "h", head[70:72])[0]
            bitpix = struct.unpack(order + "h", head[72:74])[0]
            pixdim = struct.unpack(order + "8f", head[76:108])
            raw_offset = struct.unpack(order + "f", head[108:112])[0]
            break
        if size == 540 and len(head) >= 540:
            datatype = struct.unpack(order + "h", head[12:14])[0]
            bitpix = struct.unpack(order + "h", head[14:16])[0]
            dims = struct.unpack(order + "8q", head[16:80])
            pixdim = struct.unpack(order + "8d", head[104:168])
            raw_offset = struct.unpack(order + "q", head[168:176])[0]
            break
    else:
        return None  # not a header we know; let ITK judge
    # ITK reads a zero, NaN or infinite voxel size as 1 mm and a NaN offset as 0: refuse them here.
    n_dims = max(1, min(int(dims[0]), 7))
    if not math.isfinite(raw_offset) or raw_offset < 0:
        return f"has an invalid voxel-data offset ({raw_offset})"
    offset = int(raw_offset)
    sizes = [float(pixdim[k]) for k in range(1, min(n_dims, 3) + 1)]
    if not all(math.isfinite(v) and v != 0 for v in sizes):
        return f"has invalid voxel spacing {tuple(sizes)} in its header"
    expected = max(offset, 348) + int(np.prod([max(int(d), 1) for d in dims[1:n_dims + 1]])) * max(bitpix, 8) // 8
    if name.endswith(".gz"):
        with open(path, "rb") as fh:
            fh.seek(-4, os.SEEK_END)
            isize = struct.unpack("<I", fh.read(4))[0]
        if isize != expected % 2**32:
            return f"is truncated or damaged (its header promises {expected} bytes)"
        # A damaged deflate stream with an intact trailer inflates to the right length with wrong voxels; only
        # the stream's CRC tells (one more pass of zlib: ~10 ms for a 128^3 CT, ~0.3 s for 512 x 512 x 300).
        try:
            with gzip.open(path, "rb") as fh:
                while fh.read(1 << 22):
                    pass
        except (OSError, EOFError, zlib.error) as exc:
            return f"is damaged ({exc})"
    elif path.stat().st_size < expected:
        return f"is truncated ({path.stat().st_size} of {expected} bytes)"
    if datatype in (16, 64):  # float32 / float64: ITK turns NaN voxels into 0, so look at the voxels themselves
        dtype = np.dtype(order + ("f4" if datatype == 16 else "f8"))
        count = int(np.prod([max(int(d), 1) for d in dims[1:n_dims + 1]]))
        with opener(path, "rb") as fh:
            fh.seek(max(offset, 348))
            for start in range(0, count, 1 << 22):  # in chunks: a float volume may be large
                block = np.frombuffer(fh.read(min(1 << 22, count - start) * dtype.itemsize), dtype=dtype)
                if not np.all(np.isfinite(block)):
                    return "contains NaN or infinite voxel values"
    return None


GEOMETRY_KEYS = ("offset", "origin", "position", "elementspacing", "elementsize", "transformmatrix", "rotation",
                 "orientation", "centerofrotation", "space origin", "space directions", "spacings", "thicknesses")


def _text_header_problem(path: Path) -> str | None:
    """A MetaImage (.mha/.mhd) or NRRD header whose geometry holds a non-number (inf, nan, a word), or None. ITK
    parses such a value as 0, so a scan with ``Offset = inf 0 0`` would sit at the origin without a word."""
    name = path.name.lower()
    if not name.endswith((".mha", ".mhd", ".nrrd", ".nhdr")):
        return None
    try:
        with open(path, "rb") as fh:
            head = fh.read(1 << 16)
    except OSError:
        return None
    nrrd = name.endswith((".nrrd", ".nhdr"))
    for raw in head.split(b"\n"):
        line = raw.decode("latin-1").strip()
        if nrrd and not line:
            break  # the blank line that ends a NRRD header
        key, sep, value = line.partition(":" if nrrd else "=")
        key = key.strip().lower()
        if not sep or key not in GEOMETRY_KEYS:
            if not nrrd and key == "elementdatafile":
                break
            continue
        for token in value.replace("(", " ").replace(")", " ").replace(",", " ").split():
            if token.lower() == "none":
                continue
            try:
                number = float(token)
            except ValueError:
                return f"its header's {key.strip()} holds {token!r}, not a number"
            if not math.isfinite(number):
                return f"its header's {key.strip()} holds {token}: the scan's geometry is not finite"
    return None


def _read_dicom_folder(path: Path) -> tuple[sitk.Image, list[str]]:
    reader = sitk.ImageSeriesReader()
    series = reader.GetGDCMSeriesIDs(str(path))
    if not series:
        raise _fail(path, "folder holds no DICOM series")
    files = {sid: reader.GetGDCMSeriesFileNames(str(path), sid) for sid in series}
    chosen = max(series, key=lambda sid: len(files[sid]))
    notes = []
    if len(series) > 1:
        note = (f"{len(series)} DICOM series in the folder; read the largest ({chosen}, "
                f"{len(files[chosen])} slices)")
        log.warning("%s: %s", path, note)
        notes.append(note)
    from imageforest.imaging.pictures import captured_stdout

    unread = _dicom_files_outside(path, files)
    if unread:
        raise _fail(path, f"{len(unread)} DICOM file(s) belong to no readable series ({unread[0].name}"
                          f"{', ...' if len(unread) > 1 else ''}): a damaged or truncated slice?")
    reader.SetFileNames(files[chosen])
    # ITK prints its warnings (and reads past them); the ones that mean lost anatomy are refused here
    img, text = captured_stdout(reader.Execute, (1, 2))
    if "missing slices" in text or "Non uniform sampling" in text:
        raise _fail(path, "its slices are not evenly spaced along the scan (a missing slice?)")
    if img.GetDimension() == 3 and img.GetSize()[2] != len(files[chosen]):
        # ITK skips a slice it cannot read with only a warning: the volume would silently miss anatomy
        raise _fail(path, f"read {img.GetSize()[2]} of the series' {len(files[chosen])} slices (a damaged slice?)")
    return img, notes


def _read_picture(path: Path, limit: int) -> sitk.Image:
    """A 2-D picture file through ITK, after the picture layer's header checks (one page, at most `limit` pixels);
    libjpeg's diagnostics of damaged data, which ITK prints and then decodes past, are refused."""
    from imageforest.imaging.pictures import picture_header, read_with_diagnostics

    info = picture_header(path, "image", limit)
    if info["pages"] > 1:
        raise _fail(path, f"holds {info['pages']} pages; give one picture per file (save the page you mean)")
    img, damage = read_with_diagnostics(path)
    if damage:
        raise _fail(path, f"damaged picture data ({damage})")
    return img


def _check_points(path: Path, size: tuple[int, ...], limit: int | None) -> None:
    """Refuse an image of more pixels or voxels (`size`, x first) than the caller's `limit`."""
    if limit is not None and float(np.prod(size)) > limit:
        raise _fail(path, f"{' x '.join(map(str, size))} pixels or voxels, over the {limit / 1e6:.1f} million this "
                          "command reads (set IMAGEFOREST_MAX_PIXELS to raise it; memory grows with them)")


def _dicom_files_outside(folder: Path, series: dict) -> list[Path]:
    """Files of `folder` that carry the DICOM signature but belong to none of its readable `series`."""
    listed = {Path(f).resolve() for names in series.values() for f in names}
    outside = []
    for item in sorted(folder.iterdir()):
        if not item.is_file() or item.resolve() in listed:
            continue
        try:
            with open(item, "rb") as fh:
                head = fh.read(132)
        except OSError:
            continue
        if head[128:132] == b"DICM":
            outside.append(item)
    return outside


def read_image(path: str | os.PathLike, max_points: int | None = None) -> Image:
    """Read a NIfTI, NRRD, MHA file, a DICOM series folder, an OME-Zarr image folder (`*.zarr`; needs the ome-zarr
    package, `imageforest.imaging.ome_zarr`), or a PNG/JPEG/TIFF/BMP image.

    Volumes come back reoriented to LPS. 16-bit PNGs keep their integer values (depth maps in mm). `max_points`:
    the most pixels or voxels (colour channels not counted) the caller reads, checked from the header before any
    is decoded (``IMAGEFOREST_MAX_PIXELS`` is the environment variable a command's limit comes from); every read
    stays within ``IMAGEFOREST_MAX_VOXELS`` values.

    Raises
    ------
    ImageReadError
        The file is missing, unreadable, 4-D, empty, too large, has zero/NaN spacing or NaN voxels.
    """
    path = Path(path)
    try:
        if not path.exists():
            raise _fail(path, "no such file or folder")
    except OSError as exc:  # a symbolic link loop, a name too long, ...
        raise _fail(path, f"cannot be opened ({exc.strerror or exc})") from None
    if not (path.is_file() or path.is_dir()):  # a FIFO or a device would block the reader or never end
        raise _fail(path, "is not a regular file or a folder")
    notes: list[str] = []
    if path.is_dir():
        from imageforest.imaging.ome_zarr import is_zarr_path, read_ome_zarr

        if is_zarr_path(path):
            return read_ome_zarr(path, max_points)
    try:
        if path.is_dir():
            img, notes = _read_dicom_folder(path)
            _check_points(path, img.GetSize(), max_points)
        else:
            problem = _nifti_truncation(path) or _text_header_problem(path)
            if problem:
                raise _fail(path, problem)
            from imageforest.imaging.pictures import read_with_diagnostics

            header = sitk.ImageFileReader()
            header.SetFileName(str(path))
            read_with_diagnostics(path, header.ReadImageInformation)  # the size, before any voxel is allocated
            count = float(np.prod(header.GetSize())) * header.GetNumberOfComponents()
            if count > max_voxels():
                raise _fail(path, f"declares {' x '.join(map(str, header.GetSize()))} voxels, over the "
                                  f"{max_voxels() / 1e6:.0f} million read at most (IMAGEFOREST_MAX_VOXELS)")
            _check_points(path, header.GetSize(), max_points)
            if path.suffix.lower() in PLANAR_SUFFIXES:
                img = _read_picture(path, max_points or max_voxels())
            else:
                img, _ = read_with_diagnostics(path)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()
        detail = next((ln for ln in first if "ERROR" in ln or "Unable" in ln or "error" in ln), first[0] if first
                      else "unknown error")
        raise _fail(path, f"not a readable image ({detail.strip()[:200]})") from None
    ndim = img.GetDimension()
    if ndim == 4 or (ndim == 3 and img.GetNumberOfComponentsPerPixel() > 1 and path.suffix.lower() not in
                     PLANAR_SUFFIXES):
        raise _fail(path, f"is {ndim}-D with {img.GetNumberOfComponentsPerPixel()} components per voxel; "
                          "imageforest reads 2-D images and 3-D scalar volumes")
    if ndim not in (2, 3):
        raise _fail(path, f"is {ndim}-D; imageforest reads 2-D images and 3-D volumes")
    if ndim == 3 and img.GetSize()[2] == 1 and path.suffix.lower() in PLANAR_SUFFIXES:
        img = img[:, :, 0]
        ndim = 2
    if 0 in img.GetSize():
        raise _fail(path, f"is empty (size {img.GetSize()})")
    if "complex" in img.GetPixelIDTypeAsString():
        raise _fail(path, f"holds complex voxels ({img.GetPixelIDTypeAsString()}); imageforest reads real values")
    spacing = np.array(img.GetSpacing())
    if not np.all(np.isfinite(spacing)) or np.any(spacing <= 0):
        raise _fail(path, f"has invalid voxel spacing {tuple(spacing)}")
    if np.any(spacing < SPACING_MM[0]) or np.any(spacing > SPACING_MM[1]):
        raise _fail(path, f"has implausible voxel spacing {tuple(float(v) for v in spacing)} mm (accepted: "
                          f"{SPACING_MM[0]:g} to {SPACING_MM[1]:g} mm)")
    if not np.all(np.isfinite(img.GetOrigin())) or not np.all(np.isfinite(img.GetDirection())):
        raise _fail(path, "has a NaN or infinite origin or direction")
    direction = np.array(img.GetDirection()).reshape(ndim, ndim)
    if not np.allclose(direction @ direction.T, np.eye(ndim), atol=1e-3):
        raise _fail(path, "has a direction matrix that is not a rotation (axes not orthonormal)")
    orientation = None
    if ndim == 3:
        orientation = sitk.DICOMOrientImageFilter.GetOrientationFromDirectionCosines(img.GetDirection())
        img = sitk.DICOMOrient(img, "LPS")
    image = Image.from_sitk(img, source=str(path))
    image.notes = notes
    image.file_orientation = orientation
    if image.array.dtype.kind == "f" and not np.all(np.isfinite(image.array)):
        raise _fail(path, "contains NaN or infinite voxel values")
    return image


def write_image(image: Image, path: str | os.PathLike, orientation: str | None = None) -> None:
    """Write `image` (NIfTI by the path's suffix, e.g. `.nii.gz`) atomically; geometry is preserved.

    orientation : for a volume, the orientation its file's index axes take (e.g. a scan's `file_orientation`, so
        that a label map's voxels line up with the scan's own array, not only in space); None keeps the image's.
    """
    path = Path(path)
    written = image.to_sitk()
    if orientation is not None and image.ndim == 3 and image.array.ndim == 3:
        written = sitk.DICOMOrient(written, orientation)
    if not path.parent.is_dir():
        raise FileNotFoundError(f"{path}: the folder {path.parent} does not exist")
    suffix = "".join(path.suffixes) or ".nii.gz"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    try:
        sitk.WriteImage(written, tmp, useCompression=True)
        if os.path.getsize(tmp) == 0:  # ITK can end without an error on a full disk
            raise OSError(f"{path}: nothing was written (is the disk full?)")
        if is_char_device(path):  # /dev/null and the like: written into, never replaced by a file
            with open(tmp, "rb") as src, open(path, "wb") as dst:
                dst.write(src.read())
            os.unlink(tmp)
            return
        os.chmod(tmp, file_mode())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def resample(image: Image, spacing, interpolator: str = "linear", fill: float | None = None) -> Image:
    """Resample to a new voxel spacing (mm, (x, y[, z])) over the same physical extent.

    Parameters
    ----------
    interpolator : {"linear", "nearest"}
        "nearest" for label maps.
    fill : value outside the input (default: the image minimum, e.g. air for CT)
    """
    spacing = np.broadcast_to(np.asarray(spacing, dtype=np.float64), (image.ndim,))
    if np.any(spacing <= 0) or not np.all(np.isfinite(spacing)):
        raise ValueError(f"spacing must be positive, got {tuple(spacing)}")
    src = image.to_sitk()
    extent = np.array(src.GetSize()) * image.spacing
    size = np.maximum(1, np.round(extent / spacing)).astype(int)
    interp = {"linear": sitk.sitkLinear, "nearest": sitk.sitkNearestNeighbor}[interpolator]
    default = float(image.array.min()) if fill is None else float(fill)
    out = sitk.Resample(src, [int(s) for s in size], sitk.Transform(), interp, tuple(image.origin),
                        tuple(float(s) for s in spacing), tuple(image.direction.ravel()), default,
                        src.GetPixelID())
    result = Image.from_sitk(out, source=image.source)
    result.notes = [*image.notes, f"resampled to {tuple(float(s) for s in spacing)} mm"]
    return result
