"""A final graph cut on the contourer's posteriors: does it help or hurt the organs?

    python benchmarks/contour/regularize.py ../shared/data/openkbp-hn bench_out/models_prior/recipe_fold0.npz \
        --grid 0,0.25,0.5,1,2 [--split validation|test] [--per-organ 0.25,0,0.5,0.25,0.5,1,2]

The cut is the contourer's own (`cut_smoothness`): per organ, a binary contrast-sensitive graph cut (Boykov and Jolly
2001) of the organ's weighed posterior share against the rest inside its widened box, with the CT in a soft-tissue
window as the contrast guide, before each organ's largest component is kept. The forest runs once per scan; each
smoothness of the grid is applied to every organ, so each organ's best value can be read off its column (the organs'
cuts are independent but for voxels another organ holds).

`--split validation`: the 30 scans of the training folds after the forest's 80 training scans (the shipped
localizer's boxes), where a setting is chosen; `--split test`: fold 0's 40 test scans in the boxes of the
localizer trained on the fold's 80 training scans (`cross_validate.py --boxes fold-localizer` caches them).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.contour.cross_validate import AXIAL_ONLY, fold_localizer_boxes, localizer_boxes
from benchmarks.contour.scores import organ_scores
from imageforest.apps.contour.model import OrganContourer
from imageforest.imaging.ct import read_scan
from imageforest.imaging.ct_organs import openkbp_cases
from imageforest.imaging.io import read_image


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path)
    ap.add_argument("model", type=Path, help="a contour model trained on the first 80 scans of folds 1-4")
    ap.add_argument("--grid", default="0,0.25,0.5,1,2")
    ap.add_argument("--per-organ", default=None, metavar="S1,...,S7",
                    help="score this smoothness per organ (the model's order) beside none, instead of the grid")
    ap.add_argument("--split", choices=("validation", "test"), default="validation")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--train-cases", type=int, default=80)
    ap.add_argument("--cases", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    cases, organs = openkbp_cases(args.data)
    fold_of = np.random.default_rng(args.seed).permutation(len(cases)) % args.folds
    pool = [int(i) for i in np.flatnonzero(fold_of != 0)]
    if args.split == "validation":
        used = pool[args.train_cases:args.train_cases + args.cases]
    else:
        used = [int(i) for i in np.flatnonzero(fold_of == 0)][:args.cases]
    scans = {i: read_scan(cases[i].scan) for i in used}
    truth = {i: np.asarray(read_image(cases[i].labels).array) for i in used}
    if args.split == "validation":
        given = localizer_boxes([cases[i] for i in used], [scans[i] for i in used],
                                Path("bench_out/contour_localizer_boxes.json"))
    else:  # the cached boxes of the localizer grown on the forest's training scans (grown here if missing)
        given = fold_localizer_boxes(cases, scans, organs, pool[:args.train_cases], used,
                                     Path("bench_out/contour_fold0_localizer_boxes.json"))
    model = OrganContourer.load(args.model)
    grid = [float(v) for v in args.grid.split(",")]
    if args.per_organ:
        grid = [0.0, tuple(float(v) for v in args.per_organ.split(","))]
    axial = tuple(organs.index(o) for o in AXIAL_ONLY if o in organs)
    dice = {s: [] for s in grid}
    seconds = {s: [] for s in grid}
    for i in used:
        boxes = np.asarray(given[cases[i].name], dtype=np.float64)
        forest_post, context = model.forest_posteriors(scans[i], boxes)
        for s in grid:
            model.cut_smoothness = s
            t0 = time.perf_counter()
            pred = model.labels_from_posteriors(forest_post, context).labels.array
            seconds[s].append(time.perf_counter() - t0)
            sc = organ_scores(pred, truth[i], len(organs), scans[i].spacing[::-1], axial)
            dice[s].append(sc["dice_axial"])
    out = {}
    for s in grid:
        per = np.nanmean(np.array(dice[s], dtype=np.float64), axis=0)
        out[str(s)] = per.tolist()
        print(f"smoothness {s}: mean Dice {np.nanmean(per):.3f} | "
              + " ".join(f"{o[:8]} {d:.3f}" for o, d in zip(organs, per, strict=True))
              + f" | labels {np.median(seconds[s]):.2f} s/scan", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"split": args.split, "organs": organs, "dice": out}, indent=1))


if __name__ == "__main__":
    main()
