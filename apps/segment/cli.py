"""The segmentation command, registered by the `imageforest` command on first use.

    imageforest segment IMAGE --scribbles SCRIBBLES -o MASK [--overlay PNG] [--proba P] [--uncertainty U]
                       [--save-model M] [--threads N]
    imageforest segment IMAGE --model M -o MASK [--overlay PNG] [--proba P] [--uncertainty U] [--threads N]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from imageforest.apps.segment.recipe import FOREST, PICTURE, VOLUME  # a plain dict: the flags' defaults
from imageforest.cli import fail as _fail
from imageforest.exceptions import ImageForestError
from imageforest.outputs import StagedOutputs, check_outputs


@click.group()
def commands() -> None:
    """The segmentation application's commands."""


@commands.command("segment")
@click.argument("image", type=click.Path(path_type=Path))
@click.option("--scribbles", "scribbles_path", type=click.Path(path_type=Path),
              help="Label image on the image's grid: 0 = not labelled, 1..K = classes (palette/grey PNG, TIFF, or "
                   "a volume).")
@click.option("--model", "model_path", type=click.Path(path_type=Path),
              help="Apply a saved segmentation model instead of scribbles.")
@click.option("-o", "--out", "mask_path", type=click.Path(path_type=Path), default=None,
              help="Mask: per pixel the scribble number it was assigned (a palette PNG, TIFF or BMP for pictures; "
                   "NIfTI/NRRD/MHA for volumes).")
@click.option("--output", "mask_alias", type=click.Path(path_type=Path), default=None, hidden=True)
@click.option("--overlay", "overlay_path", type=click.Path(path_type=Path), default=None,
              help="PNG of the segmentation over the image (for a volume: its three planes).")
@click.option("--threads", type=int, default=None, help="Threads for the forest (default: all cores).")
@click.option("--proba", "proba_path", type=click.Path(path_type=Path),
              help="Per-class probabilities (.npy, .tif; a volume format for volumes).")
@click.option("--uncertainty", "uncertainty_path", type=click.Path(path_type=Path),
              help="Posterior entropy per pixel (.png scaled, .tif, .npy; a volume format for volumes).")
@click.option("--save-model", "save_model_path", type=click.Path(path_type=Path),
              help="Save the trained model (.npz) to apply to other images.")
@click.option("--smoothness", type=float, default=None,
              help=f"Graph-cut boundary weight, 0: none [default: {PICTURE['smoothness']:g} for pictures, "
                   f"{VOLUME['smoothness']:g} for volumes].")
@click.option("--geodesic-weight", type=float, default=None,
              help="Share of the geodesic transduction in the posterior, 0: the forest alone [default: "
                   f"{PICTURE['geodesic_weight']:g} for pictures, {VOLUME['geodesic_weight']:g} for volumes].")
@click.option("--trees", type=int, default=FOREST["n_trees"], show_default=True, help="T, trees of the forest.")
@click.option("--depth", type=int, default=FOREST["max_depth"], show_default=True, help="D, the trees' depth limit.")
def segment(image: Path, scribbles_path: Path | None, model_path: Path | None, mask_path: Path | None,
            mask_alias: Path | None, overlay_path: Path | None, threads: int | None, proba_path: Path | None,
            uncertainty_path: Path | None, save_model_path: Path | None, smoothness: float | None,
            geodesic_weight: float | None, trees: int, depth: int) -> None:
    """Segment IMAGE from scribbles (or with a saved model) into a label mask."""
    if mask_path is not None and mask_alias is not None:
        raise _fail("give the mask once: -o/--out (--output is its older spelling)")
    mask_path = mask_path or mask_alias
    if mask_path is None:
        raise _fail("Missing option '-o' / '--out' (the mask to write).")
    if threads is not None and threads < 1:
        raise _fail(f"--threads must be at least 1, got {threads}")
    if (scribbles_path is None) == (model_path is None):
        raise _fail("give either --scribbles (train on this image) or --model (apply a saved model)")
    if model_path is not None and save_model_path is not None:
        raise _fail("--save-model needs --scribbles (a model given with --model is already saved)")
    inputs = [p for p in (image, scribbles_path, model_path) if p is not None]
    try:
        from imageforest.apps.segment.image_files import check_output_suffixes
        from imageforest.imaging.pictures import regular_file

        for path, what in ((image, "image"), (scribbles_path, "scribbles"), (model_path, "model")):
            if path is not None and not (what == "image" and path.is_dir()):  # a DICOM folder is an image
                regular_file(path, what)
        check_output_suffixes(image, mask_path, proba_path, uncertainty_path, overlay_path, save_model_path)
    except ImageForestError as exc:
        raise _fail(str(exc)) from None
    check_outputs({"-o": mask_path, "--proba": proba_path, "--uncertainty": uncertainty_path,
                   "--overlay": overlay_path, "--save-model": save_model_path}, inputs)
    try:
        from imageforest.apps.segment.api import segment_file
        from imageforest.apps.segment.image_files import write_labels, write_map, write_overlay
        from imageforest.estimators.base import numba_threads

        t0 = time.perf_counter()
        with numba_threads(threads):
            result, picture, model = segment_file(image, scribbles_path, model_path, n_trees=trees, max_depth=depth,
                                                  smoothness=smoothness, geodesic_weight=geodesic_weight,
                                                  keep_model=save_model_path is not None)
        # every output of the run moves into place together, or none does
        with StagedOutputs() as out:
            write_labels(result.labels, out.path(mask_path), picture)
            if proba_path is not None:
                write_map(result.probabilities, out.path(proba_path), picture)
            if uncertainty_path is not None:
                write_map(result.uncertainty, out.path(uncertainty_path), picture)
            if overlay_path is not None:
                write_overlay(picture, result.labels, out.path(overlay_path))
            if model is not None:
                model.save(out.path(save_model_path))
    except ImageForestError as exc:
        raise _fail(str(exc)) from None
    except (OSError, ValueError) as exc:
        raise _fail(f"{type(exc).__name__}: {exc}") from None
    counts = ", ".join(f"{int(c)}: {int((result.labels == c).sum())} px" for c in result.classes)
    click.echo(f"{mask_path}: {counts} ({time.perf_counter() - t0:.2f} s)", err=True)


if __name__ == "__main__":
    sys.exit(commands())
