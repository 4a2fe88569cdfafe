"""Training a localizer from a folder of scans with label maps or boxes (`imageforest train-localizer`)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from imageforest.apps.localize.model import OrganLocalizer
from imageforest.exceptions import InvalidInputError
from imageforest.imaging.ct import read_scan
from imageforest.imaging.ct_organs import Case, OrganSlices, openkbp_cases
from imageforest.imaging.io import read_image

SCAN_PATTERN = re.compile(r"^(?P<case>.+)_ct\.(?P<ext>nii\.gz|nii|nrrd|mha|mhd)$", re.IGNORECASE)


def find_cases(data_dir: str | Path, organs: list[str] | None) -> tuple[list[Case], list[str]]:
    """Cases of `data_dir`: the openkbp-hn layout (boxes.json) or `<case>_ct.<ext>` + `<case>_organs.<ext>`."""
    folder = Path(data_dir)
    if not folder.is_dir():
        raise InvalidInputError(f"{folder}: no such folder")
    if (folder / "boxes.json").is_file():
        cases, names = openkbp_cases(folder)
        if organs and organs != names:
            raise InvalidInputError(f"{folder}/boxes.json names the organs {', '.join(names)}; --organs differs")
        return cases, names
    scans = [p for p in sorted(folder.iterdir()) if SCAN_PATTERN.match(p.name)]
    if not scans:
        raise InvalidInputError(f"{folder}: no CT scans found (`<case>_ct.nii.gz` beside `<case>_organs.nii.gz`, "
                                "or the openkbp-hn layout with boxes.json)")
    if not organs:
        raise InvalidInputError("give the organ names for label values 1, 2, ... (--organs), or a boxes.json")
    cases = []
    for path in sorted(folder.iterdir()):
        m = SCAN_PATTERN.match(path.name)
        if not m:
            continue
        labels = folder / f"{m['case']}_organs.{m['ext']}"
        if not labels.is_file():
            raise InvalidInputError(f"{path}: no label map {labels.name} beside it")
        cases.append(Case(m["case"], path, labels))
    if not cases:
        raise InvalidInputError(f"{folder}: no `<case>_ct.nii.gz` scans found")
    return cases, list(organs)


def case_truth(case: Case, n_organs: int) -> OrganSlices | np.ndarray:
    """The case's truth: per-slice label bounds when a label map exists, else its boxes."""
    if case.labels is not None:
        labels = read_image(case.labels)
        return OrganSlices.from_labels(labels, list(range(1, n_organs + 1)))
    if case.boxes is None:
        raise InvalidInputError(f"{case.name}: neither a label map nor boxes")
    return case.boxes


def train_localizer(cases: list[Case], organs: list[str], progress: Callable[[str], None] | None = None,
                    name: str = "custom", version: str = "1", data_note: str = "", run_jobs=None,
                    **params) -> OrganLocalizer:
    """Read `cases`, fit an `OrganLocalizer` with `params`, and record a model card. `run_jobs` runs the
    independent forests (see `OrganLocalizer.fit`; e.g. `imageforest.cluster.dask_jobs`)."""
    from imageforest.apps.localize.model import remaining

    say = progress or (lambda _msg: None)
    scans, truths = [], []
    t0 = time.perf_counter()
    for k, case in enumerate(cases):
        scans.append(read_scan(case.scan))
        truths.append(case_truth(case, len(organs)))
        if (k + 1) % 10 == 0 or k + 1 == len(cases):
            elapsed = time.perf_counter() - t0
            say(f"read {k + 1}/{len(cases)} scans ({elapsed:.0f} s; {remaining(elapsed, k + 1, len(cases))} for "
                "reading)")
    model = OrganLocalizer(organs=list(organs), **params)
    model.fit(scans, truths, progress=say, run_jobs=run_jobs)
    present = np.array([[not np.isnan(b[0]) for b in (t.boxes() if isinstance(t, OrganSlices) else t)]
                        for t in truths])
    model.model_card_ = {
        "name": name, "version": version, "data": data_note or f"{len(cases)} scans",
        "cases": [c.name for c in cases], "organs": list(organs),
        "organ_counts": {o: int(n) for o, n in zip(organs, present.sum(axis=0), strict=True)},
        "working_spacing_mm": float(model.spacing_mm),
        "parameters": model.saved_hyper_parameters(),
    }
    return model


def train_from_folder(data_dir: str | Path, organs: list[str] | None = None, progress=None, name: str = "custom",
                      run_jobs=None, n_cases: int | None = None, **params) -> OrganLocalizer:
    """`imageforest train-localizer`: every case of `data_dir` (or its first `n_cases`, by name)."""
    cases, names = find_cases(data_dir, organs)
    if n_cases is not None:
        if n_cases < 1:
            raise InvalidInputError(f"--cases must be at least 1, got {n_cases}")
        cases = cases[:n_cases]
    if progress is not None:
        progress(training_cost(len(cases)))
    return train_localizer(cases, names, progress=progress, name=name, data_note=str(data_dir), run_jobs=run_jobs,
                           **params)


# What training with the default recipe took on a 2-core machine (openkbp-hn scans of 128^3 voxels, peak resident
# memory of the whole command): 20 cases 127 s and 0.99 GB, 203 cases 1,469 s and 7.4 GB (the first stage's
# integral images of every working volume make the peak).
COST_PER_CASE_GB, COST_BASE_GB = 0.035, 0.3
COST_PER_CASE_S, COST_BASE_S = 7.2, 20.0


def training_cost(n_cases: int) -> str:
    """The line `train-localizer` says first: about how long and how much memory training `n_cases` scans of
    the usual size takes with the default recipe (larger scans cost more), and how to take less."""
    gigabytes = COST_BASE_GB + COST_PER_CASE_GB * n_cases
    minutes = (COST_BASE_S + COST_PER_CASE_S * n_cases) / 60.0
    line = (f"training on {n_cases} cases: about {minutes:.0f} min and {gigabytes:.1f} GB of memory on 2 cores "
            "(128^3 scans, the default recipe)")
    return line + ("; --cases N trains on fewer" if gigabytes > 4.0 else "")
