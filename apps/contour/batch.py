"""Contouring an archive of scans: in this process, or as Dask tasks on a local or remote cluster.

    from imageforest.apps.contour.batch import contour_many
    report = contour_many(paths, "labels/")                  # in this process, one scan after another
    report = contour_many(paths, "labels/", client=client)   # on a dask.distributed cluster

The batch itself (atomic outputs with the JSON last, `resume`, retries on another worker, the report in
``batch_report.json`` beside the JSON documents) is `imageforest.batches`, shared with `localize`; this module says
what contouring one scan is (`ContourJob`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from imageforest.batches import SCAN_SUFFIXES, BatchItem, plan_batch, run_batch
from imageforest.exceptions import InvalidInputError

LABEL_SUFFIX = {"nifti": ".nii.gz", "dicom-seg": ".dcm", "rtstruct": ".dcm"}


@dataclass(frozen=True)
class ContourJob:
    """Contouring one scan with the contour model at `model_path` and the localizer at `localizer_path` (None:
    the shipped ones) on `threads` numba threads, writing `organs` (None: all) as `fmt` ("nifti", "dicom-seg",
    "rtstruct"; `split`: one NIfTI mask per organ). With `boxes_dir`, each scan's boxes come from
    ``<boxes_dir>/<name>.json`` (a `localize` document) instead of the localizer."""

    model_path: str | None = None
    localizer_path: str | None = None
    organs: tuple[str, ...] | None = None
    threads: int | None = None
    split: bool = False
    fmt: str = "nifti"
    task_name: str = "contour"
    boxes_dir: str | None = None

    def model_files(self) -> list[str]:
        from imageforest.apps.contour.api import DEFAULT_MODEL
        from imageforest.apps.localize.api import DEFAULT_MODEL as DEFAULT_LOCALIZER

        if self.boxes_dir is not None:  # the boxes are given: no localizer is loaded
            return [self.model_path or str(DEFAULT_MODEL)]
        return [self.model_path or str(DEFAULT_MODEL), self.localizer_path or str(DEFAULT_LOCALIZER)]

    def load(self):
        from imageforest.apps.contour.api import load_contourer
        from imageforest.apps.localize.api import load_localizer

        model = load_contourer(self.model_path)
        localizer = None if self.boxes_dir is not None else load_localizer(self.localizer_path)
        model.n_jobs = self.threads
        if localizer is not None:
            localizer.n_jobs = self.threads
        return model, localizer

    def check(self, models) -> None:
        from imageforest.apps.contour.api import check_localizer, check_organs

        check_organs(models[0], list(self.organs) if self.organs else None)
        if models[1] is not None:
            check_localizer(*models)

    def run(self, models, item: BatchItem, timing: dict[str, float]) -> dict:
        from imageforest import __version__
        from imageforest.apps.contour.api import contour_file
        from imageforest.apps.contour.dicom import check_dicom_source
        from imageforest.apps.contour.outputs import ScanOutputs, write_outputs

        if item.out is not None:
            check_dicom_source(item.scan, self.fmt)
        model, localizer = models
        organs = list(self.organs) if self.organs else None
        # the document is named as this scan's JSON output is (<name>.json), as `localize` named it
        boxes = None if self.boxes_dir is None else Path(self.boxes_dir) / item.json.name
        document, contours, scan = contour_file(item.scan, model, localizer, organs, item.probabilities is not None,
                                                boxes)
        document["timing_s"].update(timing)
        where = ScanOutputs(item.json, item.out, item.probabilities, item.overlay, self.split, self.fmt)
        write_outputs(document, contours, scan, model.organs, organs, where, item.scan.name, __version__)
        return document


def plan_contour_batch(scans: list[Path], json_dir: Path, out: Path | None = None, probabilities: Path | None = None,
                       overlay: Path | None = None, split: bool = False, fmt: str = "nifti") -> list[BatchItem]:
    """Every scan's outputs: ``<stem>.json`` in `json_dir`; ``<stem>.nii.gz`` (``.dcm`` for DICOM formats, a folder
    ``<stem>/`` with `split`) in `out`; a folder ``<stem>/`` in `probabilities`; ``<stem>_overlay.png`` in
    `overlay`. Raises InvalidInputError for an unknown format."""
    if fmt not in LABEL_SUFFIX:
        raise InvalidInputError(f"unknown format {fmt!r}; one of {', '.join(LABEL_SUFFIX)}")
    label_suffix = "/" if split else LABEL_SUFFIX[fmt]
    outputs = {"out": (out or False, label_suffix), "probabilities": (probabilities or False, "/"),
               "overlay": (overlay or False, "_overlay.png")}
    return plan_batch(scans, json_dir, outputs, SCAN_SUFFIXES)


def contour_many(paths: Iterable[str | os.PathLike], out: str | os.PathLike, client=None, *,
                 json: str | os.PathLike | None = None, model: str | os.PathLike | None = None,
                 localizer: str | os.PathLike | None = None, boxes: str | os.PathLike | None = None,
                 organs: list[str] | None = None,
                 probabilities: str | os.PathLike | None = None, overlay: str | os.PathLike | None = None,
                 split: bool = False, fmt: str = "nifti", resume: bool = False, threads: int | None = None,
                 retries: int = 1, progress: Callable[[str], None] | None = None) -> dict:
    """Contour every scan of `paths` into the folder `out` (label maps as `fmt`, or per-organ folders with
    `split`); returns the batch report (``batch_report.json`` beside the JSON documents, in `json` or `out`).

    Parameters
    ----------
    paths : scan files or DICOM series folders (expand ``@list.txt`` and globs with
        `imageforest.batches.expand_scan_arguments` first); DICOM formats need series folders
    out : folder of the label maps (created when missing)
    client : dask.distributed.Client or None (None: in this process, one scan after another)
    json : folder of the JSON documents and the report (None: `out`)
    model, localizer : model files (None: the shipped ones); a cluster's workers must see the same paths
    boxes : a folder of boxes documents (``<stem>.json`` per scan, as `localize_many` writes them) contoured
        instead of the localizer's boxes
    organs : organs to write and report (None: all the model knows)
    probabilities, overlay : folders for per-organ posteriors (``<stem>/<organ>.nii.gz``) and overlays
    split, fmt : one NIfTI mask per organ; or the label map's format ("nifti", "dicom-seg", "rtstruct")
    resume, threads, retries, progress : as `imageforest.batches.run_batch` (threads: numba threads per scan)
    """
    absolute = lambda p: None if p is None else Path(p).absolute()  # noqa: E731
    # Absolute paths: a remote worker runs in a folder of its own (the JSON's "scan" names the absolute path).
    scans = [Path(p).absolute() for p in paths]
    json_dir = absolute(json) or absolute(out)
    items = plan_contour_batch(scans, json_dir, absolute(out), absolute(probabilities), absolute(overlay), split,
                               fmt)
    job = ContourJob(None if model is None else str(Path(model).resolve()),
                     None if localizer is None else str(Path(localizer).resolve()),
                     tuple(organs) if organs else None, threads, split, fmt,
                     boxes_dir=None if boxes is None else str(Path(boxes).absolute()))
    return run_batch(job, items, json_dir, client, resume=resume, retries=retries,
                     model_name=job.model_path or "default", progress=progress)
