"""The body-parts commands, registered by the `imageforest` command on first use.

    imageforest bodyparts DEPTH [DEPTH ...] -o OUT [--model M] [--overlay PNG] [--proba] [--fx F --fy F --cx C --cy C]
    imageforest train-bodyparts DATA -o MODEL [--trees T] [--depth D] [--images N] [--pixels-per-image P] ...
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from imageforest.app_commands import check_batch_inputs, check_planned_outputs, check_training_options, run_batch
from imageforest.apps.bodyparts.depth import DEPTH_SUFFIXES
from imageforest.apps.bodyparts.recipe import RECIPE  # a plain dict: the flags' defaults
from imageforest.cli import fail
from imageforest.exceptions import ImageForestError
from imageforest.outputs import StagedOutputs, output_folder, output_stems, plan_outputs


@click.group()
def commands() -> None:
    """Body parts and joints from depth maps."""


@commands.command()
@click.argument("depths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("-o", "--out", type=click.Path(path_type=Path), required=True,
              help="Folder for <name>_parts.png and <name>_joints.json per map (created when missing).")
@click.option("--model", "model_path", type=click.Path(path_type=Path), default=None,
              help="Body-parts model (.npz); default: the shipped body model.")
@click.option("--overlay", type=click.Path(path_type=Path), default=None,
              help="PNG of depth, parts and joints (a folder for several maps).")
@click.option("--proba", is_flag=True, help="Also write <name>_proba.npy: (height, width, parts) probabilities.")
@click.option("--fx", type=float, default=None, help="Focal length in x (px); default Kinect-like, 570 at 640 wide.")
@click.option("--fy", type=float, default=None, help="Focal length in y (px); default: fx.")
@click.option("--cx", type=float, default=None, help="Principal point x (px); default: the width / 2.")
@click.option("--cy", type=float, default=None, help="Principal point y (px); default: the height / 2.")
@click.option("--threads", type=int, default=None, help="Threads for the forest (default: all cores).")
def bodyparts(depths: tuple[Path, ...], out: Path, model_path: Path | None, overlay: Path | None, proba: bool,
              fx: float | None, fy: float | None, cx: float | None, cy: float | None, threads: int | None) -> None:
    """Label every body pixel of DEPTH maps (16-bit PNG/TIFF in mm, or .npy) with its part, and propose joints."""
    inputs = list(depths)
    check_batch_inputs(inputs, DEPTH_SUFFIXES, "depth is", overlay, threads)
    output_folder(out, "--out")
    stems = output_stems(inputs, tuple(f"_depth{s}" for s in DEPTH_SUFFIXES) + DEPTH_SUFFIXES)  # a_depth.png: a
    plans = {"parts": [out / f"{s}_parts.png" for s in stems],
             "joints": [out / f"{s}_joints.json" for s in stems],
             "proba": [out / f"{s}_proba.npy" if proba else None for s in stems],
             "overlay": plan_outputs(overlay, inputs, stems, "_overlay.png", "--overlay")}
    check_planned_outputs(plans, inputs)
    camera = {k: v for k, v in (("fx", fx), ("fy", fy), ("cx", cx), ("cy", cy)) if v is not None}
    try:
        from imageforest.apps.bodyparts.api import load_body_model, parse_depth_file
        from imageforest.apps.bodyparts.report import (
            write_json,
            write_overlay,
            write_parts_png,
            write_probabilities,
        )

        model = load_body_model(model_path)
        if threads is not None:
            model.n_jobs = threads
    except (ImageForestError, OSError) as exc:
        raise fail(str(exc)) from None

    def process(k: int, path: Path) -> tuple[str, Path]:
        document, result, depth = parse_depth_file(path, model, camera, probabilities=proba)
        with StagedOutputs() as out:  # a map's outputs move into place together, or none does
            write_parts_png(result.labels, out.path(plans["parts"][k]))
            write_json(document, out.path(plans["joints"][k]))
            if plans["proba"][k] is not None:
                write_probabilities(result.probabilities, out.path(plans["proba"][k]))
            if plans["overlay"][k] is not None:
                write_overlay(depth, result, len(model.part_names_), out.path(plans["overlay"][k]))
        found = sum(bool(p) for p in result.joints.values())
        return (f"{document['body_pixels']} body pixels, {found}/{len(result.joints)} joints found",
                plans["parts"][k])

    run_batch(inputs, process)


@commands.command("train-bodyparts")
@click.argument("data_dir", type=click.Path(path_type=Path))
@click.option("-o", "--out", type=click.Path(path_type=Path), required=True, help="Model file to write (.npz).")
@click.option("--trees", type=int, default=RECIPE["n_trees"], show_default=True, help="Trees T.")
@click.option("--depth", type=int, default=RECIPE["max_depth"], show_default=True, help="Maximum depth D.")
@click.option("--images", type=int, default=None, help="Train on the first N maps (default: all).")
@click.option("--pixels-per-image", type=int, default=RECIPE["pixels_per_image"], show_default=True,
              help="Pixels drawn per map.")
@click.option("--candidates", type=int, default=RECIPE["n_candidates"], show_default=True,
              help="Probe candidates per node (rho).")
@click.option("--reach", type=float, default=RECIPE["reach_m"], show_default=True, help="Farthest probe offset (m).")
@click.option("--min-leaf", type=int, default=RECIPE["min_samples_leaf"], show_default=True,
              help="Fewest pixels in a leaf (larger: a smaller model file).")
@click.option("--balanced/--unbalanced", default=RECIPE["class_weight"] == "balanced", show_default=True,
              help="Weigh parts equally (raises the mean per-part accuracy).")
@click.option("--tree-share", type=float, default=RECIPE["max_samples"], show_default=True,
              help="Share of the pixels each tree grows on, drawn per tree (1: all).")
# model.THRESHOLD_SAMPLINGS, written out: importing the model module here would load the forest for every command
# (a test keeps the two the same)
@click.option("--thresholds", type=click.Choice(["data", "range"]), default=RECIPE["threshold_sampling"],
              show_default=True, help="Draw a probe's thresholds from the node's responses, or uniformly over their "
                                      "range.")
@click.option("--seed", type=int, default=RECIPE["random_state"], show_default=True,
              help="Random seed (fixes the model bytes).")
@click.option("--name", default="custom", show_default=True, help="Model name recorded in its card.")
@click.option("--threads", type=int, default=None, help="Threads (default: all cores).")
def train_bodyparts_command(data_dir: Path, out: Path, trees: int, depth: int, images: int | None,
                            pixels_per_image: int, candidates: int, reach: float, min_leaf: int, balanced: bool,
                            tree_share: float, thresholds: str, seed: int, name: str, threads: int | None) -> None:
    """Train a body-parts model on DATA: rendered bodies (python -m imageforest.apps.bodyparts.renderer) or
    hand-depth-parts."""
    check_training_options(out, (("--trees", trees, 1), ("--depth", depth, 1), ("--candidates", candidates, 1),
                                 ("--pixels-per-image", pixels_per_image, 1), ("--min-leaf", min_leaf, 1)))
    if not 0.0 < tree_share <= 1.0:
        raise fail(f"--tree-share must lie in (0, 1], got {tree_share}")
    try:
        from imageforest.apps.bodyparts.training import train_bodyparts

        model, summary = train_bodyparts(data_dir, n_trees=trees, max_depth=depth, n_images=images,
                                         pixels_per_image=pixels_per_image, n_candidates=candidates,
                                         reach_m=reach, min_samples_leaf=min_leaf,
                                         class_weight="balanced" if balanced else None,
                                         max_samples=None if tree_share == 1.0 else tree_share,
                                         threshold_sampling=thresholds,
                                         random_state=seed, n_jobs=threads,
                                         progress=lambda msg: click.echo(msg, err=True))
        model.model_card_ = {"name": name, "trained_on": str(data_dir), **summary,
                             "recipe": {"n_trees": trees, "max_depth": depth, "n_candidates": candidates,
                                        "pixels_per_image": pixels_per_image, "max_samples": tree_share,
                                        "reach_m": reach, "min_samples_leaf": min_leaf,
                                        "class_weight": "balanced" if balanced else None,
                                        "threshold_sampling": thresholds, "random_state": seed}}
        model.save(out)
    except (ImageForestError, OSError) as exc:
        raise fail(str(exc)) from None
    click.echo(json.dumps({"model": str(out), **summary}), err=True)
