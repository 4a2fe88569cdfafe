"""The detection commands, registered by the `imageforest` command on first use.

    imageforest detect IMAGE [IMAGE ...] -o OUT [--model horses|cars|M.npz] [--overlay PNG] [--threshold S]
    imageforest train-detector DATA -o MODEL [--variant hough|adhf] [--viewpoint-bins K] [--window-views K]
        [--trees T] ...
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from imageforest.app_commands import check_batch_inputs, check_planned_outputs, check_training_options, run_batch
from imageforest.apps.detect.datasets import IMAGE_SUFFIXES
from imageforest.apps.detect.recipe import CROPS_RECIPE, RECIPE  # plain dicts: the flags' defaults
from imageforest.cli import fail
from imageforest.exceptions import ImageForestError
from imageforest.outputs import StagedOutputs, output_folder, output_stems, plan_outputs


@click.group()
def commands() -> None:
    """Object detection with Hough forests."""


@commands.command()
@click.argument("images", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("-o", "--out", type=click.Path(path_type=Path), required=True,
              help="Folder for <name>.json per image (created when missing).")
@click.option("--model", "model_path", default=None,
              help="Detector model: a .npz file, or a shipped one by name, 'horses' (the default) or 'cars'.")
@click.option("--overlay", type=click.Path(path_type=Path), default=None,
              help="PNG of the image with its boxes beside the Hough image (a folder for several images).")
@click.option("--threshold", type=float, default=None,
              help="Least score of a reported detection (default: the model's own).")
@click.option("--threads", type=int, default=None, help="Threads for the forest (default: all cores).")
def detect(images: tuple[Path, ...], out: Path, model_path: str | None, overlay: Path | None,
           threshold: float | None, threads: int | None) -> None:
    """Detect objects in colour IMAGES (JPEG, PNG, ...): boxes [x0, y0, x1, y1] in each image's pixels."""
    inputs = list(images)
    check_batch_inputs(inputs, IMAGE_SUFFIXES, "images are", overlay, threads)
    if threshold is not None and not abs(threshold) < float("inf"):
        raise fail(f"--threshold must be a finite number, got {threshold}")
    output_folder(out, "--out")
    stems = output_stems(inputs, IMAGE_SUFFIXES)
    plans = {"json": [out / f"{s}.json" for s in stems],
             "overlay": plan_outputs(overlay, inputs, stems, "_overlay.png", "--overlay")}
    check_planned_outputs(plans, inputs)
    try:
        from imageforest.apps.detect.api import detect_file, load_detector
        from imageforest.apps.detect.report import write_json, write_overlay

        model = load_detector(model_path)
        if threads is not None:
            model.n_jobs = threads
    except (ImageForestError, OSError) as exc:
        raise fail(str(exc)) from None

    def process(k: int, path: Path) -> tuple[str, Path]:
        document, result, rgb = detect_file(path, model, threshold, keep_hough=plans["overlay"][k] is not None)
        with StagedOutputs() as out:  # an image's outputs move into place together, or none does
            write_json(document, out.path(plans["json"][k]))
            if plans["overlay"][k] is not None:
                write_overlay(rgb, result, out.path(plans["overlay"][k]))
        best = f", best score {result.detections[0].score:.2f}" if result.detections else ""
        return f"{len(result.detections)} detection(s){best}", plans["json"][k]

    run_batch(inputs, process)


def _object_sizes(ctx, param, value: str | None) -> tuple[float, float] | None:
    """--object-sizes LO,HI as two floats (a ClickException, exit 1, when it is not that)."""
    if value is None:
        return None
    try:
        lo, hi = (float(v) for v in value.split(","))
    except ValueError:
        raise fail(f"--object-sizes: give two numbers LO,HI (object sizes relative to the image), got {value}"
                   ) from None
    if not 0 < lo <= hi <= 10:
        raise fail(f"--object-sizes: LO,HI must be increasing positive numbers up to 10, got {value}")
    return lo, hi


@commands.command("train-detector")
@click.argument("data_dir", type=click.Path(path_type=Path))
@click.option("-o", "--out", type=click.Path(path_type=Path), required=True, help="Model file to write (.npz).")
@click.option("--variant", type=click.Choice(["hough", "adhf"]), default=None,
              help=f"Hough forest, or alternating decision Hough forest (weights from a global loss) "
                   f"[default: {RECIPE['variant']}].")
@click.option("--loss", type=click.Choice(["logit", "exponential", "savage", "tangent", "hinge"]),
              default=None, help=f"Global loss of --variant adhf [default: {RECIPE['loss']}].")
@click.option("--trees", type=int, default=None, help=f"Trees T [default: {RECIPE['n_trees']}].")
@click.option("--depth", type=int, default=None, help=f"Maximum depth D [default: {RECIPE['max_depth']}].")
@click.option("--patches", type=int, default=None,
              help=f"Patches per image, half inside the boxes, half outside [default: {RECIPE['patches_per_image']}"
                   f", {CROPS_RECIPE['patches_per_image']} for crops].")
@click.option("--candidates", type=int, default=None,
              help=f"Pixel-pair tests per node (rho) [default: {RECIPE['n_candidates']}].")
@click.option("--viewpoint-bins", "viewpoint_bins", type=int, default=None,
              help="With viewpoints in the data: 0 learns the azimuth as a unit vector, K >= 2 as K azimuth classes "
                   f"[default: {CROPS_RECIPE['viewpoint_bins']}].")
@click.option("--window-views", "window_views", type=int, default=None,
              help="With viewpoints in the data: K >= 2 azimuth classes of the window classifier that weighs each "
                   f"detection's votes, 0 for none [default: {RECIPE['window_views']}].")
@click.option("--flip/--no-flip", default=None,
              help="Also train on the images mirrored left to right [default: on for crops, off otherwise].")
@click.option("--object-sizes", "object_sizes", callback=_object_sizes, default=None, metavar="LO,HI",
              help="Object sizes detect searches, relative to the image's geometric size [default: the training "
                   f"images' range; {','.join(str(v) for v in CROPS_RECIPE['object_sizes'])} for crops].")
@click.option("--negatives", type=click.Path(path_type=Path), default=None,
              help="Folder of background images without the object (default for crops: their negatives/).")
@click.option("--images", type=int, default=None, help="Train on the first N images (default: all).")
@click.option("--seed", type=int, default=RECIPE["random_state"], show_default=True,
              help="Random seed (fixes the model bytes).")
@click.option("--name", default="custom", show_default=True, help="Model name recorded in its card.")
@click.option("--threads", type=int, default=None, help="Threads (default: all cores).")
def train_detector_command(data_dir: Path, out: Path, variant: str | None, loss: str | None, trees: int | None,
                           depth: int | None, patches: int | None, candidates: int | None,
                           viewpoint_bins: int | None, window_views: int | None, flip: bool | None,
                           object_sizes: tuple[float, float] | None,
                           negatives: Path | None, images: int | None, seed: int, name: str,
                           threads: int | None) -> None:
    """Train a detector on DATA: photographs with boxes.json (the layout of the Weizmann horses, or name ->
    boxes), or cropped views with viewpoints (crops/, poses_K_bins.txt, negatives/: the Weizmann cars)."""
    check_training_options(out, tuple((flag, value, low) for flag, value, low in (
        ("--trees", trees, 1), ("--depth", depth, 1), ("--candidates", candidates, 1), ("--patches", patches, 2))
        if value is not None))
    if viewpoint_bins is not None and (viewpoint_bins < 0 or viewpoint_bins == 1 or viewpoint_bins > 72):
        raise fail(f"--viewpoint-bins must be 0 (azimuth as a unit vector) or 2 to 72 classes, got {viewpoint_bins}")
    if window_views is not None and (window_views < 0 or window_views == 1 or window_views > 72):
        raise fail(f"--window-views must be 0 (no window classifier) or 2 to 72 classes, got {window_views}")
    try:
        from imageforest.apps.detect.training import train_detector

        model, summary = train_detector(data_dir, negatives_dir=negatives, n_trees=trees, max_depth=depth,
                                        n_candidates=candidates, patches_per_image=patches, variant=variant,
                                        loss=loss, viewpoint_bins=viewpoint_bins, window_views=window_views,
                                        flip=flip,
                                        object_sizes=object_sizes, require_viewpoints=viewpoint_bins is not None,
                                        n_images=images, random_state=seed,
                                        n_jobs=threads, progress=lambda msg: click.echo(msg, err=True))
        model.model_card_ = {"name": name, "trained_on": str(data_dir), **summary,
                             "recipe": summary["settings"]}
        model.save(out)
    except (ImageForestError, OSError) as exc:
        raise fail(str(exc)) from None
    click.echo(json.dumps({"model": str(out), **summary}), err=True)
