"""Model files: one `.npz` of arrays with the JSON metadata embedded as a uint8 array.

A model is data, never code: the file is read with ``allow_pickle=False``; its metadata carries a format name and
version, the task, the feature-family spec and the hyper-parameters. Writes are atomic (temporary file in the
target folder, then rename), so a crash never leaves half a model behind.
"""

from __future__ import annotations

import io
import json
import os
import stat
import tempfile
import zipfile
import zlib
from pathlib import Path

import numpy as np

from imageforest.exceptions import ModelFormatError

FORMAT_NAME = "imageforest-model"
FORMAT_VERSION = 1
METADATA_KEY = "__metadata__"
# Limits checked from the members' headers before anything is decompressed: a crafted file cannot make a reader
# inflate gigabytes (the shipped models are 1-20 MB).
MAX_MODEL_BYTES = 2 << 30  # all arrays together, decompressed
MAX_METADATA_BYTES = 16 << 20
MAX_METADATA_DEPTH = 64
ARRAY_KINDS = "biufU"  # booleans, integers, floats, fixed-width strings (class names); never objects


def file_mode() -> int:
    """The permissions a plain open() would give a new file (mkstemp makes 0600 ones)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def is_char_device(path: Path) -> bool:
    try:
        return stat.S_ISCHR(os.stat(path).st_mode)
    except OSError:
        return False


def atomic_write(path: str | os.PathLike, write) -> None:
    """Call ``write(file_object)`` on a temporary file beside `path`, then move it into place."""
    path = Path(path)
    if is_char_device(path):  # /dev/null and the like: written in place, never replaced by a file
        with open(path, "wb") as fh:
            write(fh)
        return
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise FileNotFoundError(f"{path}: the folder {directory} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        os.chmod(tmp, file_mode())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def save_model(path: str | os.PathLike, metadata: dict, arrays: dict[str, np.ndarray]) -> None:
    """Write arrays and metadata to `path` (conventionally ending in `.npz`)."""
    meta = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, **metadata}
    payload = dict(arrays)
    payload[METADATA_KEY] = np.frombuffer(json.dumps(meta, sort_keys=True).encode("utf-8"), dtype=np.uint8)
    for key, value in payload.items():
        if np.asarray(value).dtype == object:
            raise TypeError(f"array '{key}' has dtype object; models hold plain arrays only")
    atomic_write(path, lambda fh: _write_npz(fh, payload))


def _write_npz(fh, arrays: dict[str, np.ndarray]) -> None:
    """A compressed .npz whose bytes depend on the arrays only (fixed entry timestamps, sorted names).

    numpy's own writer stamps each entry with the current time, so two identical models would differ.
    """
    with zipfile.ZipFile(fh, mode="w", compression=zipfile.ZIP_DEFLATED) as zf:
        for key in sorted(arrays):
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.asarray(arrays[key]), allow_pickle=False)
            info = zipfile.ZipInfo(key + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, buf.getvalue())


def model_file(path: str | os.PathLike | None, default: Path) -> Path:
    """The model file a user named, or an application's shipped `default` when None; ModelFormatError when it is
    not a file (saying so when the installation lacks its default model)."""
    chosen = Path(path) if path is not None else default
    if not chosen.is_file():
        raise ModelFormatError(f"{chosen}: no such model file" + (" (the default model is missing from this "
                                                                   "installation)" if chosen == default else ""))
    return chosen


def load_model(path: str | os.PathLike) -> tuple[dict, dict[str, np.ndarray]]:
    """Read a model file; raise ModelFormatError with the reason if it is not one of ours.

    Returns
    -------
    metadata : dict
    arrays : dict of name -> ndarray (all loaded into memory)
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such model file")
    if not zipfile.is_zipfile(path):
        raise ModelFormatError(f"{path}: not an imageforest model (not an .npz archive)")
    try:
        arrays = _read_members(path)
    except ModelFormatError:
        raise
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError, KeyError, NotImplementedError) as exc:
        raise ModelFormatError(f"{path}: not a readable imageforest model ({type(exc).__name__}: {exc})") from None
    raw = arrays.pop(METADATA_KEY, None)
    if raw is None or raw.dtype != np.uint8 or raw.ndim != 1:
        raise ModelFormatError(f"{path}: no imageforest metadata (is this a model file of another tool?)")
    if raw.size > MAX_METADATA_BYTES:
        raise ModelFormatError(f"{path}: metadata of {raw.size} bytes (at most {MAX_METADATA_BYTES})")
    try:
        meta = json.loads(raw.tobytes().decode("utf-8"))
        _check_depth(meta, MAX_METADATA_DEPTH)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError, ValueError) as exc:
        raise ModelFormatError(f"{path}: metadata is damaged ({type(exc).__name__}: {exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise ModelFormatError(f"{path}: not an imageforest model")
    version = meta.get("format_version")
    if version != FORMAT_VERSION:
        raise ModelFormatError(f"{path}: model format version {version!r} is not supported "
                               f"(this imageforest reads version {FORMAT_VERSION})")
    return meta, arrays


def _read_members(path: Path) -> dict[str, np.ndarray]:
    """Every `.npy` member of the archive, each header (dtype, shape) checked before its data is inflated."""
    arrays: dict[str, np.ndarray] = {}
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
        declared = 0
        for info in infos:  # headers first: refuse before inflating anything
            if not info.filename.endswith(".npy"):
                raise ModelFormatError(f"{path}: unexpected member {info.filename!r}")
            with zf.open(info) as fh:
                dtype, shape = _header(fh, info.filename)
            declared += dtype.itemsize * int(np.prod(shape, dtype=np.float64))
            if declared > MAX_MODEL_BYTES:
                raise ModelFormatError(f"{path}: arrays declare over {MAX_MODEL_BYTES >> 20} MB; not loading")
        for info in infos:
            with zf.open(info) as fh:
                arrays[info.filename[: -len(".npy")]] = np.lib.format.read_array(fh, allow_pickle=False)
    return arrays


def npy_header(fh, name: str) -> tuple[np.dtype, tuple[int, ...]]:
    """The dtype and shape a `.npy` stream's header declares, read without its data (ValueError when it is no
    `.npy` header of version 1 or 2)."""
    version = np.lib.format.read_magic(fh)
    if version == (1, 0):
        shape, _, dtype = np.lib.format.read_array_header_1_0(fh)
    elif version == (2, 0):
        shape, _, dtype = np.lib.format.read_array_header_2_0(fh)
    else:
        raise ValueError(f"array {name}: .npy format version {version} is not read here")
    return dtype, shape


def _header(fh, name: str) -> tuple[np.dtype, tuple[int, ...]]:
    dtype, shape = npy_header(fh, name)
    if dtype.kind not in ARRAY_KINDS or dtype.hasobject:
        raise ModelFormatError(f"array {name} has dtype {dtype}; models hold plain numbers and names only")
    return dtype, shape


def _check_depth(value, limit: int) -> None:
    """Refuse metadata nested deeper than `limit` (a crafted document could exhaust the stack later)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            raise ValueError(f"metadata nested over {limit} levels deep")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
