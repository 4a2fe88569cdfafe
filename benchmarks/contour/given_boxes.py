"""What correcting the localizer's boxes is worth: `imageforest contour --boxes` on unseen scans, through the
command's own path (`contour_file` with a boxes document), beside contouring after the localizer.

    python benchmarks/contour/given_boxes.py ../shared/data/openkbp-hn --model F --localizer L [--fold 0]
        [--cases 12] [--correct Larynx,Esophagus]

F and L: a fold's contour forest and a localizer trained on the same scans (`cross_validate.py --save-models`), so
that fold's test scans are unseen by both. Per scan, three runs of the same forest:
- after the localizer (`imageforest contour SCAN --model F --localizer L`);
- in the localizer's own boxes written as `imageforest localize` writes them and read back (`--boxes`): the same
  labels are expected, the check that the document's path loses nothing;
- in the localizer's boxes with the organs of `--correct` replaced by their reference boxes (a reviewer who fixed
  those), and in the reference boxes of every organ (a reviewer who fixed them all).
Dice per organ (SpinalCord and Esophagus inside the reference's axial extent, as `cross_validate.py` scores them)
and the seconds per scan of each run.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.contour.cross_validate import AXIAL_ONLY, fold_split, with_recipe_settings
from benchmarks.contour.scores import organ_scores
from imageforest.apps.contour.api import contour_file, load_contourer
from imageforest.apps.localize.api import load_localizer, localize_file
from imageforest.imaging.ct_organs import openkbp_cases
from imageforest.imaging.io import read_image


def boxes_document(document: dict, truth: np.ndarray, organs: list[str], correct: set[str]) -> dict:
    """`localize`'s `document` with the organs of `correct` given their reference boxes `truth` (n, 6) mm (marked
    absent where the reference lacks them)."""
    out = json.loads(json.dumps(document))
    for k, name in enumerate(organs):
        if name not in correct:
            continue
        if np.isnan(truth[k]).any():
            out["organs"][name] = {"present": False}
        else:
            out["organs"][name] = {"present": True, "box_mm": {a: [float(truth[k][2 * i]), float(truth[k][2 * i + 1])]
                                                               for i, a in enumerate("xyz")}}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", type=Path)
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--localizer", type=Path, required=True)
    ap.add_argument("--fold", type=int, default=0)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--cases", type=int, default=12)
    ap.add_argument("--correct", default="Larynx,Esophagus")
    args = ap.parse_args()
    cases, organs = openkbp_cases(args.data)
    test = [cases[i] for i in np.flatnonzero(fold_split(len(cases), args.folds) == args.fold)][:args.cases]
    model = with_recipe_settings(load_contourer(args.model))
    localizer = load_localizer(args.localizer)
    correct = {o.strip() for o in args.correct.split(",") if o.strip()}
    runs = ("localizer", "document", f"corrected {','.join(sorted(correct))}", "all boxes corrected")
    axial = tuple(organs.index(o) for o in AXIAL_ONLY)
    dice = {r: [] for r in runs}
    seconds = {r: [] for r in runs}
    identical = 0
    with tempfile.TemporaryDirectory() as work:
        for case in test:
            truth_labels = np.asarray(read_image(case.labels).array)
            truth_boxes = np.asarray(case.boxes, dtype=np.float64)
            located, _, _ = localize_file(case.scan, localizer)
            docs = {"document": located,
                    runs[2]: boxes_document(located, truth_boxes, organs, correct),
                    runs[3]: boxes_document(located, truth_boxes, organs, set(organs))}
            labels = {}
            for run in runs:
                t0 = time.perf_counter()
                if run == "localizer":
                    _, contours, scan = contour_file(case.scan, model, localizer, posterior=False)
                else:
                    path = Path(work) / f"{Path(case.scan).name.split('.')[0]}.json"
                    path.write_text(json.dumps(docs[run]))
                    _, contours, scan = contour_file(case.scan, model, posterior=False, boxes=path)
                seconds[run].append(time.perf_counter() - t0)
                labels[run] = contours.labels.array
                scores = organ_scores(labels[run], truth_labels, len(organs), scan.spacing[::-1], axial)
                dice[run].append(scores["dice_axial"])
            identical += int(np.array_equal(labels["localizer"], labels["document"]))
            print(f"{case.name}: " + " | ".join(f"{r} {np.nanmean(dice[r][-1]):.3f}" for r in runs), flush=True)
    print(f"\n{len(test)} scans of fold {args.fold}; labels from the localizer's own document identical to the "
          f"localizer's on {identical} of {len(test)}")
    print(f"{'run':<34}" + "".join(f"{o[:10]:>11}" for o in organs) + f"{'mean':>8}{'s/scan':>8}")
    for run in runs:
        per = np.nanmean(np.array(dice[run], dtype=np.float64), axis=0)
        print(f"{run:<34}" + "".join(f"{d:>11.3f}" for d in per) + f"{np.nanmean(per):>8.3f}"
              f"{np.median(seconds[run]):>8.2f}")


if __name__ == "__main__":
    main()
