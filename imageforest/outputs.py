"""Where a command's outputs go: one name per input, and every destination checked before anything is written.

A command plans all its outputs first, so that a bad destination (an input, a folder, a pipe, a missing folder, two
outputs on one file) stops it before any result is written, and nothing an input holds is ever overwritten.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from imageforest.cli import fail
from imageforest.exceptions import InvalidInputError
from imageforest.forest.serialization import atomic_write

# Suffixes of the files the commands write: a folder to be created under such a name is a mistyped file name
FILE_SUFFIXES = (".json", ".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".npy", ".npz", ".nii", ".gz",
                 ".nrrd", ".mha", ".mhd", ".csv", ".txt")


def _stem(path: Path, suffixes: tuple[str, ...]) -> str:
    name = path.name
    for ext in suffixes:
        if name.lower().endswith(ext):
            return name[: -len(ext)]
    return name


def output_stems(paths: list[Path], suffixes: tuple[str, ...]) -> list[str]:
    """One output name per input: its file name without any of `suffixes`, prefixed with its folder's name where
    two inputs share a stem (p1/ct.nii.gz and p2/ct.nii.gz become p1_ct and p2_ct), numbered where even that is
    not enough."""
    stems = [_stem(p, suffixes) for p in paths]
    clash = {s for s in stems if stems.count(s) > 1}
    named = [f"{path.resolve().parent.name}_{stem}" if stem in clash else stem
             for path, stem in zip(paths, stems, strict=True)]
    seen: dict[str, int] = {}
    out = []
    for name in named:
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name}-{seen[name]}")
    return out


def make_folder(target: Path, not_a_folder: str = "is a file; give a folder") -> None:
    """Create the output folder `target` when missing; raise InvalidInputError (one line) for a file in its place
    (`not_a_folder` says why) or a folder that cannot be made."""
    if target.exists() and not target.is_dir():
        raise InvalidInputError(f"{target} {not_a_folder}")
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidInputError(f"cannot create the folder {target} ({exc.strerror or exc})") from None


def output_folder(target: Path, what: str, not_a_folder: str = "is a file; give a folder") -> None:
    """`make_folder` for a command: its error as one line prefixed with `what` (the option). A folder to be created
    under a file's name (`-o two.json` for several inputs) is refused: the user meant a file."""
    if not target.exists() and target.suffix.lower() in FILE_SUFFIXES:
        raise fail(f"{what}: {target} is named like a file ({target.suffix}), but here it is a folder (one output "
                   "per input); give a folder name")
    try:
        make_folder(target, not_a_folder)
    except InvalidInputError as exc:
        raise fail(f"{what}: {exc}") from None


def resolved(path: Path, what: str) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError) as exc:  # a symbolic link loop
        raise fail(f"{what}: {path}: {exc}") from None


def plan_outputs(target: Path | None, inputs: list[Path], stems: list[str], suffix: str, what: str
                 ) -> list[Path | None]:
    """Each input's output path for one option (None without it), refusing every destination that would lose or
    damage something (`check_destination`; /dev/null and other character devices are written into). With
    several inputs the target is a folder, created when missing."""
    if target is None:
        return [None] * len(inputs)
    many = len(inputs) > 1
    if many:
        output_folder(target, what, "must be a folder when several inputs are given")
        paths = [target / f"{stem}{suffix}" for stem in stems]
    else:
        paths = [target]
    sources = {resolved(p, what) for p in inputs}
    for path in paths:
        check_destination(path, sources, what, devices=True)
    return paths


def check_destination(path: Path, inputs: set[Path], what: str, devices: bool) -> None:
    """Refuse one output path that is an input, a folder, in an unwritable folder, or neither a regular file nor
    (with `devices`) a character device such as /dev/null; a missing folder is created (as every command creates
    its output folders)."""
    folder = path.parent
    if not folder.is_dir():  # created as every command creates its output folders
        output_folder(folder, what, "is a file, so it cannot hold the output")
    if not os.access(folder, os.W_OK):
        raise fail(f"{what}: the folder {folder} is not writable")
    if resolved(path, what) in inputs:
        raise fail(f"{what}: {path} is an input; refusing to overwrite it")
    if path.is_dir():
        if zarr_folder(path):
            return  # an OME-Zarr image written before: replaced once the new one is complete
        raise fail(f"{what}: {path} is a folder; give a file name")
    if path.exists() and not path.is_file() and not (devices and path.is_char_device()):
        raise fail(f"{what}: {path} is not a regular file" + (" or a device like /dev/null (a pipe?)" if devices
                                                               else "") + "; refusing it")


def write_json(document: dict, path: str | os.PathLike, indent: int = 1) -> None:
    """Write one JSON document atomically (a temporary file beside it, then moved into place)."""
    text = json.dumps(document, indent=indent) + "\n"
    atomic_write(path, lambda fh: fh.write(text.encode("utf-8")))


class StagedOutputs:
    """The outputs of one run, written to hidden temporaries beside their targets and moved into place together at
    the end: a failed run leaves the previous outputs as they were and no temporary behind, never a new mask beside
    old probabilities.

    Use::

        with StagedOutputs() as out:
            write_labels(labels, out.path(mask), image)    # the writer gets a temporary of the same suffix
            write_map(proba, out.path(proba_path), image)
        # all moved into place here; on an exception (or Ctrl-C) every temporary is removed instead
    """

    def __init__(self) -> None:
        self._staged: list[tuple[Path, Path]] = []

    def path(self, target: str | os.PathLike) -> Path:
        """A hidden temporary in `target`'s folder, with `target`'s suffixes (writers choose formats by them); a
        character device such as /dev/null is written as it is (it must never be replaced by a file)."""
        target = Path(target)
        if target.is_char_device():
            return target
        suffixes = "".join(target.suffixes[-2:]) if target.name.lower().endswith(".nii.gz") else target.suffix
        temp = target.with_name(f".{target.name}.{os.getpid()}.{len(self._staged)}.tmp{suffixes}")
        self._staged.append((temp, target))
        return temp

    def __enter__(self) -> StagedOutputs:
        return self

    def __exit__(self, kind, value, traceback) -> None:
        if kind is None:
            for temp, target in self._staged:
                if temp.is_dir():
                    replace_folder(temp, target)
                elif temp.exists():
                    os.replace(temp, target)
            return
        for temp, _ in self._staged:
            if temp.is_dir():
                shutil.rmtree(temp, ignore_errors=True)
            else:
                temp.unlink(missing_ok=True)


def zarr_folder(path: Path) -> bool:
    """Whether `path` is a folder named `*.zarr` with Zarr metadata at its top (an OME-Zarr image)."""
    from imageforest.imaging.ome_zarr import is_zarr_path

    return (is_zarr_path(path) and path.is_dir()
            and any((path / name).is_file() for name in ("zarr.json", ".zattrs", ".zgroup")))


def replace_folder(new: Path, target: Path) -> None:
    """Move the folder `new` to `target`; an existing `target` (a folder output of an earlier run) is moved aside
    first and removed only once `new` is in place."""
    if not target.exists():
        os.rename(new, target)
        return
    aside = target.with_name(f".{target.name}.{os.getpid()}.old")
    os.rename(target, aside)
    try:
        os.rename(new, target)
    except BaseException:
        os.rename(aside, target)
        raise
    if aside.is_dir():
        shutil.rmtree(aside, ignore_errors=True)
    else:
        aside.unlink(missing_ok=True)


def check_outputs(outputs: dict[str, Path | None], inputs: list[Path]) -> None:
    """Every named output (option -> path, None when not asked for) may be written as a regular file without
    touching an input, and no two share a file; checked before any work."""
    sources = {resolved(p, "input") for p in inputs}
    seen: dict[Path, str] = {}
    for flag, path in outputs.items():
        if path is None:
            continue
        check_destination(path, sources, flag, devices=False)
        place = resolved(path, flag)
        if place in seen:
            raise fail(f"{flag}: {path} is also given to {seen[place]}")
        seen[place] = flag
