"""The segmentation command, registered by the `imageforest` command on first use.

    imageforest segment IMAGE --scribbles SCRIBBLES -o MASK [--overlay PNG] [--proba P] [--uncertainty U]
                       [--save-model M] [--threads N]
    imageforest segment IMAGE --model M -o MASK [--overlay PNG] [--proba P] [--uncertainty U] [--threads N]
    imageforest segment IMAGE... --model M -o OUT/ [--overlay DIR] [--proba DIR] [--uncertainty DIR] [--json DIR]
                       [--workers N | --scheduler ADDR] [--resume]
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
@click.argument("images", nargs=-1, required=True)
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
@click.option("--colour-weight", type=float, default=None,
              help="Share of the colour models re-estimated from the cut (GrabCut's iterations), 0: none [default: "
                   f"{PICTURE['colour_weight']:g} for pictures, {VOLUME['colour_weight']:g} for volumes].")
@click.option("--extent-margin", type=float, default=None,
              help="In a volume, how far a class painted on separate slices reaches beyond its outermost ones, in "
                   "multiples of their spacing; inf: no bound [default: "
                   f"{VOLUME['extent_margin']:g}; pictures: none].")
@click.option("--slice-path-scale", type=float, default=None,
              help="In a volume painted on separate slices, the share of a geodesic step across them that counts "
                   f"(1: none discounted) [default: {VOLUME['slice_path_scale']:g}].")
@click.option("--stroke-regions", is_flag=True,
              help="Keep only the regions of each class that hold one of its strokes (the background, the largest "
                   "scribbled number, keeps all of its own): for one object per class. Without it a class also "
                   "takes unpainted regions that look like it (every cell of a kind from strokes on a few).")
@click.option("--trees", type=int, default=FOREST["n_trees"], show_default=True, help="T, trees of the forest.")
@click.option("--depth", type=int, default=FOREST["max_depth"], show_default=True, help="D, the trees' depth limit.")
@click.option("--init", "init_path", type=click.Path(path_type=Path), default=None,
              help="Start from an automatic segmentation on the image's grid (e.g. `imageforest contour`'s label map, "
                   "0 = background): the scribbled organs are corrected, the others kept; the mask keeps its "
                   "numbering.")
@click.option("--background", type=int, default=None,
              help="With --init: the scribble number painted for background (default: the largest scribbled "
                   "number the init does not use).")
@click.option("--json", "json_dir", type=click.Path(path_type=Path), default=None,
              help="A batch's JSON documents and report (a folder; default: OUT).")
@click.option("--workers", type=int, default=None, help="Segment a batch on a local Dask cluster of N workers.")
@click.option("--scheduler", default=None, metavar="ADDRESS",
              help="Segment a batch on the Dask cluster at ADDRESS, e.g. tcp://host:8786.")
@click.option("--resume", is_flag=True, help="Skip images of a batch whose outputs in OUT are complete.")
def segment(images: tuple[str, ...], scribbles_path: Path | None, model_path: Path | None, mask_path: Path | None,
            mask_alias: Path | None, overlay_path: Path | None, threads: int | None, proba_path: Path | None,
            uncertainty_path: Path | None, save_model_path: Path | None, smoothness: float | None,
            geodesic_weight: float | None, colour_weight: float | None, extent_margin: float | None,
            slice_path_scale: float | None, stroke_regions: bool, trees: int, depth: int, init_path: Path | None,
            background: int | None, json_dir: Path | None, workers: int | None, scheduler: str | None,
            resume: bool) -> None:
    """Segment IMAGE from scribbles (or with a saved model) into a label mask.

    With a saved model (--model) IMAGE may be several images, @LIST (a file listing one per line) or a quoted
    glob ('pictures/*.png'): a batch. OUT and the other outputs are then folders, each image's files named after
    it (<name>.png for a picture's mask, <name>.nii.gz for a volume's, <name>.ome.zarr for an OME-Zarr image's,
    <name>.json), the model is loaded once, an image that fails is one line and the batch goes on;
    --workers/--scheduler run it on Dask, --resume skips finished images, and OUT/batch_report.json reports
    every image."""
    if mask_path is not None and mask_alias is not None:
        raise _fail("give the mask once: -o/--out (--output is its older spelling)")
    mask_path = mask_path or mask_alias
    if mask_path is None:
        raise _fail("Missing option '-o' / '--out' (the mask to write).")
    if threads is not None and threads < 1:
        raise _fail(f"--threads must be at least 1, got {threads}")
    try:
        from imageforest.batches import expand_scan_arguments

        image_list = expand_scan_arguments(images)
    except ImageForestError as exc:
        raise _fail(str(exc)) from None
    if extent_margin is not None and (extent_margin != extent_margin or extent_margin < 0):
        raise _fail(f"--extent-margin must be a number >= 0 (inf: no bound), got {extent_margin}")
    if init_path is None and background is not None:
        raise _fail("--background names the background strokes' number for --init")
    if len(image_list) > 1 or workers is not None or scheduler is not None or resume:
        if init_path is not None:
            raise _fail("--init belongs to one image and its scribbles, not to a batch")
        for flag, given in (("--extent-margin", extent_margin), ("--slice-path-scale", slice_path_scale),
                            ("--stroke-regions", stroke_regions or None)):
            if given is not None:
                raise _fail(f"{flag} belongs to scribbles; a batch applies the saved model as it is")
        _segment_batch(image_list, model_path, scribbles_path, save_model_path, smoothness, geodesic_weight,
                       colour_weight, mask_path, proba_path, uncertainty_path, overlay_path, json_dir, threads,
                       workers, scheduler, resume)
        return
    if json_dir is not None:
        raise _fail("--json names a batch's folder of documents; give several images or --resume")
    image = image_list[0]
    if (scribbles_path is None) == (model_path is None):
        raise _fail("give either --scribbles (train on this image) or --model (apply a saved model)")
    if model_path is not None and stroke_regions:
        raise _fail("--stroke-regions belongs to scribbles; a saved model (--model) is applied as it is")
    if model_path is not None and save_model_path is not None:
        raise _fail("--save-model needs --scribbles (a model given with --model is already saved)")
    if init_path is not None and scribbles_path is None:
        raise _fail("--init is corrected with scribbles: give --scribbles")
    inputs = [p for p in (image, scribbles_path, model_path, init_path) if p is not None]
    try:
        from imageforest.apps.segment.image_files import check_output_suffixes
        from imageforest.imaging.ome_zarr import is_zarr_path
        from imageforest.imaging.pictures import regular_file

        for path, what in ((image, "image"), (scribbles_path, "scribbles"), (model_path, "model"),
                           (init_path, "init")):
            # a DICOM series folder is an image; an OME-Zarr folder may be the image, the scribbles or the init
            folder = path is not None and path.is_dir() and (what == "image" or is_zarr_path(path))
            if path is not None and not folder:
                regular_file(path, what)
        check_output_suffixes(image, mask_path, proba_path, uncertainty_path, overlay_path, save_model_path)
    except ImageForestError as exc:
        raise _fail(str(exc)) from None
    check_outputs({"-o": mask_path, "--proba": proba_path, "--uncertainty": uncertainty_path,
                   "--overlay": overlay_path, "--save-model": save_model_path}, inputs)
    try:
        from imageforest.apps.segment.api import segment_file
        from imageforest.apps.segment.image_files import staged_labels, write_labels, write_map, write_overlay
        from imageforest.estimators.base import numba_threads

        t0 = time.perf_counter()
        maps = proba_path is not None or uncertainty_path is not None
        # a large picture's labels for an OME-Zarr mask stay on disk, tile by tile, until they are written
        with numba_threads(threads), staged_labels(mask_path if model_path else None, overlay_path, maps) as staging:
            result, picture, model = segment_file(image, scribbles_path, model_path, n_trees=trees, max_depth=depth,
                                                  smoothness=smoothness, geodesic_weight=geodesic_weight,
                                                  colour_weight=colour_weight, extent_margin=extent_margin,
                                                  slice_path_scale=slice_path_scale,
                                                  stroke_regions=True if stroke_regions else None,
                                                  keep_model=save_model_path is not None, init=init_path,
                                                  background=background, maps=maps, labels_to=staging)
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

    counts = ", ".join(f"{int(c)}: {int(n)} px" for c, n in zip(result.classes, result.pixel_counts(), strict=True)
                       if n)
    click.echo(f"{mask_path}: {counts} ({time.perf_counter() - t0:.2f} s)", err=True)


def _segment_batch(images: list[Path], model_path: Path | None, scribbles_path: Path | None,
                   save_model_path: Path | None, smoothness: float | None, geodesic_weight: float | None,
                   colour_weight: float | None, out: Path, proba: Path | None, uncertainty: Path | None,
                   overlay: Path | None, json_dir: Path | None,
                   threads: int | None, workers: int | None, scheduler: str | None, resume: bool) -> None:
    """`segment` over a batch with one saved model: in this process or on a Dask cluster; exit code 1 when any
    image failed."""
    from imageforest.batch_command import check_cluster_options, run_batch_command
    from imageforest.imaging.pictures import regular_file

    if model_path is None or scribbles_path is not None:
        raise _fail("a batch applies a saved model: give --model (scribbles belong to one image)")
    for flag, given in (("--save-model", save_model_path), ("--smoothness", smoothness),
                        ("--geodesic-weight", geodesic_weight), ("--colour-weight", colour_weight)):
        if given is not None:
            raise _fail(f"{flag} trains on scribbles; a batch applies the saved model as it is")
    check_cluster_options(workers, scheduler)
    try:
        regular_file(model_path, "model")
    except ImageForestError as exc:
        raise _fail(str(exc)) from None
    from imageforest.outputs import output_folder

    for flag, folder in (("-o", out), ("--proba", proba), ("--uncertainty", uncertainty), ("--overlay", overlay),
                         ("--json", json_dir)):
        if folder is not None:
            output_folder(folder, flag, "must be a folder for a batch (one output per image)")
    from imageforest.apps.segment.batch import SegmentJob, plan_segment_batch

    model = str(model_path.resolve())
    absolute = lambda p: None if p is None else p.absolute()  # noqa: E731
    report_dir = absolute(json_dir) or out.absolute()
    run_batch_command(lambda n: SegmentJob(model, n),
                      lambda: plan_segment_batch([p.absolute() for p in images], report_dir, out.absolute(),
                                                 absolute(proba), absolute(uncertainty), absolute(overlay)),
                      report_dir, workers=workers, scheduler=scheduler, threads=threads, resume=resume,
                      verb="segmented", model_name=model, preload=("imageforest.apps.segment.api",))


if __name__ == "__main__":
    sys.exit(commands())
