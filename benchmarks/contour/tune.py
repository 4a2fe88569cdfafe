"""Choose the contourer's prediction-time settings (those that need no retraining: the box atlas's weight, the
background scale) by validation inside the training folds, never on the scans a figure is reported on.

    python benchmarks/contour/tune.py ../shared/data/openkbp-hn --fold 0 --train-cases 20 --val-cases 10 \
        --grid prior_weight=0,0.5,1,2 --grid background_scale=1,1.5,2

For fold F of the same split as `cross_validate.py` (same seed), the forest trains on the first `--train-cases`
scans of the other folds and every combination of the grid is scored (mean Dice over the organs) on the next
`--val-cases` scans of those folds, inside the shipped localizer's boxes or, `--boxes fold-localizer`, those of a
localizer trained on the same training scans (the boxes a new scan gets); fold F's own scans are never read.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.contour.cross_validate import fold_localizer_boxes, localizer_boxes
from benchmarks.contour.scores import organ_scores
from imageforest.apps.contour.model import OrganContourer
from imageforest.apps.contour.recipe import recipe_for
from imageforest.imaging.ct import read_scan
from imageforest.imaging.ct_organs import openkbp_cases
from imageforest.imaging.io import read_image


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--fold", type=int, default=0)
    ap.add_argument("--train-cases", type=int, default=20)
    ap.add_argument("--val-cases", type=int, default=10)
    ap.add_argument("--check-cases", type=int, default=0,
                    help="further scans of the training folds on which the recipe's setting, the best single "
                         "setting and the best setting per organ are compared")
    ap.add_argument("--grid", action="append", default=[], metavar="NAME=V1,V2,...")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="training setting (JSON)")
    ap.add_argument("--model", type=Path, default=None,
                    help="a forest already grown on these --train-cases scans (for example cross_validate.py's "
                         "--save-models of the same fold), scored instead of growing one")
    ap.add_argument("--boxes", choices=("localizer", "fold-localizer"), default="localizer",
                    help="the shipped localizer's boxes (it saw every scan, so they are better than a new scan's) or "
                         "those of a localizer trained on the --train-cases scans alone (what a new scan gets)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--save-model", type=Path, default=None,
                    help="keep the forest grown here (to score it on the fold's test scans with cross_validate.py)")
    args = ap.parse_args()

    cases, organs = openkbp_cases(args.data)
    fold_of = np.random.default_rng(args.seed).permutation(len(cases)) % args.folds
    pool = [int(i) for i in np.flatnonzero(fold_of != args.fold)]
    train, val = pool[:args.train_cases], pool[args.train_cases:args.train_cases + args.val_cases]
    check = pool[args.train_cases + args.val_cases:args.train_cases + args.val_cases + args.check_cases]
    grid = {k: [json.loads(v) for v in vs.split(",")] for k, vs in (g.split("=", 1) for g in args.grid)}
    overrides = {k: json.loads(v) for k, v in (s.split("=", 1) for s in args.set)}
    used = (val + check) if args.model is not None else (train + val + check)
    scans = {i: read_scan(cases[i].scan) for i in used}
    labels = {i: np.asarray(read_image(cases[i].labels).array) for i in used}
    if args.boxes == "fold-localizer":
        given = fold_localizer_boxes(cases, scans, organs, train, val + check,
                                     Path(f"bench_out/contour_fold{args.fold}_localizer_boxes_validation.json"))
    else:
        given = localizer_boxes([cases[i] for i in used], [scans[i] for i in used],
                                Path("bench_out/contour_localizer_boxes.json"))
    t0 = time.perf_counter()
    if args.model is not None:
        model = OrganContourer.load(args.model)
        for k, v in overrides.items():
            setattr(model, k, tuple(v) if isinstance(v, list) else v)
        print(f"loaded {args.model}; validating on {len(val)}", flush=True)
    else:
        model = OrganContourer(**{**recipe_for(organs), **overrides, "organs": tuple(organs),
                                  "random_state": args.seed}).fit_scans(
            [scans[i] for i in train], [labels[i] for i in train], [cases[i].boxes for i in train])
        print(f"trained on {len(train)} scans in {time.perf_counter() - t0:.0f} s; validating on {len(val)}",
              flush=True)
        if args.save_model is not None:
            model.save(args.save_model)
    forest_runs: dict = {}  # the forest runs once per scan; the grid's settings act after it

    def score(setting: dict, scans_used: list[int]) -> np.ndarray:
        for k, v in setting.items():
            setattr(model, k, v)
        dice = []
        for i in scans_used:
            if i not in forest_runs:
                forest_runs[i] = model.forest_posteriors(scans[i], np.asarray(given[cases[i].name],
                                                                               dtype=np.float64))
            pred = model.labels_from_posteriors(*forest_runs[i]).labels.array
            dice.append(organ_scores(pred, labels[i], len(organs), scans[i].spacing[::-1], ())["dice"])
        return np.nanmean(np.array(dice, dtype=np.float64), axis=0)

    def show(name: str, per: np.ndarray) -> None:
        print(f"{name}: mean Dice {np.nanmean(per):.3f} | "
              + " ".join(f"{o[:8]} {d:.3f}" for o, d in zip(organs, per, strict=True)), flush=True)

    rows = []
    for combo in itertools.product(*grid.values()):
        setting = dict(zip(grid, combo, strict=True))
        per = score(setting, val)
        rows.append((float(np.nanmean(per)), setting, per))
        show(str(setting), per)
    best = max(rows, key=lambda r: r[0])
    print(f"best single setting {best[1]}: {best[0]:.3f}")
    # Organs barely interact (each competes with the background inside its own box): each takes the setting
    # that served it best
    chosen = [max(rows, key=lambda r: r[2][k])[1] for k in range(len(organs))]
    per_organ = {name: tuple(c[name] for c in chosen) for name in grid}
    print(f"per organ: {json.dumps(per_organ)}")
    if check:
        recipe = {name: recipe_for(organs)[name] for name in grid}
        for label, setting in (("recipe", recipe), ("best single", best[1]), ("per organ", per_organ)):
            show(f"check on {len(check)} scans, {label} {setting}", score(setting, check))


if __name__ == "__main__":
    main()
