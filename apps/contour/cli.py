"""The contourer's commands, registered by the `imageforest` command on first use.

    imageforest contour SCAN [SCAN ...] [-o OUT] [--model M] [--localizer L] [--organs NAME,...] [--json J]
        [--probabilities DIR] [--split] [--overlay PNG] [--threads N]
    imageforest train-contour DATA_DIR -o MODEL.npz [--organs NAME,...] [--cases N] [--trees T] [--depth D]
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click
import numpy as np

from imageforest.apps.contour.recipe import RECIPE
from imageforest.apps.localize.cli import split_names
from imageforest.cli import fail as _fail
from imageforest.exceptions import ImageForestError
from imageforest.outputs import StagedOutputs, check_destination, output_stems, plan_outputs

SCAN_SUFFIXES = (".nii.gz", ".nii", ".nrrd", ".nhdr", ".mha", ".mhd")
LABEL_SUFFIXES = (".nii.gz", ".nii", ".nrrd", ".mha")


@click.command()
@click.argument("scans", nargs=-1, required=True)
@click.option("-o", "--out", type=click.Path(path_type=Path), default=None,
              help="Label map (NIfTI, label k = the model's k-th organ) on the scan's grid; a folder for several "
                   "scans (<name>.nii.gz) or with --split (<organ>.nii.gz per organ).")
@click.option("--model", "model_path", type=click.Path(path_type=Path), default=None,
              help="Contour model (.npz); default: the shipped head-and-neck model.")
@click.option("--localizer", "localizer_path", type=click.Path(path_type=Path), default=None,
              help="Localizer model giving the organs' boxes; default: the shipped one.")
@click.option("--organs", default=None, help="Comma-separated organs to report and write (default: all).")
@click.option("--json", "json_out", type=click.Path(path_type=Path), default=None,
              help="JSON report: a file for one scan, a folder for several (default: stdout).")
@click.option("--probabilities", type=click.Path(path_type=Path), default=None,
              help="Folder for per-organ posterior volumes (float32 NIfTI, <organ>.nii.gz; per scan "
                   "<name>/<organ>.nii.gz for several).")
@click.option("--split", is_flag=True, help="Write one mask per organ into the folder OUT instead of a label map.")
@click.option("--overlay", type=click.Path(path_type=Path), default=None,
              help="PNG with axial, coronal and sagittal planes through each organ and its contour (a folder for "
                   "several scans).")
@click.option("--threads", type=int, default=None, help="Threads for the forests (default: all cores).")
def contour(scans: tuple[str, ...], out: Path | None, model_path: Path | None, localizer_path: Path | None,
            organs: str | None, json_out: Path | None, probabilities: Path | None, split: bool, overlay: Path | None,
            threads: int | None) -> None:
    """Contour organs in CT SCANs (NIfTI, NRRD, MHA or a DICOM folder): a label map and a JSON report per scan.

    The localizer finds each organ's box; an entangled forest labels the voxels inside. An organ the localizer
    calls absent gets no voxels."""
    t_start = time.perf_counter()
    from imageforest.apps.localize.batch import expand_scan_arguments

    try:
        scan_list = expand_scan_arguments(scans)
    except ImageForestError as exc:
        raise _fail(str(exc)) from None
    if threads is not None and threads < 1:
        raise _fail(f"--threads must be at least 1, got {threads}")
    many = len(scan_list) > 1
    if out is not None and not many and not split and not out.name.lower().endswith(LABEL_SUFFIXES):
        raise _fail(f"-o/--out: {out}: write the label map as one of {', '.join(LABEL_SUFFIXES)} (or give --split "
                    "and a folder)")
    if split and out is None:
        raise _fail("--split writes one mask per organ into a folder: give -o OUT")
    if overlay is not None and not many and overlay.suffix.lower() != ".png":
        raise _fail(f"--overlay: {overlay}: the overlay is a .png")
    stems = output_stems(scan_list, SCAN_SUFFIXES)
    plans = {"json": plan_outputs(json_out, scan_list, stems, ".json", "--json"),
             "overlay": plan_outputs(overlay, scan_list, stems, "_overlay.png", "--overlay"),
             "out": ([None] * len(scan_list) if out is None else
                     _folders(out, stems, many, "-o/--out") if split else
                     plan_outputs(out, scan_list, stems, ".nii.gz", "-o/--out")),
             "probabilities": ([None] * len(scan_list) if probabilities is None
                               else _folders(probabilities, stems, many, "--probabilities"))}
    try:
        from imageforest.apps.contour.api import check_organs, contour_file, load_contourer
        from imageforest.apps.localize.api import load_localizer

        model = load_contourer(model_path)
        localizer = load_localizer(localizer_path)
        if threads is not None:
            model.n_jobs = localizer.n_jobs = threads
        wanted = check_organs(model, split_names(organs))
    except (ImageForestError, OSError) as exc:
        raise _fail(str(exc)) from None
    t_model = time.perf_counter() - t_start
    documents, failures = [], 0
    for k, scan in enumerate(scan_list):
        if len(scan_list) > 3:
            click.echo(f"[{k + 1}/{len(scan_list)}] {scan}", err=True)
        try:
            document, contours, image = contour_file(scan, model, localizer, wanted)
            if not documents:
                document["timing_s"]["model_load"] = round(t_model, 4)
            _write(document, contours, image, model, wanted, {key: plan[k] for key, plan in plans.items()}, split,
                   scan.name)
        except (ImageForestError, OSError) as exc:
            failures += 1
            click.echo(f"Error: {str(exc).strip().splitlines()[0]}", err=True)
            continue
        except Exception as exc:
            failures += 1
            click.echo(f"Error: {scan}: internal error ({type(exc).__name__}: {str(exc).strip()[:200]})", err=True)
            continue
        documents.append(document)
        click.echo(table(document), err=True)
    if json_out is None and documents:
        click.echo(json.dumps(documents[0] if not many else documents, indent=2))
    if failures:
        sys.exit(1)


def _folders(target: Path, stems: list[str], many: bool, what: str) -> list[Path]:
    """One folder per scan: `target` itself for one scan, target/<name> for several (created when written)."""
    from imageforest.outputs import output_folder

    output_folder(target, what, "is a file; give a folder")
    return [target / stem for stem in stems] if many else [target]


def _write(document: dict, contours, image, model, wanted, paths: dict, split: bool, title: str) -> None:
    """A scan's outputs, moved into place together (or none)."""
    from imageforest.imaging.io import Image, write_image
    from imageforest.outputs import write_json

    labels = contours.labels
    chosen = [k for k, name in enumerate(model.organs) if not wanted or name in wanted]
    if wanted:
        keep = labels.array.copy()
        keep[~np.isin(keep, [k + 1 for k in chosen])] = 0
        labels = Image(keep, labels.spacing, labels.origin, labels.direction, source=labels.source)
    with StagedOutputs() as staged:
        if paths["json"] is not None:
            write_json(document, staged.path(paths["json"]), indent=2)
        if paths["out"] is not None:
            if split:
                paths["out"].mkdir(parents=True, exist_ok=True)
                for k in chosen:
                    mask = Image((labels.array == k + 1).astype("uint8"), labels.spacing, labels.origin,
                                 labels.direction)
                    write_image(mask, staged.path(paths["out"] / f"{model.organs[k]}.nii.gz"))
            else:
                write_image(labels, staged.path(paths["out"]))
        if paths["probabilities"] is not None and contours.posterior is not None:
            paths["probabilities"].mkdir(parents=True, exist_ok=True)
            for k in chosen:
                prob = Image(contours.posterior[k].astype("float32"), labels.spacing, labels.origin,
                             labels.direction)
                write_image(prob, staged.path(paths["probabilities"] / f"{model.organs[k]}.nii.gz"))
        if paths["overlay"] is not None:
            from imageforest.apps.contour.overlay import write_overlay

            write_overlay(contours, model.organs, staged.path(paths["overlay"]), image, title=title, organs=wanted)


def table(document: dict) -> str:
    """A readable summary of one JSON document."""
    lines = [document["scan"], f"  {'organ':<14} {'present':>7} {'volume (mL)':>11} {'mean p':>7}"]
    for row in document["organs"]:
        p = "" if row["mean_posterior"] is None else f"{row['mean_posterior']:.2f}"
        lines.append(f"  {row['name']:<14} {'yes' if row['present'] else 'no':>7} {row['volume_ml']:>11.1f} {p:>7}")
    lines.append(f"  {document['timing_s']['total']:.2f} s")
    return "\n".join(lines)


@click.command("train-contour")
@click.argument("data_dir", type=click.Path(path_type=Path))
@click.option("-o", "--out", type=click.Path(path_type=Path), required=True, help="Model file to write (.npz).")
@click.option("--organs", default=None,
              help="Comma-separated organ names for label values 1, 2, ... (default: boxes.json's organ_labels).")
@click.option("--cases", "n_cases", type=int, default=None, help="Train on the first N cases (by name).")
@click.option("--trees", type=int, default=RECIPE["n_trees"], show_default=True, help="Trees T.")
@click.option("--depth", type=int, default=RECIPE["max_depth"], show_default=True, help="Maximum depth D.")
@click.option("--seed", type=int, default=0, show_default=True, help="Random seed (fixes the model bytes).")
@click.option("--name", default="custom", show_default=True, help="Model name recorded in its model card.")
def train_contour(data_dir: Path, out: Path, organs: str | None, n_cases: int | None, trees: int, depth: int,
                  seed: int, name: str) -> None:
    """Train a contour model on DATA_DIR: `<case>_ct.nii.gz` scans with `<case>_organs.nii.gz` label maps
    (label k = the k-th organ; openkbp-hn layout). Settings the flags do not name are the default model's
    (`apps/contour/recipe.py`); entangled depths beyond --depth are dropped."""
    check_destination(out, set(), "--out", devices=False)
    try:
        from imageforest.apps.contour.training import train_from_folder

        depths = tuple(d for d in RECIPE["entangled_depths"] if d < depth)
        params = {**RECIPE, "n_trees": trees, "max_depth": depth, "entangled_depths": depths, "random_state": seed}
        model = train_from_folder(data_dir, split_names(organs), name=name, n_cases=n_cases,
                                  progress=lambda msg: click.echo(msg, err=True), **params)
        model.save(out)
    except (ImageForestError, OSError) as exc:
        raise _fail(str(exc)) from None
    click.echo(f"wrote {out} ({len(model.organs)} organs: {', '.join(model.organs)})", err=True)
