"""The contourer's commands, registered by the `imageforest` command on first use.

    imageforest contour SCAN [SCAN ...] [-o OUT] [--model M] [--localizer L | --boxes B] [--organs NAME,...]
        [--json J] [--probabilities DIR] [--split] [--format nifti|dicom-seg|rtstruct] [--overlay PNG] [--threads N]
        [--workers N | --scheduler ADDR] [--resume]
    imageforest train-contour DATA_DIR -o MODEL.npz [--organs NAME,...] [--cases N] [--trees T] [--depth D]
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click

from imageforest.apps.contour.dicom import FORMATS, check_dicom_source
from imageforest.apps.contour.recipe import RECIPE
from imageforest.apps.localize.cli import split_names
from imageforest.batches import SCAN_SUFFIXES
from imageforest.cli import each_scan
from imageforest.cli import fail as _fail
from imageforest.exceptions import ImageForestError
from imageforest.outputs import check_destination, output_stems, plan_outputs

LABEL_SUFFIXES = (".nii.gz", ".nii", ".nrrd", ".mha")


@click.command()
@click.argument("scans", nargs=-1, required=True)
@click.option("-o", "--out", type=click.Path(path_type=Path), default=None,
              help="Label map on the scan's grid (label k = the model's k-th organ): NIfTI, or .dcm with --format; "
                   "a folder for several scans (<name>.nii.gz, <name>.dcm) or with --split (<organ>.nii.gz).")
@click.option("--model", "model_path", type=click.Path(path_type=Path), default=None,
              help="Contour model (.npz); default: the shipped head-and-neck model.")
@click.option("--localizer", "localizer_path", type=click.Path(path_type=Path), default=None,
              help="Localizer model giving the organs' boxes; default: the shipped one.")
@click.option("--boxes", "boxes", type=click.Path(path_type=Path), default=None,
              help="Contour inside these boxes instead of the localizer's: the JSON `imageforest localize` wrote "
                   "for the scan, as written or edited (a folder of <name>.json for several scans).")
@click.option("--organs", default=None, help="Comma-separated organs to report and write (default: all).")
@click.option("--json", "json_out", type=click.Path(path_type=Path), default=None,
              help="JSON report: a file for one scan, a folder for several (default: stdout; in a batch: OUT).")
@click.option("--probabilities", type=click.Path(path_type=Path), default=None,
              help="Folder for per-organ posterior volumes (float32 NIfTI, <organ>.nii.gz; per scan "
                   "<name>/<organ>.nii.gz for several).")
@click.option("--split", is_flag=True, help="Write one mask per organ into the folder OUT instead of a label map.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="nifti", show_default=True,
              help="Label map format: NIfTI, or for a DICOM series folder a DICOM-SEG or an RT Structure Set "
                   "(contours per slice) referencing the series.")
@click.option("--overlay", type=click.Path(path_type=Path), default=None,
              help="PNG with axial, coronal and sagittal planes through each organ and its contour (a folder for "
                   "several scans).")
@click.option("--threads", type=int, default=None, help="Threads for the forests (default: all cores).")
@click.option("--workers", type=int, default=None,
              help="Contour on a local Dask cluster of N worker processes (needs -o OUT, a folder).")
@click.option("--scheduler", default=None, metavar="ADDRESS",
              help="Contour on the Dask cluster at ADDRESS, e.g. tcp://host:8786 (needs -o OUT, a folder).")
@click.option("--resume", is_flag=True, help="Skip scans whose outputs are complete (needs -o OUT).")
def contour(scans: tuple[str, ...], out: Path | None, model_path: Path | None, localizer_path: Path | None,
            boxes: Path | None, organs: str | None, json_out: Path | None, probabilities: Path | None, split: bool,
            fmt: str, overlay: Path | None, threads: int | None, workers: int | None, scheduler: str | None,
            resume: bool) -> None:
    """Contour organs in CT SCANs (NIfTI, NRRD, MHA or a DICOM folder): a label map and a JSON report per scan.

    The localizer finds each organ's box (or --boxes gives them); an entangled forest labels the voxels inside. An
    organ the localizer calls absent gets no voxels. A SCAN may be @LIST (a file listing one scan per line) or a
    quoted glob. With --workers, --scheduler or --resume the scans are a batch: each scan's outputs go to the
    folder OUT as it finishes (JSON in --json or OUT), and batch_report.json beside the JSON reports every scan."""
    t_start = time.perf_counter()
    from imageforest.apps.contour.batch import LABEL_SUFFIX
    from imageforest.batches import expand_scan_arguments

    try:
        scan_list = expand_scan_arguments(scans)
    except ImageForestError as exc:
        raise _fail(str(exc)) from None
    if threads is not None and threads < 1:
        raise _fail(f"--threads must be at least 1, got {threads}")
    if split and fmt != "nifti":
        raise _fail(f"--split writes one NIfTI mask per organ; a {fmt} file holds every organ: drop one of them")
    if fmt != "nifti" and out is None:
        raise _fail(f"--format {fmt} describes the label map: give -o OUT")
    if boxes is not None and localizer_path is not None:
        raise _fail("--boxes replaces the localizer's boxes: give --boxes or --localizer, not both")
    if boxes is not None and not boxes.exists():
        raise _fail(f"--boxes: {boxes}: no such file or folder")
    if boxes is not None and len(scan_list) > 1 and not boxes.is_dir():
        raise _fail(f"--boxes: {boxes} is a file; for several scans give a folder of <name>.json")
    try:
        for scan in scan_list:
            check_dicom_source(scan, fmt)
    except ImageForestError as exc:
        raise _fail(str(exc)) from None
    if workers is not None or scheduler is not None or resume:
        _contour_batch(scan_list, model_path, localizer_path, boxes, split_names(organs), out, json_out,
                       probabilities, overlay, split, fmt, threads, workers, scheduler, resume)
        return
    many = len(scan_list) > 1
    suffixes = LABEL_SUFFIXES if fmt == "nifti" else (".dcm",)
    if out is not None and not many and not split and not out.name.lower().endswith(suffixes):
        raise _fail(f"-o/--out: {out}: write the label map as one of {', '.join(suffixes)}"
                    + (" (or give --split and a folder)" if fmt == "nifti" else ""))
    if split and out is None:
        raise _fail("--split writes one mask per organ into a folder: give -o OUT")
    if overlay is not None and not many and overlay.suffix.lower() != ".png":
        raise _fail(f"--overlay: {overlay}: the overlay is a .png")
    stems = output_stems(scan_list, SCAN_SUFFIXES)
    plans = {"json": plan_outputs(json_out, scan_list, stems, ".json", "--json"),
             "overlay": plan_outputs(overlay, scan_list, stems, "_overlay.png", "--overlay"),
             "out": ([None] * len(scan_list) if out is None else
                     _folders(out, stems, many, "-o/--out") if split else
                     plan_outputs(out, scan_list, stems, LABEL_SUFFIX[fmt], "-o/--out")),
             "probabilities": ([None] * len(scan_list) if probabilities is None
                               else _folders(probabilities, stems, many, "--probabilities"))}
    try:
        from imageforest.apps.contour.api import check_localizer, check_organs, contour_file, load_contourer
        from imageforest.apps.localize.api import load_localizer

        model = load_contourer(model_path)
        localizer = None if boxes is not None else load_localizer(localizer_path)
        if threads is not None:
            model.n_jobs = threads
            if localizer is not None:
                localizer.n_jobs = threads
        wanted = check_organs(model, split_names(organs))
        if localizer is not None:
            check_localizer(model, localizer)
    except (ImageForestError, OSError) as exc:
        raise _fail(str(exc)) from None
    from imageforest import __version__
    from imageforest.apps.contour.outputs import ScanOutputs, write_outputs

    t_model = time.perf_counter() - t_start
    written: list[str] = []

    def work(k: int, scan: Path) -> dict:
        given = None if boxes is None else boxes / f"{stems[k]}.json" if boxes.is_dir() else boxes
        document, contours, image = contour_file(scan, model, localizer, wanted, probabilities is not None, given)
        if not written:  # the model's load time goes into the first document written
            document["timing_s"]["model_load"] = round(t_model, 4)
        where = ScanOutputs(plans["json"][k], plans["out"][k], plans["probabilities"][k], plans["overlay"][k],
                            split, fmt)
        write_outputs(document, contours, image, model.organs, wanted, where, scan.name, __version__)
        written.append(scan.name)
        return document

    documents, failures = each_scan(scan_list, work, table)
    if json_out is None and documents:
        click.echo(json.dumps(documents[0] if not many else documents, indent=2))
    if failures:
        sys.exit(1)


def _folders(target: Path, stems: list[str], many: bool, what: str) -> list[Path]:
    """One folder per scan: `target` itself for one scan, target/<name> for several (created when written)."""
    from imageforest.outputs import output_folder

    output_folder(target, what, "is a file; give a folder")
    return [target / stem for stem in stems] if many else [target]


def _contour_batch(scans: list[Path], model_path: Path | None, localizer_path: Path | None, boxes: Path | None,
                   organs: list[str] | None, out: Path | None, json_out: Path | None, probabilities: Path | None,
                   overlay: Path | None, split: bool, fmt: str, threads: int | None, workers: int | None,
                   scheduler: str | None, resume: bool) -> None:
    """`contour` over a batch: in this process (--resume alone) or on a Dask cluster; exit code 1 when any scan
    failed."""
    if out is None:
        raise _fail("--workers, --scheduler and --resume write into a folder: give -o OUT")
    from imageforest.apps.contour.batch import ContourJob, plan_contour_batch
    from imageforest.batch_command import run_batch_command

    absolute = lambda p: None if p is None else p.absolute()  # noqa: E731
    model = None if model_path is None else str(model_path.resolve())
    localizer = None if localizer_path is None else str(localizer_path.resolve())
    json_dir = absolute(json_out) or out.absolute()
    # Absolute paths: a remote worker runs in a folder of its own (the JSON's "scan" names the absolute path).
    if boxes is not None and not boxes.is_dir():
        raise _fail(f"--boxes: {boxes} is a file; a batch reads a folder of <name>.json")
    boxes_dir = None if boxes is None else str(boxes.absolute())
    run_batch_command(lambda n: ContourJob(model, localizer, tuple(organs) if organs else None, n, split, fmt,
                                           boxes_dir=boxes_dir),
                      lambda: plan_contour_batch([s.absolute() for s in scans], json_dir, out.absolute(),
                                                 absolute(probabilities), absolute(overlay), split, fmt),
                      json_dir, workers=workers, scheduler=scheduler, threads=threads, resume=resume,
                      verb="contoured", model_name=model or "default", preload=("imageforest.apps.contour.api",))


def table(document: dict) -> str:
    """A readable summary of one JSON document."""
    lines = [document["scan"], f"  {'organ':<14} {'present':>7} {'volume (mL)':>11} {'mean p':>7}"]
    for row in document["organs"]:
        p = "" if row["mean_posterior"] is None else f"{row['mean_posterior']:.2f}"
        lines.append(f"  {row['name']:<14} {'yes' if row['present'] else 'no':>7} {row['volume_ml']:>11.1f} {p:>7}")
    lines.extend(f"  warning: {w}" for w in document.get("warnings", []))
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
@click.option("--entangled-depths", "entangled", default=None, metavar="D1,D2,...",
              help="Depths after which the posteriors become features (default: the recipe's, none; 'none').")
@click.option("--prior-maps/--no-prior-maps", default=RECIPE["prior_maps"], show_default=True,
              help="The box atlas is the first stage's context (its tests may read it).")
@click.option("--seed", type=int, default=0, show_default=True, help="Random seed (fixes the model bytes).")
@click.option("--name", default="custom", show_default=True, help="Model name recorded in its model card.")
def train_contour(data_dir: Path, out: Path, organs: str | None, n_cases: int | None, trees: int, depth: int,
                  entangled: str | None, prior_maps: bool, seed: int, name: str) -> None:
    """Train a contour model on DATA_DIR: `<case>_ct.nii.gz` scans with `<case>_organs.nii.gz` label maps
    (label k = the k-th organ; openkbp-hn layout). Settings the flags do not name are the default model's
    (`apps/contour/recipe.py`); the recipe's entangled depths beyond --depth are dropped."""
    check_destination(out, set(), "--out", devices=False)
    if entangled is None:
        depths = tuple(d for d in RECIPE["entangled_depths"] if d < depth)
    elif entangled.strip().lower() == "none":
        depths = ()
    else:
        try:
            depths = tuple(int(v) for v in entangled.split(","))
        except ValueError:
            raise _fail(f"--entangled-depths: give increasing integers such as 8,12 or 'none', got {entangled!r}"
                        ) from None
    try:
        from imageforest.apps.contour.training import train_from_folder

        params = {"n_trees": trees, "max_depth": depth, "entangled_depths": depths, "prior_maps": prior_maps,
                  "random_state": seed}
        model = train_from_folder(data_dir, split_names(organs), name=name, n_cases=n_cases,
                                  progress=lambda msg: click.echo(msg, err=True), **params)
        model.save(out)
    except (ImageForestError, OSError) as exc:
        raise _fail(str(exc)) from None
    click.echo(f"wrote {out} ({len(model.organs)} organs: {', '.join(model.organs)})", err=True)
