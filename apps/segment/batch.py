"""Segmenting a folder of pictures or volumes with one saved model: in this process, or as Dask tasks.

    from imageforest.apps.segment.batch import segment_many
    report = segment_many(paths, "masks/", model="cells.npz")                  # here, one image after another
    report = segment_many(paths, "masks/", model="cells.npz", client=client)   # on a dask.distributed cluster

The batch itself (atomic outputs with the JSON last, `resume`, a retry on another worker, the report in
``batch_report.json`` beside the JSON documents) is `imageforest.batches`, shared with `localize` and `contour`; this
module says what segmenting one image is (`SegmentJob`): the model is loaded once per worker and applied to each
image (its posterior regularised by the graph cut, as `imageforest segment IMAGE --model M` does).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from imageforest.apps.segment.image_files import PICTURE_SUFFIXES
from imageforest.batches import SCAN_SUFFIXES, BatchItem, plan_batch, run_batch
from imageforest.imaging.ome_zarr import is_zarr_path

# Suffixes an image's name loses in its outputs' names; a picture's mask is a palette PNG, a volume's a NIfTI file,
# and an OME-Zarr image's outputs are OME-Zarr images again (on its scale and origin)
IMAGE_SUFFIXES = (".ome.zarr", ".zarr", *SCAN_SUFFIXES, *PICTURE_SUFFIXES)
PICTURE_OUTPUTS = {"out": ".png", "probabilities": "_proba.tif", "uncertainty": "_uncertainty.tif"}
VOLUME_OUTPUTS = {"out": ".nii.gz", "probabilities": "_proba.nii.gz", "uncertainty": "_uncertainty.nii.gz"}
ZARR_OUTPUTS = {"out": ".ome.zarr", "probabilities": "_proba.ome.zarr", "uncertainty": "_uncertainty.ome.zarr"}


def is_picture(path: Path) -> bool:
    """Whether `path` names a picture (by its suffix) rather than a volume (a volume file or a DICOM folder)."""
    return path.name.lower().endswith(PICTURE_SUFFIXES)


@dataclass(frozen=True)
class SegmentJob:
    """Segmenting one image with the saved model at `model_path` on `threads` numba threads."""

    model_path: str
    threads: int | None = None
    task_name: str = "segment"

    def model_files(self) -> list[str]:
        return [self.model_path]

    def load(self):
        from imageforest.apps.segment.api import load_segmentation_model

        model = load_segmentation_model(self.model_path)
        model.n_jobs = self.threads
        return model

    def check(self, model) -> None:
        """Every model loads and validates in `load`; nothing more to check before the images."""

    def run(self, model, item: BatchItem, timing: dict[str, float]) -> dict:
        from imageforest import __version__
        from imageforest.apps.segment.api import segment_file
        from imageforest.apps.segment.image_files import staged_labels, write_labels, write_map, write_overlay
        from imageforest.estimators.base import numba_threads
        from imageforest.outputs import StagedOutputs, write_json

        t0 = time.perf_counter()
        maps = item.probabilities is not None or item.uncertainty is not None
        with numba_threads(self.threads), staged_labels(item.out, item.overlay, maps) as staging:
            result, picture, _ = segment_file(item.scan, model=model, maps=maps, labels_to=staging)
            t_segment = time.perf_counter() - t0
            with StagedOutputs() as out:  # an image's outputs move into place together, the JSON after them
                if item.out is not None:
                    write_labels(result.labels, out.path(item.out), picture)
                if item.probabilities is not None:
                    write_map(result.probabilities, out.path(item.probabilities), picture)
                if item.uncertainty is not None:
                    write_map(result.uncertainty, out.path(item.uncertainty), picture)
                if item.overlay is not None:
                    write_overlay(picture, result.labels, out.path(item.overlay))
            document = segmentation_document(item.scan, result, picture, __version__)
        document["outputs"] = {kind: str(path) for kind, path in item.outputs.items()}
        document["timing_s"] = {**timing, "segment": round(t_segment, 4),
                                "total": round(time.perf_counter() - t0, 4)}
        write_json(document, item.json)
        return document


def segmentation_document(scan: Path, result, picture, version: str) -> dict:
    """The JSON document of one segmented image: its grid and, per class (label value), the pixels (voxels)
    assigned to it, their share and the mean posterior of that class over them."""
    labels = result.labels
    n = max(int(labels.size), 1)
    classes = []
    means = result.mean_posterior()
    for k, (c, count) in enumerate(zip(result.classes, result.pixel_counts(), strict=True)):
        count = int(count)
        mean_p = float(means[k]) if count else None
        classes.append({"label": int(c), "pixels": count, "share": round(count / n, 6),
                        "mean_posterior": None if mean_p is None else round(mean_p, 4)})
    return {"scan": str(scan), "imageforest_version": version, "kind": "picture" if picture.ndim == 2 else "volume",
            "shape": [int(s) for s in labels.shape],
            "spacing_mm": [float(s) for s in picture.spacing] if picture.ndim == 3 else None,  # x, y, z
            "classes": classes}


def plan_segment_batch(images: list[Path], json_dir: Path, out: Path | None = None,
                       probabilities: Path | None = None, uncertainty: Path | None = None,
                       overlay: Path | None = None) -> list[BatchItem]:
    """Every image's outputs: ``<stem>.json`` in `json_dir`; the mask ``<stem>.png`` (a picture),
    ``<stem>.nii.gz`` (a volume) or ``<stem>.ome.zarr`` (an OME-Zarr image) in `out`;
    ``<stem>_proba.tif|.nii.gz|.ome.zarr`` and ``<stem>_uncertainty.tif|.nii.gz|.ome.zarr`` in `probabilities` and
    `uncertainty`; ``<stem>_overlay.png`` in `overlay`. Folders are created when missing."""
    wanted = {"out": out, "probabilities": probabilities, "uncertainty": uncertainty, "overlay": overlay}
    outputs = {kind: (target or False, PICTURE_OUTPUTS.get(kind, "_overlay.png")) for kind, target in wanted.items()}
    items = plan_batch(images, json_dir, outputs, IMAGE_SUFFIXES)
    planned = []
    for item in items:
        if is_picture(item.scan):
            planned.append(item)
            continue
        suffixes = ZARR_OUTPUTS if is_zarr_path(item.scan) else VOLUME_OUTPUTS
        moved = {kind: path.with_name(path.name[:-len(PICTURE_OUTPUTS[kind])] + suffixes[kind])
                 if kind in suffixes else path for kind, path in item.outputs.items()}
        planned.append(dataclasses.replace(item, outputs=moved))
    return planned


def segment_many(paths: Iterable[str | os.PathLike], out: str | os.PathLike, model: str | os.PathLike,
                 client=None, *, json: str | os.PathLike | None = None,
                 probabilities: str | os.PathLike | None = None, uncertainty: str | os.PathLike | None = None,
                 overlay: str | os.PathLike | None = None, resume: bool = False, threads: int | None = None,
                 retries: int = 1, progress: Callable[[str], None] | None = None) -> dict:
    """Segment every image of `paths` with the saved `model` into the folder `out`; returns the batch report
    (``batch_report.json`` beside the JSON documents, in `json` or `out`).

    Parameters
    ----------
    paths : pictures, volume files, DICOM series folders or OME-Zarr images (expand ``@list.txt`` and globs with
        `imageforest.batches.expand_scan_arguments` first)
    out : folder of the masks (created when missing)
    model : a saved segmentation model (.npz); a cluster's workers must see the same path
    client : dask.distributed.Client or None (None: in this process, one image after another)
    json : folder of the JSON documents and the report (None: `out`)
    probabilities, uncertainty, overlay : folders for per-class posteriors, entropy maps and overlay PNGs
    resume, threads, retries, progress : as `imageforest.batches.run_batch` (threads: numba threads per image)
    """
    absolute = lambda p: None if p is None else Path(p).absolute()  # noqa: E731
    images = [Path(p).absolute() for p in paths]
    json_dir = absolute(json) or absolute(out)
    items = plan_segment_batch(images, json_dir, absolute(out), absolute(probabilities), absolute(uncertainty),
                               absolute(overlay))
    job = SegmentJob(str(Path(model).resolve()), threads)
    return run_batch(job, items, json_dir, client, resume=resume, retries=retries, model_name=job.model_path,
                     progress=progress)
