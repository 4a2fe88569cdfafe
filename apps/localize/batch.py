"""Localizing an archive of scans: in this process, or as Dask tasks on a local or remote cluster.

    from imageforest.apps.localize.batch import localize_many
    report = localize_many(paths, "out/")                  # in this process, one scan after another
    report = localize_many(paths, "out/", client=client)   # on a dask.distributed cluster

The batch itself (atomic outputs with the JSON last, `resume`, retries on another worker, the report in
``OUT/batch_report.json``) is `imageforest.batches`, shared by every application; this module says what localizing
one scan is (`LocalizeJob`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from imageforest.batches import (  # noqa: F401  (expand_scan_arguments and is_complete are part of this API)
    REPORT_NAME,
    SCAN_SUFFIXES,
    BatchItem,
    expand_scan_arguments,
    is_complete,
    run_batch,
)
from imageforest.batches import plan_batch as _plan_batch


@dataclass(frozen=True)
class LocalizeJob:
    """Localizing one scan with the model at `model_path` (None: the shipped one) on `threads` numba threads,
    reporting `organs` (None: all)."""

    model_path: str | None = None
    organs: tuple[str, ...] | None = None
    threads: int | None = None
    task_name: str = "localize"

    def model_files(self) -> list[str]:
        from imageforest.apps.localize.api import DEFAULT_MODEL

        return [self.model_path or str(DEFAULT_MODEL)]

    def load(self):
        from imageforest.apps.localize.api import load_localizer

        model = load_localizer(self.model_path)
        model.n_jobs = self.threads
        return model

    def check(self, model) -> None:
        from imageforest.apps.localize.api import check_organs

        check_organs(model, list(self.organs) if self.organs else None)

    def run(self, model, item: BatchItem, timing: dict[str, float]) -> dict:
        from imageforest.apps.localize.api import localize_file
        from imageforest.apps.localize.report import write_json, write_mask

        organs = list(self.organs) if self.organs else None
        document, result, image = localize_file(item.scan, model, organs)
        if item.overlay is not None:
            from imageforest.apps.localize.overlay import write_overlay

            write_overlay(result, item.overlay, title=item.scan.name, organs=organs)
        if item.mask is not None:
            write_mask(result, image, item.mask, organs)
        document["timing_s"].update(timing)
        write_json(document, item.json)
        return document


def plan_batch(scans: list[Path], out: str | os.PathLike, overlay: bool | str | os.PathLike = False,
               mask: bool | str | os.PathLike = False) -> list[BatchItem]:
    """Every scan's outputs: ``<stem>.json`` in the folder `out`; with `overlay` / `mask` also
    ``<stem>_overlay.png`` / ``<stem>_boxes.nii.gz`` in `out` (True) or in the folder given."""
    return _plan_batch(scans, out, {"overlay": (overlay, "_overlay.png"), "mask": (mask, "_boxes.nii.gz")},
                       SCAN_SUFFIXES)


def localize_many(paths: Iterable[str | os.PathLike], out: str | os.PathLike, client=None, *,
                  model: str | os.PathLike | None = None, organs: list[str] | None = None,
                  overlay: bool | str | os.PathLike = False, mask: bool | str | os.PathLike = False,
                  resume: bool = False, threads: int | None = None, retries: int = 1,
                  progress: Callable[[str], None] | None = None) -> dict:
    """Localize every scan of `paths` into the folder `out`; returns the batch report (also written to
    ``out/batch_report.json``; its layout is `imageforest.batches.run_batch`'s, timings ``read``, ``localize``,
    ``total``, ``model_load``, ``wall``).

    Parameters
    ----------
    paths : scan files or DICOM folders (expand ``@list.txt`` and globs with `expand_scan_arguments` first)
    out : output folder (created when missing)
    client : dask.distributed.Client or None
        None localizes in this process, one scan after another; with a client every scan is a task.
    model : localizer model file (None: the shipped default model); a cluster's workers must see the same path
    organs : organs to report (None: all the model knows)
    overlay, mask : also write ``<stem>_overlay.png`` / ``<stem>_boxes.nii.gz``, in `out` (True) or the folder
        given
    resume : skip scans whose outputs are already complete (`is_complete`)
    threads : numba threads per scan (None: all cores in this process; on a cluster each worker's own default)
    retries : further attempts for a failed scan (on another worker when there is one)
    progress : callable(str), one line per finished scan
    """
    # Absolute paths: a remote worker runs in a folder of its own (the JSON's "scan" names the absolute path).
    scans = [Path(p).absolute() for p in paths]
    items = plan_batch(scans, Path(out).absolute(), *(x if isinstance(x, bool) else Path(x).absolute()
                                                      for x in (overlay, mask)))
    model_path = None if model is None else str(Path(model).resolve())
    job = LocalizeJob(model_path, tuple(organs) if organs else None, threads)
    return run_batch(job, items, out, client, resume=resume, retries=retries, model_name=model_path or "default",
                     progress=progress)
