"""The detection commands, registered by the `imageforest` command on first use.

    imageforest detect IMAGE [IMAGE ...] -o OUT [--model M] [--overlay PNG] [--threshold S]
    imageforest train-detector DATA -o MODEL [--variant hough|adhf] [--trees T] [--depth D] [--patches P] ...
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from imageforest.app_commands import check_batch_inputs, check_planned_outputs, check_training_options, run_batch
from imageforest.apps.detect.datasets import IMAGE_SUFFIXES
from imageforest.apps.detect.recipe import RECIPE  # a plain dict: the flags' defaults
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
@click.option("--model", "model_path", type=click.Path(path_type=Path), default=None,
              help="Detector model (.npz); default: the shipped horse detector.")
@click.option("--overlay", type=click.Path(path_type=Path), default=None,
              help="PNG of the image with its boxes beside the Hough image (a folder for several images).")
@click.option("--threshold", type=float, default=None,
              help="Least score of a reported detection (default: the model's own).")
@click.option("--threads", type=int, default=None, help="Threads for the forest (default: all cores).")
def detect(images: tuple[Path, ...], out: Path, model_path: Path | None, overlay: Path | None,
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


@commands.command("train-detector")
@click.argument("data_dir", type=click.Path(path_type=Path))
@click.option("-o", "--out", type=click.Path(path_type=Path), required=True, help="Model file to write (.npz).")
@click.option("--variant", type=click.Choice(["hough", "adhf"]), default=RECIPE["variant"], show_default=True,
              help="Hough forest, or alternating decision Hough forest (weights from a global loss).")
@click.option("--loss", type=click.Choice(["logit", "exponential", "savage", "tangent", "hinge"]),
              default=RECIPE["loss"], show_default=True, help="Global loss of --variant adhf.")
@click.option("--trees", type=int, default=RECIPE["n_trees"], show_default=True, help="Trees T.")
@click.option("--depth", type=int, default=RECIPE["max_depth"], show_default=True, help="Maximum depth D.")
@click.option("--patches", type=int, default=RECIPE["patches_per_image"], show_default=True,
              help="Patches per image (half inside the boxes, half outside).")
@click.option("--candidates", type=int, default=RECIPE["n_candidates"], show_default=True,
              help="Pixel-pair tests per node (rho).")
@click.option("--negatives", type=click.Path(path_type=Path), default=None,
              help="Folder of background images without the object.")
@click.option("--images", type=int, default=None, help="Train on the first N images (default: all).")
@click.option("--seed", type=int, default=RECIPE["random_state"], show_default=True,
              help="Random seed (fixes the model bytes).")
@click.option("--name", default="custom", show_default=True, help="Model name recorded in its card.")
@click.option("--threads", type=int, default=None, help="Threads (default: all cores).")
def train_detector_command(data_dir: Path, out: Path, variant: str, loss: str, trees: int, depth: int, patches: int,
                           candidates: int, negatives: Path | None, images: int | None, seed: int, name: str,
                           threads: int | None) -> None:
    """Train a detector on DATA: images with boxes.json (the layout of the Weizmann horses, or name -> boxes)."""
    check_training_options(out, (("--trees", trees, 1), ("--depth", depth, 1), ("--candidates", candidates, 1),
                                 ("--patches", patches, 2)))
    try:
        from imageforest.apps.detect.training import train_detector

        model, summary = train_detector(data_dir, negatives_dir=negatives, n_trees=trees, max_depth=depth,
                                        n_candidates=candidates, patches_per_image=patches, variant=variant,
                                        loss=loss, n_images=images, random_state=seed, n_jobs=threads,
                                        progress=lambda msg: click.echo(msg, err=True))
        model.model_card_ = {"name": name, "trained_on": str(data_dir), **summary,
                             "recipe": {"n_trees": trees, "max_depth": depth, "n_candidates": candidates,
                                        "patches_per_image": patches, "variant": variant, "loss": loss,
                                        "random_state": seed}}
        model.save(out)
    except (ImageForestError, OSError) as exc:
        raise fail(str(exc)) from None
    click.echo(json.dumps({"model": str(out), **summary}), err=True)
