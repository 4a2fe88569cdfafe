"""The localizer's commands, registered by the `imageforest` command on first use.

    imageforest localize SCAN [SCAN ...] [--model PATH] [--organs NAME,...] [-o OUT] [--overlay PNG] [--mask NIFTI]
        [--compact]
    imageforest train-localizer DATA_DIR -o MODEL.npz [--organs NAME,...] [--trees T] [--depth D]
        [--refine-spacing MM] ...
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click

from imageforest.apps.localize.batch import SCAN_SUFFIXES, expand_scan_arguments
from imageforest.apps.localize.recipe import PARAMETERS as RECIPE  # a plain dict: the flags' defaults
from imageforest.batch_command import check_cluster_options
from imageforest.cli import each_scan
from imageforest.cli import fail as _fail
from imageforest.exceptions import ImageForestError
from imageforest.outputs import StagedOutputs, check_destination, output_stems, plan_outputs


def split_names(value: str | None) -> list[str] | None:
    if not value:
        return None
    names = [v.strip() for v in value.split(",") if v.strip()]
    return names or None


MASK_SUFFIXES = (".nii.gz", ".nii", ".nrrd", ".mha")


@click.command()
@click.argument("scans", nargs=-1, required=True)
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
@click.option("--compact", is_flag=True, help="JSON on stdout on one line per document instead of indented.")
@click.option("--workers", type=int, default=None,
              help="Localize on a local Dask cluster of N worker processes (needs -o OUT, a folder).")
@click.option("--scheduler", default=None, metavar="ADDRESS",
              help="Localize on the Dask cluster at ADDRESS, e.g. tcp://host:8786 (needs -o OUT, a folder).")
@click.option("--resume", is_flag=True, help="Skip scans whose outputs in OUT are complete (needs -o OUT).")
def localize(scans: tuple[str, ...], model_path: Path | None, organs: str | None, out: Path | None,
             overlay: Path | None, mask: Path | None, threads: int | None, compact: bool, workers: int | None,
             scheduler: str | None, resume: bool) -> None:
    """Find organs and their bounding boxes (LPS mm) in CT SCANs (NIfTI, NRRD, MHA or a DICOM folder).

    A SCAN may be @LIST (a file listing one scan per line) or a quoted glob ('archive/**/*.nii.gz'). With
    --workers, --scheduler or --resume the scans are a batch: each scan's JSON goes to the folder OUT as it
    finishes, and OUT/batch_report.json reports every scan."""
    t_start = time.perf_counter()
    try:
        scans_list = expand_scan_arguments(scans)
    except ImageForestError as exc:
        raise _fail(str(exc)) from None
    if threads is not None and threads < 1:
        raise _fail(f"--threads must be at least 1, got {threads}")
    if workers is not None or scheduler is not None or resume:
        _localize_batch(scans_list, model_path, split_names(organs), out, overlay, mask, threads, workers,
                        scheduler, resume)
        return
    many = len(scans_list) > 1
    if mask is not None and not many and not mask.name.lower().endswith(MASK_SUFFIXES):
        raise _fail(f"--mask: {mask}: write the mask as one of {', '.join(MASK_SUFFIXES)}")
    if overlay is not None and not many and overlay.suffix.lower() != ".png":
        raise _fail(f"--overlay: {overlay}: the overlay is a .png")
    stems = output_stems(scans_list, SCAN_SUFFIXES)
    plans = {"json": plan_outputs(out, scans_list, stems, ".json", "--out"),
             "overlay": plan_outputs(overlay, scans_list, stems, "_overlay.png", "--overlay"),
             "mask": plan_outputs(mask, scans_list, stems, "_boxes.nii.gz", "--mask")}
    every = [p.resolve() for paths in plans.values() for p in paths if p is not None]
    if len(every) != len(set(every)):
        raise _fail("two outputs would go to the same file; give --out, --overlay and --mask different paths")
    try:
        from imageforest.apps.localize.api import check_organs, load_localizer, localize_file
        from imageforest.apps.localize.report import table, write_json, write_mask

        model = load_localizer(model_path)
        if threads is not None:
            model.n_jobs = threads
        wanted = check_organs(model, split_names(organs))
    except (ImageForestError, OSError) as exc:
        raise _fail(str(exc)) from None
    t_model = time.perf_counter() - t_start
    written: list[str] = []

    def work(k: int, scan: Path) -> dict:
        document, result, image = localize_file(scan, model, wanted)
        if not written:  # the model's load time goes into the first document written
            document["timing_s"]["model_load"] = round(t_model, 4)
        with StagedOutputs() as staged:  # a scan's outputs move into place together, or none does
            if plans["json"][k] is not None:
                write_json(document, staged.path(plans["json"][k]))
            if plans["overlay"][k] is not None:
                from imageforest.apps.localize.overlay import write_overlay

                write_overlay(result, staged.path(plans["overlay"][k]), title=scan.name, organs=wanted)
            if plans["mask"][k] is not None:
                write_mask(result, image, staged.path(plans["mask"][k]), wanted)
        written.append(scan.name)
        return document

    documents, failures = each_scan(scans_list, work, table)
    if out is None and documents:
        shown = documents[0] if not many else documents
        click.echo(json.dumps(shown, separators=(",", ":")) if compact else json.dumps(shown, indent=2))
    if failures:
        sys.exit(1)


def _localize_batch(scans: list[Path], model_path: Path | None, organs: list[str] | None, out: Path | None,
                    overlay: Path | None, mask: Path | None, threads: int | None, workers: int | None,
                    scheduler: str | None, resume: bool) -> None:
    """`localize` over a batch: in this process (--resume alone) or on a Dask cluster; exit code 1 when any scan
    failed."""
    if out is None:
        raise _fail("--workers, --scheduler and --resume write into a folder: give -o OUT")
    from imageforest.apps.localize.batch import LocalizeJob, plan_batch
    from imageforest.batch_command import run_batch_command

    model = None if model_path is None else str(Path(model_path).resolve())
    # Absolute paths: a remote worker runs in a folder of its own (the JSON's "scan" names the absolute path).
    absolute = [Path(p).absolute() for p in scans]
    run_batch_command(lambda n: LocalizeJob(model, tuple(organs) if organs else None, n),
                      lambda: plan_batch(absolute, out.absolute(), *(False if x is None else x.absolute()
                                                                      for x in (overlay, mask))),
                      out, workers=workers, scheduler=scheduler, threads=threads, resume=resume, verb="localized",
                      model_name=model or "default", preload=("imageforest.apps.localize.api",))


@click.command("train-localizer")
@click.argument("data_dir", type=click.Path(path_type=Path))
@click.option("-o", "--out", type=click.Path(path_type=Path), required=True, help="Model file to write (.npz).")
@click.option("--organs", default=None,
              help="Comma-separated organ names for label values 1, 2, ... (default: boxes.json's organ_labels).")
@click.option("--cases", "n_cases", type=int, default=None,
              help="Train on the first N cases (by name); default: all. 20 cases take about 2 minutes and 2 GB.")
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
@click.option("--workers", type=int, default=None,
              help="Grow the independent forests on a local Dask cluster of N worker processes.")
@click.option("--scheduler", default=None, metavar="ADDRESS",
              help="Grow the independent forests on the Dask cluster at ADDRESS, e.g. tcp://host:8786.")
def train_localizer(data_dir: Path, out: Path, organs: str | None, n_cases: int | None, trees: int, depth: int,
                    spacing: float, points_per_scan: int, refine_spacing: float, seed: int, name: str,
                    workers: int | None, scheduler: str | None) -> None:
    """Train a localizer on DATA_DIR: `<case>_ct.nii.gz` scans with `<case>_organs.nii.gz` label maps
    (label k = the k-th organ), or with boxes in a `boxes.json` (openkbp-hn layout). Settings the flags do not
    name are the default model's (`apps/localize/recipe.py`). With --workers or --scheduler the first stage's
    forest and every fine- and slice-stage forest grow as Dask tasks; the model's bytes are the same."""
    check_destination(out, set(), "--out", devices=False)
    check_cluster_options(workers, scheduler)
    client = None
    try:
        from imageforest.apps.localize.training import train_from_folder

        params = {**RECIPE, "n_trees": trees, "max_depth": depth, "spacing_mm": spacing,
                  "points_per_scan": points_per_scan, "refine_spacing_mm": refine_spacing, "random_state": seed}
        run_jobs = None
        if workers is not None or scheduler is not None:
            from imageforest.cluster import connect, dask_jobs, local_threads

            client = connect(workers, scheduler)
            click.echo(f"Dask dashboard: {client.dashboard_link}", err=True)
            run_jobs = dask_jobs(client)
            if workers is not None:
                params["n_jobs"] = local_threads(workers)
        model = train_from_folder(data_dir, split_names(organs), name=name, run_jobs=run_jobs, n_cases=n_cases,
                                  progress=lambda msg: click.echo(msg, err=True), **params)
        model.save(out)
    except (ImageForestError, OSError) as exc:
        raise _fail(str(exc)) from None
    finally:
        if client is not None:
            from imageforest.cluster import disconnect

            disconnect(client)
    click.echo(f"wrote {out} ({len(model.organs)} organs: {', '.join(model.organs)})", err=True)


# The commands this application adds to `imageforest`.
commands = click.Group("localize-app", commands=[localize, train_localizer])
