"""The segmentation command, registered by the `imageforest` command on first use.

    imageforest segment IMAGE --scribbles SCRIBBLES -o MASK [--proba P] [--uncertainty U] [--save-model M]
    imageforest segment IMAGE --model M -o MASK [--proba P] [--uncertainty U]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from imageforest.apps.segment.recipe import FOREST, PICTURE, VOLUME  # a plain dict: the flags' defaults
from imageforest.cli import fail as _fail
from imageforest.exceptions import ImageForestError


def _check_outputs(outputs: dict[str, Path | None], inputs: list[Path]) -> None:
    """Refuse an output that is an input, a folder, or in a missing folder, and two outputs on one path."""
    seen: dict[Path, str] = {}
    read = {p.resolve() for p in inputs}
    for flag, path in outputs.items():
        if path is None:
            continue
        resolved = path.resolve()
        if resolved in read:
            raise _fail(f"{flag}: {path} is an input; refusing to overwrite it")
        if resolved in seen:
            raise _fail(f"{flag}: {path} is also given to {seen[resolved]}")
        if path.is_dir():
            raise _fail(f"{flag}: {path} is a folder; give a file name")
        if not path.parent.is_dir():
            raise _fail(f"{flag}: the folder {path.parent} does not exist")
        seen[resolved] = flag


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
@click.option("-o", "--output", "mask_path", type=click.Path(path_type=Path), required=True,
              help="Mask: per pixel the scribble number it was assigned (PNG/TIFF for pictures, NIfTI/NRRD/MHA for "
                   "volumes).")
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
def segment(image: Path, scribbles_path: Path | None, model_path: Path | None, mask_path: Path,
            proba_path: Path | None, uncertainty_path: Path | None, save_model_path: Path | None,
            smoothness: float | None, geodesic_weight: float | None, trees: int, depth: int) -> None:
    """Segment IMAGE from scribbles (or with a saved model) into a label mask."""
    if (scribbles_path is None) == (model_path is None):
        raise _fail("give either --scribbles (train on this image) or --model (apply a saved model)")
    if model_path is not None and save_model_path is not None:
        raise _fail("--save-model needs --scribbles (a model given with --model is already saved)")
    inputs = [p for p in (image, scribbles_path, model_path) if p is not None]
    _check_outputs({"-o": mask_path, "--proba": proba_path, "--uncertainty": uncertainty_path,
                    "--save-model": save_model_path}, inputs)
    try:
        from imageforest.apps.segment.api import segment_file
        from imageforest.apps.segment.image_files import write_labels, write_map

        t0 = time.perf_counter()
        result, picture, model = segment_file(image, scribbles_path, model_path, n_trees=trees, max_depth=depth,
                                              smoothness=smoothness, geodesic_weight=geodesic_weight,
                                              keep_model=save_model_path is not None)
        write_labels(result.labels, mask_path, picture)
        if proba_path is not None:
            write_map(result.probabilities, proba_path, picture)
        if uncertainty_path is not None:
            write_map(result.uncertainty, uncertainty_path, picture)
        if model is not None:
            model.save(save_model_path)
    except ImageForestError as exc:
        raise _fail(str(exc)) from None
    except (OSError, ValueError) as exc:
        raise _fail(f"{type(exc).__name__}: {exc}") from None
    counts = ", ".join(f"{int(c)}: {int((result.labels == c).sum())} px" for c in result.classes)
    click.echo(f"{mask_path}: {counts} ({time.perf_counter() - t0:.2f} s)", err=True)


if __name__ == "__main__":
    sys.exit(commands())
