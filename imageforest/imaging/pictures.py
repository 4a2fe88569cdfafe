"""Pictures and depth maps from disk, checked before and while they are decoded: the one input layer every command
that reads a 2-D file goes through.

Checked before decoding: the path is a regular file (a FIFO would block the reader, a device never end; a
symbolic-link loop is named as such); the header's size is within the command's pixel limit (`max_pixels`: a
12,000 x 12,000 PNG of 420 KB would otherwise take gigabytes); a multi-page file names its page; a label image is
not stored with lossy compression (JPEG noise turns two labels into dozens). Checked while decoding: a truncated
file, a damaged chunk or a JPEG whose entropy-coded data are corrupt (libjpeg decodes those with a warning and
grey or wrong pixels) are refused. Every refusal is an `ImageReadError` naming the file and the problem.

``IMAGEFOREST_MAX_PIXELS`` raises every command's pixel limit (each command's default is sized to what its
computation holds in memory per pixel, so that a file within the limit stays within about 4 GB).
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from imageforest.imaging.io import ImageReadError

PIXELS_ENV = "IMAGEFOREST_MAX_PIXELS"
LOSSY_FORMATS = ("JPEG", "MPO", "WEBP")  # WebP may be lossless, but a reader cannot tell which
LABEL_SUFFIXES = (".png", ".tif", ".tiff", ".bmp")
# libjpeg's diagnostics for data it decodes anyway (it fills what it cannot read with grey)
JPEG_DAMAGE = ("Corrupt JPEG data", "Premature end of JPEG file", "Invalid JPEG file structure",
               "Bogus", "JPEG datastream contains no image")


def max_pixels(default: int) -> int:
    """A command's pixel limit: `default`, or ``IMAGEFOREST_MAX_PIXELS`` when set to a positive integer."""
    try:
        value = int(os.environ.get(PIXELS_ENV, default))
    except ValueError:
        return default
    return value if value > 0 else default


def regular_file(path: str | os.PathLike, what: str = "image") -> Path:
    """`path` when it names a regular file; ImageReadError for a missing path, a folder, a FIFO, a device or a
    symbolic-link loop."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise ImageReadError(f"{path}: no such file") from None
    except OSError as exc:  # a symbolic-link loop, a name too long, no permission
        raise ImageReadError(f"{path}: cannot be opened ({exc.strerror or exc})") from None
    if stat.S_ISDIR(mode):
        raise ImageReadError(f"{path}: is a folder, not a {what} file")
    if not stat.S_ISREG(mode):
        raise ImageReadError(f"{path}: is not a regular file (a FIFO or a device); give a {what} file")
    return path


@contextlib.contextmanager
def _no_bomb_check() -> Iterator[None]:
    """Pillow's decompression-bomb check off: the caller's own pixel limit, from the header, replaces it."""
    from PIL import Image as PILImage

    saved = PILImage.MAX_IMAGE_PIXELS
    PILImage.MAX_IMAGE_PIXELS = None
    try:
        yield
    finally:
        PILImage.MAX_IMAGE_PIXELS = saved


def picture_header(path: str | os.PathLike, what: str = "image", limit: int | None = None, labels: bool = False
                   ) -> dict[str, Any]:
    """The checked header of a picture file: {"format", "mode", "size" (width, height), "pages"}.

    Parameters
    ----------
    what : what the file is to the command ("image", "scribbles", "depth map"), for messages
    limit : most pixels (width x height) the command reads (None: no limit)
    labels : the file holds labels: lossy formats are refused
    """
    from PIL import Image as PILImage
    from PIL import UnidentifiedImageError

    path = regular_file(path, what)
    try:
        with _no_bomb_check(), PILImage.open(path) as im:
            info = {"format": im.format or "", "mode": im.mode, "size": tuple(im.size),
                    "pages": int(getattr(im, "n_frames", 1))}
    except UnidentifiedImageError:
        raise ImageReadError(f"{path}: not a readable {what}: not a picture format this reader knows (PNG, JPEG, "
                             "TIFF, BMP, ...)") from None
    except (OSError, SyntaxError, ValueError) as exc:  # Pillow reports a damaged header chunk as a SyntaxError
        raise ImageReadError(f"{path}: damaged {what} file ({_first_line(exc)})") from None
    width, height = info["size"]
    if limit is not None and width * height > limit:
        raise ImageReadError(f"{path}: {width} x {height} pixels, over the {limit / 1e6:.1f} million this command "
                             f"reads (set {PIXELS_ENV} to raise it; memory grows with the pixels)")
    if width < 1 or height < 1:
        raise ImageReadError(f"{path}: an empty picture ({width} x {height})")
    if labels and info["format"] in LOSSY_FORMATS:
        raise ImageReadError(f"{path}: {what} stored as {info['format']}: lossy compression changes label values; "
                             f"save them as {', '.join(s.lstrip('.').upper() for s in LABEL_SUFFIXES)}")
    return info


def load_picture(path: str | os.PathLike, what: str = "image", limit: int | None = None, labels: bool = False,
                 page: int | None = None) -> tuple[np.ndarray, str]:
    """Decode a picture after `picture_header`'s checks: (array, Pillow mode). A file of several pages is refused
    unless `page` (counted from 0) chooses one; truncated or damaged data are refused."""
    from PIL import Image as PILImage

    info = picture_header(path, what, limit, labels)
    path = Path(path)
    if info["pages"] > 1 and page is None:
        raise ImageReadError(f"{path}: holds {info['pages']} pages; this command reads one picture per file "
                             "(save the page you mean on its own)")
    if page is not None and not 0 <= page < info["pages"]:
        raise ImageReadError(f"{path}: has no page {page} (it holds {info['pages']})")
    try:
        with _no_bomb_check(), PILImage.open(path) as im:
            if page:
                im.seek(page)
            im.load()
            mode = im.mode
            arr = np.array(im)
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        raise ImageReadError(f"{path}: truncated or damaged {what} file ({_first_line(exc)})") from None
    if info["format"] in ("JPEG", "MPO"):
        damage = jpeg_damage(path)
        if damage:
            raise ImageReadError(f"{path}: damaged JPEG data ({damage})")
    return arr, mode


def jpeg_damage(path: str | os.PathLike) -> str | None:
    """libjpeg's diagnostic for a JPEG whose data it decodes with gaps (filled with grey), or None when clean.

    Pillow decodes such a file without a word; SimpleITK's reader prints libjpeg's warning, which
    `read_with_diagnostics` captures.
    """
    try:
        _, damage = read_with_diagnostics(path)
    except RuntimeError as exc:
        return _first_line(exc)
    return damage


def read_with_diagnostics(path: str | os.PathLike, call=None) -> tuple[Any, str | None]:
    """Run an ITK read (`call`, default ``sitk.ReadImage(path)``) with what ITK and its libraries print captured:
    returns the result and libjpeg's diagnostic of damaged data it decoded past (None when there is none). Other
    warnings, which ITK would print on the terminal before the command's own line, are logged."""
    import logging

    import SimpleITK as sitk

    result, text = captured_stdout(call or (lambda: sitk.ReadImage(str(path))), (1, 2))
    damage = next((line.strip() for line in text.splitlines() if line.strip().startswith(JPEG_DAMAGE)), None)
    if text.strip() and damage is None:
        logging.getLogger("imageforest.imaging.io").info("%s: ITK said: %s", path, " ".join(text.split())[:300])
    return result, damage


def captured_stdout(call, fds: tuple[int, ...] = (1,)) -> tuple[Any, str]:
    """Run `call()` with the process's file descriptors `fds` (1: standard output, 2: standard error, where C and
    C++ libraries print) captured; returns its result and what it printed. The capture is process-wide for the
    length of the call; where a descriptor cannot be duplicated (a daemon with its output closed), `call` runs
    uncaptured."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved: list[int] = []
    try:
        for fd in fds:
            saved.append(os.dup(fd))
    except OSError:
        for copy in saved:
            os.close(copy)
        return call(), ""
    with tempfile.TemporaryFile() as sink:
        for fd in fds:
            os.dup2(sink.fileno(), fd)
        try:
            result = call()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, copy in zip(fds, saved, strict=True):
                os.dup2(copy, fd)
                os.close(copy)
        sink.seek(0)
        return result, sink.read().decode(errors="replace")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
