"""Training a contour model from a folder of scans with label maps (`imageforest train-contour`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from imageforest.apps.contour.model import OrganContourer
from imageforest.apps.localize.training import find_cases
from imageforest.exceptions import InvalidInputError
from imageforest.imaging.ct import read_scan
from imageforest.imaging.ct_organs import Case, OrganSlices
from imageforest.imaging.io import read_image


def read_case(case: Case, n_organs: int) -> tuple:
    """(scan, label map (z, y, x) uint8, true boxes (n_organs, 6) mm) of a case with a label map."""
    if case.labels is None:
        raise InvalidInputError(f"{case.name}: contouring is learned from label maps; this case has none")
    scan = read_scan(case.scan)
    labels = read_image(case.labels)
    if labels.array.shape != scan.array.shape:
        raise InvalidInputError(f"{case.labels}: the label map's grid {labels.array.shape} differs from the "
                                f"scan's {scan.array.shape}")
    array = np.asarray(labels.array)
    if array.min() < 0 or array.max() > n_organs:
        raise InvalidInputError(f"{case.labels}: labels must lie in 0..{n_organs} (one per organ)")
    boxes = OrganSlices.from_labels(labels, list(range(1, n_organs + 1))).boxes()
    return scan, array.astype(np.uint8), boxes


def train_from_folder(data_dir: str | Path, organs: list[str] | None = None, progress=None, name: str = "custom",
                      n_cases: int | None = None, **params) -> OrganContourer:
    """`imageforest train-contour`: every case of `data_dir` (or its first `n_cases`, by name)."""
    cases, names = find_cases(data_dir, organs)
    if n_cases is not None:
        if n_cases < 1:
            raise InvalidInputError(f"--cases must be at least 1, got {n_cases}")
        cases = cases[:n_cases]
    return train_contourer(cases, names, progress=progress, name=name, data_note=str(data_dir), **params)


def train_contourer(cases: list[Case], organs: list[str], progress: Callable[[str], None] | None = None,
                    name: str = "custom", version: str = "1", data_note: str = "", **params) -> OrganContourer:
    """Read `cases`, fit an `OrganContourer` with the recipe for these organs (`recipe_for`) updated by `params`,
    and record a model card."""
    from imageforest.apps.contour.recipe import recipe_for

    say = progress or (lambda _msg: None)
    scans, labels, boxes = [], [], []
    t0 = time.perf_counter()
    for k, case in enumerate(cases):
        scan, lab, box = read_case(case, len(organs))
        scans.append(scan)
        labels.append(lab)
        boxes.append(box)
        if (k + 1) % 20 == 0 or k + 1 == len(cases):
            say(f"read {k + 1}/{len(cases)} scans ({time.perf_counter() - t0:.0f} s)")
    model = OrganContourer(organs=tuple(organs), **{**recipe_for(organs), **params})
    model.progress = say
    t1 = time.perf_counter()
    model.fit_scans(scans, labels, boxes)
    model.progress = None
    present = np.array([~np.isnan(b[:, 0]) for b in boxes])
    model.model_card_ = {
        "name": name, "version": version, "data": data_note or f"{len(cases)} scans",
        "cases": [c.name for c in cases], "organs": list(organs),
        "organ_counts": {o: int(n) for o, n in zip(organs, present.sum(axis=0), strict=True)},
        "training_s": round(time.perf_counter() - t1, 1),
        "parameters": model.saved_hyper_parameters(),
    }
    return model
