"""One unseen scan contoured as a reviewer sees it: `imageforest contour --overlay`'s drawing with the reference
contours dashed, for the README.

    python benchmarks/contour/example_figure.py ../shared/data/openkbp-hn --model bench_out/cv80/recipe_fold0.npz
        --localizer bench_out/loc_fold0_80.npz [--fold 0] [--cases 12] [-o apps/contour/docs/example.png]

The model and the localizer are a fold's (`cross_validate.py --save-models`, the localizer trained on the same
scans), so neither saw the fold's test scans. The first `--cases` of those are contoured (the recipe's settings
after the forest) and scored (Dice, the cord and the oesophagus within the reference's axial extent, as
`cross_validate.py` scores them); the scan whose mean Dice is the median of theirs is drawn, so the figure shows a
typical result rather than the best.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.contour.cross_validate import (
    AXIAL_ONLY,
    add_fold_model_arguments,
    fold_split,
    with_recipe_settings,
)
from benchmarks.contour.scores import organ_scores
from imageforest.apps.contour.api import contour_scan, load_contourer
from imageforest.apps.contour.overlay import write_overlay
from imageforest.apps.localize.api import load_localizer
from imageforest.imaging.ct import read_scan
from imageforest.imaging.ct_organs import openkbp_cases
from imageforest.imaging.io import read_image


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_fold_model_arguments(ap)
    ap.add_argument("-o", "--out", type=Path, default=Path("apps/contour/docs/example.png"))
    args = ap.parse_args()
    cases, _ = openkbp_cases(args.data)
    fold_of = fold_split(len(cases), args.folds)
    test = [cases[i] for i in np.flatnonzero(fold_of == args.fold)][: args.cases]
    model = with_recipe_settings(load_contourer(args.model))
    localizer = load_localizer(args.localizer)
    axial = tuple(model.organs.index(o) for o in AXIAL_ONLY if o in model.organs)
    done = []
    for case in test:
        scan = read_scan(case.scan)
        contours, _ = contour_scan(scan, model, localizer, posterior=False)
        truth = np.asarray(read_image(case.labels).array)
        scores = organ_scores(np.asarray(contours.labels.array), truth, len(model.organs),
                              np.asarray(scan.spacing)[::-1], axial)
        dice = {o: d for o, d in zip(model.organs, scores["dice_axial"], strict=True) if np.isfinite(d)}
        done.append((float(np.mean(list(dice.values()))), case, scan, contours, truth, dice))
        print(f"{case.name}: mean Dice {done[-1][0]:.3f} ({', '.join(f'{o} {d:.2f}' for o, d in dice.items())})",
              flush=True)
    done.sort(key=lambda row: row[0])
    mean, case, scan, contours, truth, dice = done[len(done) // 2]
    write_overlay(contours, model.organs, args.out, scan, truth=truth,
                  title=f"{case.name} (unseen), mean Dice {mean:.2f}")
    print(f"wrote {args.out}: {case.name}, the median of {len(done)} scans (mean Dice {mean:.3f}; the scans' "
          f"range {done[0][0]:.3f}-{done[-1][0]:.3f})")


if __name__ == "__main__":
    main()
