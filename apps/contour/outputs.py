"""What `imageforest contour` writes for one scan: the label map (NIfTI, one mask per organ, DICOM-SEG or RT
Structure Set), per-organ posteriors, the overlay, and the JSON document, staged and moved into place together
with the JSON last (a JSON that exists is a finished scan: batches resume by it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from imageforest.apps.contour.model import Contours
from imageforest.imaging.io import Image


@dataclass(frozen=True)
class ScanOutputs:
    """Where one scan's outputs go (None: not asked for).

    json : the JSON document
    out : the label map file (`fmt` "nifti", "dicom-seg" or "rtstruct"), or with `split` a folder of
        ``<organ>.nii.gz`` masks
    probabilities : folder of ``<organ>.nii.gz`` float32 posteriors
    overlay : PNG
    """

    json: Path | None = None
    out: Path | None = None
    probabilities: Path | None = None
    overlay: Path | None = None
    split: bool = False
    fmt: str = "nifti"


def chosen_labels(labels: Image, organs: tuple[str, ...], wanted: list[str] | None) -> tuple[Image, list[int]]:
    """The label map with only the `wanted` organs (None: all) and their indices in `organs`."""
    chosen = [k for k, name in enumerate(organs) if not wanted or name in wanted]
    if not wanted:
        return labels, chosen
    keep = labels.array.copy()
    keep[~np.isin(keep, [k + 1 for k in chosen])] = 0
    return Image(keep, labels.spacing, labels.origin, labels.direction, source=labels.source), chosen


def write_outputs(document: dict, contours: Contours, scan: Image, organs: tuple[str, ...],
                  wanted: list[str] | None, where: ScanOutputs, title: str, version: str = "") -> None:
    """Write one scan's outputs, all moved into place together (or none), the JSON last; notes of the DICOM
    writers join the document's warnings."""
    from imageforest.imaging.io import write_image
    from imageforest.outputs import StagedOutputs, write_json

    labels, chosen = chosen_labels(contours.labels, organs, wanted)
    with StagedOutputs() as staged:
        if where.out is not None:
            if where.split:
                where.out.mkdir(parents=True, exist_ok=True)
                for k in chosen:
                    mask = Image((labels.array == k + 1).astype("uint8"), labels.spacing, labels.origin,
                                 labels.direction)
                    write_image(mask, staged.path(where.out / f"{organs[k]}.nii.gz"), scan.file_orientation)
            elif where.fmt == "nifti":
                write_image(labels, staged.path(where.out), scan.file_orientation)
            else:
                from imageforest.apps.contour.dicom import write_dicom_seg, write_rtstruct

                writer = write_dicom_seg if where.fmt == "dicom-seg" else write_rtstruct
                _, notes = writer(labels, scan.source, list(organs), staged.path(where.out), chosen, version)
                document.setdefault("warnings", []).extend(notes)
        if where.probabilities is not None and contours.posterior is not None:
            where.probabilities.mkdir(parents=True, exist_ok=True)
            for k in chosen:
                prob = Image(contours.posterior[k].astype("float32"), labels.spacing, labels.origin,
                             labels.direction)
                write_image(prob, staged.path(where.probabilities / f"{organs[k]}.nii.gz"),
                            scan.file_orientation)
        if where.overlay is not None:
            from imageforest.apps.contour.overlay import write_overlay

            write_overlay(contours, organs, staged.path(where.overlay), scan, title=title, organs=wanted)
        if where.json is not None:
            write_json(document, staged.path(where.json), indent=2)
