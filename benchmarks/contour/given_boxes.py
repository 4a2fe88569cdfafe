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
and the seconds per scan of each run. `--figure PNG` draws the scan whose larynx gains the median of the scans'
gains from the corrected boxes: sagittal and coronal planes through its reference larynx, its contour and box from
the localizer (left) and corrected (right), the reference contour dashed.
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

from benchmarks._figures import pyplot, save_png
from benchmarks.contour.cross_validate import (
    AXIAL_ONLY,
    add_fold_model_arguments,
    fold_split,
    with_recipe_settings,
)
from benchmarks.contour.scores import organ_scores
from imageforest.apps.contour.api import contour_file, load_contourer
from imageforest.apps.contour.boxes import boxes_from_document
from imageforest.apps.localize.api import load_localizer, localize_file
from imageforest.imaging.ct import read_scan
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
    add_fold_model_arguments(ap)
    ap.add_argument("--correct", default="Larynx,Esophagus")
    ap.add_argument("--figure", type=Path, default=None, help="PNG of a typical larynx, before and after")
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
    larynx = organs.index("Larynx")
    drawn = []  # (larynx gain, case, its labels and boxes before and after)
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
            gain = dice[runs[2]][-1][larynx] - dice["localizer"][-1][larynx]
            if np.isfinite(gain) and located["organs"]["Larynx"]["present"]:
                drawn.append((float(gain), case, labels["localizer"] == larynx + 1, labels[runs[2]] == larynx + 1,
                              boxes_from_document(located, organs)[0][larynx], truth_boxes[larynx],
                              float(dice["localizer"][-1][larynx]), float(dice[runs[2]][-1][larynx])))
            print(f"{case.name}: " + " | ".join(f"{r} {np.nanmean(dice[r][-1]):.3f}" for r in runs), flush=True)
    print(f"\n{len(test)} scans of fold {args.fold}; labels from the localizer's own document identical to the "
          f"localizer's on {identical} of {len(test)}")
    print(f"{'run':<34}" + "".join(f"{o[:10]:>11}" for o in organs) + f"{'mean':>8}{'s/scan':>8}")
    for run in runs:
        per = np.nanmean(np.array(dice[run], dtype=np.float64), axis=0)
        print(f"{run:<34}" + "".join(f"{d:>11.3f}" for d in per) + f"{np.nanmean(per):>8.3f}"
              f"{np.median(seconds[run]):>8.2f}")
    if args.figure is not None and drawn:
        drawn.sort(key=lambda row: row[0])
        figure(drawn[len(drawn) // 2], args.figure, larynx + 1)
        print(f"wrote {args.figure}: {drawn[len(drawn) // 2][1].name}, the median larynx gain of {len(drawn)} scans")


def figure(row: tuple, out: Path, label: int) -> None:
    """Sagittal and coronal planes through the reference larynx: the contour and box from the localizer (left) and
    with the corrected box (right), the reference contour dashed white."""
    _, case, before, after, box_before, box_after, dice_before, dice_after = row
    scan = read_scan(case.scan)
    truth = np.asarray(read_image(case.labels).array) == label
    ct = np.clip((np.asarray(scan.array, dtype=np.float32) + 160.0) / 400.0, 0.0, 1.0)  # soft-tissue window
    zc, yc, xc = (int(np.rint(v)) for v in np.argwhere(truth).mean(axis=0))
    sz, sy, sx = np.asarray(scan.spacing, dtype=np.float64)[::-1]
    plt = pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(9, 9))
    # (plane, its (z, column) cut, the column's axis in (x, y, z), its spacing, the letters at its ends)
    planes = (("sagittal", lambda a: a[:, :, xc], 1, sy, "A", "P"),
              ("coronal", lambda a: a[:, yc, :], 0, sx, "R", "L"))
    reach = 50.0  # mm around the reference larynx's centre
    for row_k, (plane, cut, column, across, left, right) in enumerate(planes):
        lo_z, hi_z = max(zc - int(reach / sz), 0), min(zc + int(reach / sz) + 1, ct.shape[0])
        centre = (yc, xc)[1 - column]
        lo_c, hi_c = max(centre - int(reach / across), 0), min(centre + int(reach / across) + 1, ct.shape[2 - column])
        for col, (name, mask, box, d) in enumerate((("localizer's box", before, box_before, dice_before),
                                                    ("corrected box", after, box_after, dice_after))):
            ax = axes[row_k, col]
            window = (slice(lo_z, hi_z), slice(lo_c, hi_c))
            img = cut(ct)[window]
            extent = ((lo_c - 0.5) * across, (hi_c - 0.5) * across, (lo_z - 0.5) * sz, (hi_z - 0.5) * sz)
            ax.imshow(img, cmap="gray", origin="lower", extent=extent, interpolation="nearest")
            colour = "#e6194b" if col == 0 else "#3cb44b"
            for m, style, c in ((cut(truth)[window], "dashed", "white"), (cut(mask)[window], "solid", colour)):
                if m.any():
                    ax.contour(m.astype(float), levels=[0.5], colors=[c], linestyles=style, linewidths=1.5,
                               origin="lower", extent=extent)
            corners = scan.physical_to_index(np.array([box[0::2], box[1::2]]))  # (x, y, z) continuous indices
            u = sorted(corners[:, column] * across)
            v = sorted(corners[:, 2] * sz)
            ax.add_patch(plt.Rectangle((u[0], v[0]), u[1] - u[0], v[1] - v[0], fill=False, edgecolor=colour,
                                       linestyle="--", linewidth=1.2))
            ax.set_title(f"{plane}, {name}: larynx Dice {d:.2f}", fontsize=10)
            ax.set_xticks([])
            ax.set_yticks([])
            w = extent[1] - extent[0]
            ax.text((extent[0] + extent[1]) / 2, extent[3] - 3, "S", color="yellow", fontsize=11, va="top")
            ax.text((extent[0] + extent[1]) / 2, extent[2] + 3, "I", color="yellow", fontsize=11)
            ax.text(extent[0] + 0.03 * w, (extent[2] + extent[3]) / 2, left, color="yellow", fontsize=11)
            ax.text(extent[1] - 0.06 * w, (extent[2] + extent[3]) / 2, right, color="yellow", fontsize=11)
            ax.plot([extent[1] - 0.05 * w - 20, extent[1] - 0.05 * w], [extent[2] + 4] * 2, color="yellow", lw=3)
            ax.text(extent[1] - 0.05 * w - 10, extent[2] + 6, "20 mm", color="yellow", ha="center", fontsize=9)
    fig.suptitle(f"{case.name} (unseen): larynx contour (solid), its box (dashed) and the reference (white dashed)",
                 fontsize=10)
    save_png(fig, out)


if __name__ == "__main__":
    main()
