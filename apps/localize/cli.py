"""The localizer's commands, registered by the `imageforest` command on first use.

    imageforest localize SCAN [SCAN ...] [--model PATH] [--organs NAME,...] [-o OUT] [--overlay PNG] [--mask NIFTI]
    imageforest train-localizer DATA_DIR -o MODEL.npz [--organs NAME,...] [--trees T] [--depth D]
        [--refine-spacing MM] ...
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import click

from imageforest.apps.localize.recipe import PARAMETERS as RECIPE  # a plain dict: the flags' defaults
from imageforest.cli import fail as _fail
from imageforest.exceptions import ImageForestError


def _split_names(value: str | None) -> list[str] | None:
    if not value:
        return None
    names = [v.strip() for v in value.split(",") if v.strip()]
    return names or None


def _output_for(target: Path | None, scan: Path, many: bool, suffix: str) -> Path | None:
    """Where one scan's output goes: the path itself for one scan, `<target>/<scan stem><suffix>` for several."""
    if target is None:
        return None
    if not many:
        return target
    stem = scan.name
    for ext in (".nii.gz", ".nii", ".nrrd", ".mha", ".mhd"):
        if stem.lower().endswith(ext):
            stem = stem[: -len(ext)]
            break
    return target / f"{stem}{suffix}"


def _check_destination(path: Path | None, inputs: list[Path], many: bool, what: str) -> None:
    """Refuse outputs that would overwrite an input or land in a folder that does not exist or is not writable."""
    if path is None:
        return
    folder = path if many else path.parent
    if many and not folder.is_dir():
        raise _fail(f"{what}: {folder} must be an existing folder when several scans are given")
    if not folder.is_dir():
        raise _fail(f"{what}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise _fail(f"{what}: the folder {folder} is not writable")
    resolved = {p.resolve() for p in inputs}
    if not many and path.resolve() in resolved:
        raise _fail(f"{what}: {path} is an input scan; refusing to overwrite it")
    if not many and path.is_dir():
        raise _fail(f"{what}: {path} is a folder; give a file name")


@click.command()
@click.argument("scans", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--model", "model_path", type=click.Path(path_type=Path), default=None,
              help="Localizer model (.npz); default: the shipped head-and-neck model.")
@click.option("--organs", default=None, help="Comma-separated organs to report (default: all the model knows).")
@click.option("-o", "--out", type=click.Path(path_type=Path), default=None,
              help="JSON output: a file for one scan, a folder for several (default: stdout).")
@click.option("--overlay", type=click.Path(path_type=Path), default=None,
              help="PNG with slices through each organ and its box (a folder for several scans).")
@click.option("--mask", type=click.Path(path_type=Path), default=None,
              help="NIfTI label map of the boxes on the scan's grid (a folder for several scans).")
@click.option("--threads", type=int, default=None, help="Threads for the forest (default: all cores).")
def localize(scans: tuple[Path, ...], model_path: Path | None, organs: str | None, out: Path | None,
             overlay: Path | None, mask: Path | None, threads: int | None) -> None:
    """Find organs and their bounding boxes (LPS mm) in CT SCANs (NIfTI, NRRD, MHA or a DICOM folder)."""
    t_start = time.perf_counter()
    many = len(scans) > 1
    inputs = list(scans)
    for dest, what in ((out, "--out"), (overlay, "--overlay"), (mask, "--mask")):
        _check_destination(dest, inputs, many, what)
    try:
        from imageforest.apps.localize.api import check_organs, load_localizer, localize_file
        from imageforest.apps.localize.report import table, write_json, write_mask

        model = load_localizer(model_path)
        if threads is not None:
            model.n_jobs = threads
        wanted = check_organs(model, _split_names(organs))
    except (ImageForestError, OSError) as exc:
        raise _fail(str(exc)) from None
    t_model = time.perf_counter() - t_start
    documents = []
    failures = 0
    for scan in scans:
        try:
            document, result, image = localize_file(scan, model, wanted)
            if len(documents) == 0:
                document["timing_s"]["model_load"] = round(t_model, 4)
            json_path = _output_for(out, scan, many, ".json")
            if json_path is not None:
                write_json(document, json_path)
            png = _output_for(overlay, scan, many, "_overlay.png")
            if png is not None:
                from imageforest.apps.localize.overlay import write_overlay

                write_overlay(result, png, title=scan.name, organs=wanted)
            nii = _output_for(mask, scan, many, "_boxes.nii.gz")
            if nii is not None:
                write_mask(result, image, nii, wanted)
        except (ImageForestError, OSError) as exc:
            failures += 1
            click.echo(f"Error: {str(exc).strip().splitlines()[0]}", err=True)
            continue
        documents.append(document)
        click.echo(table(document), err=True)
    if out is None and documents:
        click.echo(json.dumps(documents[0] if not many else documents, indent=2))
    if failures:
        sys.exit(1)


@click.command("train-localizer")
@click.argument("data_dir", type=click.Path(path_type=Path))
@click.option("-o", "--out", type=click.Path(path_type=Path), required=True, help="Model file to write (.npz).")
@click.option("--organs", default=None,
              help="Comma-separated organ names for label values 1, 2, ... (default: boxes.json's organ_labels).")
@click.option("--trees", type=int, default=RECIPE["n_trees"], show_default=True, help="Trees T.")
@click.option("--depth", type=int, default=RECIPE["max_depth"], show_default=True, help="Maximum depth D.")
@click.option("--spacing", type=float, default=RECIPE["spacing_mm"], show_default=True,
              help="Working spacing (mm).")
@click.option("--points-per-scan", type=int, default=RECIPE["points_per_scan"], show_default=True,
              help="Voxels sampled per scan.")
@click.option("--refine-spacing", type=float, default=RECIPE["refine_spacing_mm"], show_default=True,
              help="Fine grid (mm) of the organ-centred stages; 0 trains the first stage only.")
@click.option("--seed", type=int, default=RECIPE["random_state"], show_default=True,
              help="Random seed (fixes the model bytes).")
@click.option("--name", default="custom", show_default=True, help="Model name recorded in its model card.")
def train_localizer(data_dir: Path, out: Path, organs: str | None, trees: int, depth: int, spacing: float,
                    points_per_scan: int, refine_spacing: float, seed: int, name: str) -> None:
    """Train a localizer on DATA_DIR: `<case>_ct.nii.gz` scans with `<case>_organs.nii.gz` label maps
    (label k = the k-th organ), or with boxes in a `boxes.json` (openkbp-hn layout). Settings the flags do not
    name are the default model's (`apps/localize/recipe.py`)."""
    _check_destination(out, [], False, "--out")
    try:
        from imageforest.apps.localize.training import train_from_folder

        params = {**RECIPE, "n_trees": trees, "max_depth": depth, "spacing_mm": spacing,
                  "points_per_scan": points_per_scan, "refine_spacing_mm": refine_spacing, "random_state": seed}
        model = train_from_folder(data_dir, _split_names(organs), name=name,
                                  progress=lambda msg: click.echo(msg, err=True), **params)
        model.save(out)
    except (ImageForestError, OSError) as exc:
        raise _fail(str(exc)) from None
    click.echo(f"wrote {out} ({len(model.organs)} organs: {', '.join(model.organs)})", err=True)


# The commands this application adds to `imageforest`.
commands = click.Group("localize-app", commands=[localize, train_localizer])
