"""The contourer's entry points shared by the CLI, the napari plugin and the benchmarks.

    from imageforest.apps.contour import load_contourer, contour_file
    model = load_contourer()                          # the shipped head-and-neck model
    document, contours, scan = contour_file("scan.nii.gz", model)
    contours.labels                                   # Image uint8 on the scan's grid: label k = k-th organ
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import SimpleITK as sitk

from imageforest.apps.contour.model import Contours, OrganContourer
from imageforest.apps.localize.api import model_identity
from imageforest.exceptions import InvalidInputError
from imageforest.forest.serialization import model_file
from imageforest.imaging.ct import read_scan, scan_warnings
from imageforest.imaging.ct_organs import index_box_to_mm
from imageforest.imaging.io import Image, resample

DEFAULT_MODEL = Path(__file__).parent / "models" / "hn_contours.npz"
# Scans finer than this share of the training grid along an axis are contoured on a coarser working grid: the
# forest's boxes are in mm, but a 1 mm scan has 20x the voxels to walk down the trees.
FINE_SHARE = 0.6
# An organ whose calibrated mean posterior is under this is named in the JSON's warnings for review: likely fewer
# than half of its voxels are the organ. On the 82 validation scans of the fold-0 forest (a localizer trained on its
# 80 scans) the mean posterior's correlation with Dice was 0.67; under 0.5, 38 of 432 contours were flagged, 23 of
# them under Dice 0.5 (of 42 such); on fold 0's 40 test scans 13 of 204 flagged, 6 under 0.5 (of 19), the flagged
# scoring 0.44 mean Dice against 0.72 for the rest.
REVIEW_BELOW = 0.5


def load_contourer(path: str | Path | None = None) -> OrganContourer:
    """Load a contour model file (default: the shipped head-and-neck model)."""
    return OrganContourer.load(model_file(path, DEFAULT_MODEL))


def check_organs(model: OrganContourer, organs: list[str] | None) -> list[str] | None:
    """A user's organ selection, checked against the model's organs (None: all)."""
    if not organs:
        return None
    unknown = [o for o in organs if o not in model.organs]
    if unknown:
        raise InvalidInputError(f"unknown organ(s) {', '.join(unknown)}; this model contours "
                                f"{', '.join(model.organs)}")
    return organs


def check_localizer(model: OrganContourer, localizer) -> None:
    """Refuse a localizer that does not find every organ the contour model needs."""
    missing = [o for o in model.organs if o not in localizer.organs]
    if missing:
        raise InvalidInputError(f"the localizer does not find {', '.join(missing)}, which the contour model needs")


def localized_boxes(model: OrganContourer, localizer, scan: Image) -> np.ndarray:
    """The localizer's boxes (n_organs, 6) mm for the contourer's organs, NaN rows for absent organs."""
    return localized(model, localizer, scan)[0]


def localized(model: OrganContourer, localizer, scan: Image) -> tuple[np.ndarray, np.ndarray]:
    """The localizer's boxes (n_organs, 6) mm for the contourer's organs (NaN rows for absent organs) and its
    evidence (n_organs, 2): each organ's presence probability and mean wall spread in mm (NaN without a spread),
    which the contourer's absence check reads."""
    check_localizer(model, localizer)
    found = localizer.localize(scan)
    boxes = found.boxes()
    rows = [localizer.organs.index(o) for o in model.organs]
    evidence = np.full((len(rows), 2), np.nan)
    for i, j in enumerate(rows):
        organ = found.organs[j]
        spread = np.asarray(organ.box_std_mm, dtype=np.float64)
        evidence[i] = (float(organ.probability), float(np.nanmean(spread)) if np.isfinite(spread).any() else np.nan)
    return boxes[rows], evidence


def working_scan(model: OrganContourer, scan: Image) -> Image:
    """The scan itself, or resampled to the training grid's spacing when it is much finer."""
    spacing = np.asarray(model.training_summary_.get("spacing_mm", (3.9, 3.9, 2.5)), dtype=np.float64) \
        if getattr(model, "training_summary_", None) else np.array([3.9, 3.9, 2.5])
    if np.all(np.asarray(scan.spacing) >= FINE_SHARE * spacing):
        return scan
    target = np.maximum(np.asarray(scan.spacing), spacing)
    out = resample(Image(scan.array.astype(np.float32), scan.spacing, scan.origin, scan.direction,
                         source=scan.source), target, "linear", fill=-1024.0)
    return out


def back_to_scan(contours: Contours, work: Image, scan: Image, posterior: bool = True) -> Contours:
    """Contours computed on a working grid, carried to the scan's grid (labels by nearest neighbour, posteriors
    linearly; without `posterior` they are dropped: on a 512 x 512 x 300 scan they take 2.2 GB)."""
    if work is scan:
        return contours if posterior else replace(contours, posterior=None)
    ref = scan.to_sitk()

    def carry(arr: np.ndarray, linear: bool) -> np.ndarray:
        img = sitk.GetImageFromArray(arr)
        img.SetSpacing(tuple(float(v) for v in work.spacing))
        img.SetOrigin(tuple(float(v) for v in work.origin))
        img.SetDirection(tuple(float(v) for v in np.ravel(work.direction)))
        kind = sitk.sitkLinear if linear else sitk.sitkNearestNeighbor
        return sitk.GetArrayFromImage(sitk.Resample(img, ref, sitk.Transform(), kind, 0.0))

    labels = carry(contours.labels.array, False).astype(np.uint8)
    post = None
    if posterior and contours.posterior is not None:
        post = np.empty((len(contours.posterior), *labels.shape), dtype=np.float32)
        for k, p in enumerate(contours.posterior):
            post[k] = carry(p, True)
    image = Image(labels, scan.spacing.copy(), scan.origin.copy(), scan.direction.copy(), source=scan.source)
    return Contours(image, post, contours.region, contours.present, contours.mean_posterior)


def contour_scan(scan: Image, model: OrganContourer, localizer=None, posterior: bool = True,
                 boxes: tuple[np.ndarray, np.ndarray | None] | None = None) -> tuple[Contours, dict]:
    """Contours of a scan already read (on its grid) and the time each step took (s); without `posterior` the
    per-organ posterior volumes are not kept (the JSON's mean posteriors are). `boxes`: the organs' boxes
    (n_organs, 6) LPS mm in the model's order (NaN rows: absent) and their evidence (n_organs, 2) or None, given
    instead of the localizer's (see `imageforest.apps.contour.boxes.read_boxes`)."""
    t0 = time.perf_counter()
    work = working_scan(model, scan)
    if boxes is None:
        if localizer is None:
            from imageforest.apps.localize.api import load_localizer

            localizer = load_localizer()
        given, evidence = localized(model, localizer, work)
    else:
        given, evidence = boxes
    t1 = time.perf_counter()
    contours = back_to_scan(model.contour(work, given, evidence), work, scan, posterior)
    t2 = time.perf_counter()
    return contours, {"localize" if boxes is None else "boxes": t1 - t0, "contour": t2 - t1}


def contour_file(path: str | Path, model: OrganContourer, localizer=None, organs: list[str] | None = None,
                 posterior: bool = True, boxes: str | Path | None = None) -> tuple[dict, Contours, Image]:
    """Read a scan, contour its organs and build the JSON document (`contour_json`); `posterior` as for
    `contour_scan`. `boxes`: a boxes document (the JSON `imageforest localize` writes, as written or edited)
    whose boxes are contoured instead of the localizer's; the document names it as "boxes"."""
    from imageforest.apps.contour.boxes import read_boxes, snap_to_faces

    t0 = time.perf_counter()
    given = None if boxes is None else read_boxes(boxes, model.organs, scan=path)
    scan = read_scan(path)
    if given is not None:
        given = (snap_to_faces(given[0], scan), given[1])
    t1 = time.perf_counter()
    contours, timing = contour_scan(scan, model, localizer, posterior, given)
    timing = {"read": t1 - t0, **timing, "total": time.perf_counter() - t0}
    document = contour_json(contours, scan, str(path), model, timing, organs)
    if boxes is not None:
        document["boxes"] = str(boxes)
    document["warnings"] = scan_warnings(scan)
    emptied = [row["name"] for row in document["organs"]
               if not row["present"] and contours.present[model.organs.index(row["name"])]]
    if emptied:
        source = "the localizer" if boxes is None else Path(boxes).name
        document["warnings"].append(f"{', '.join(emptied)}: boxed by {source} but given no voxels, judged absent "
                                    f"(too few voxels for the box, or the absence check): review the field of view")
    if model.posterior_calibration is not None:  # raw shares over-state every organ
        doubtful = [f"{row['name']} ({row['mean_posterior']:.2f})" for row in document["organs"]
                    if row["present"] and row["mean_posterior"] is not None and row["mean_posterior"] < REVIEW_BELOW]
        if doubtful:
            document["warnings"].append(f"{', '.join(doubtful)}: mean posterior under {REVIEW_BELOW:g}, likely fewer "
                                        f"than half of the voxels are the organ: review these first")
    if not any(o["present"] for o in document["organs"]):
        document["warnings"].append(f"none of the model's {len(model.organs)} organs was found: the scan may show "
                                    f"none of the anatomy the model knows ({', '.join(model.organs)})")
    return document, contours, scan


def contour_json(contours: Contours, scan: Image, source: str, model: OrganContourer, timing: dict,
                 organs: list[str] | None = None) -> dict:
    """The per-scan document: organs in the model's order (the k-th is label k + 1 of the label map), each with
    `present`, `label`, `volume_ml`, `box_mm` (LPS, outer faces of its voxels) and `mean_posterior` inside it."""
    labels = contours.labels.array
    voxel_ml = float(np.prod(scan.spacing)) / 1000.0
    rows = []
    for k, name in enumerate(model.organs):
        if organs and name not in organs:
            continue
        mask = labels == k + 1
        n = int(mask.sum())
        row = {"name": name, "label": k + 1, "present": n > 0, "volume_ml": round(n * voxel_ml, 3),
               "box_mm": None, "mean_posterior": None, "voxels": n}
        if n:
            zz, yy, xx = np.nonzero(mask)
            box = index_box_to_mm(scan, np.array([xx.min(), yy.min(), zz.min()]),
                                  np.array([xx.max(), yy.max(), zz.max()]))
            row["box_mm"] = {"x": [round(float(box[0]), 2), round(float(box[1]), 2)],
                             "y": [round(float(box[2]), 2), round(float(box[3]), 2)],
                             "z": [round(float(box[4]), 2), round(float(box[5]), 2)]}
            if contours.mean_posterior is not None and np.isfinite(contours.mean_posterior[k]):
                row["mean_posterior"] = round(float(contours.mean_posterior[k]), 4)
            elif contours.posterior is not None:
                row["mean_posterior"] = round(float(contours.posterior[k][mask].mean()), 4)
        rows.append(row)
    return {"scan": source, "model": model_identity(model), "coordinate_system": "LPS",
            "size_xyz": [int(v) for v in scan.size], "spacing_mm_xyz": [float(v) for v in scan.spacing],
            "organs": rows, "timing_s": {k: round(float(v), 4) for k, v in timing.items()}}
