"""Pool the folds of `cross_validate.py` runs (one JSON per fold, or several folds in one) into the cross-validated
figures: mean Dice and median HD95 per organ over every scored scan, and each fold's mean beside them.

    python benchmarks/contour/cv_summary.py bench_out/cv_fold0.json bench_out/cv_fold1.json ... [--method recipe]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", type=Path, nargs="+")
    ap.add_argument("--method", default="recipe")
    args = ap.parse_args()
    organs, cases = None, {}
    for path in args.runs:
        run = json.loads(path.read_text())
        if organs is not None and run["organs"] != organs:
            raise SystemExit(f"{path}: other organs ({run['organs']}) than the first run's ({organs})")
        organs = run["organs"]
        for name, scores in run["methods"][args.method]["cases"].items():
            if name in cases:
                raise SystemExit(f"{path}: {name} is scored twice")
            cases[name] = scores
    folds = sorted({c["fold"] for c in cases.values()})
    dice = np.array([c["dice_axial"] for c in cases.values()], dtype=np.float64)
    whole = np.array([c["dice"] for c in cases.values()], dtype=np.float64)
    hd95 = np.array([c["hd95_axial"] for c in cases.values()], dtype=np.float64)
    fold_of = np.array([c["fold"] for c in cases.values()])
    with np.errstate(all="ignore"):
        per = np.nanmean(dice, axis=0)
        print(f"{args.method}: {len(cases)} scans in folds {folds}; mean Dice {np.nanmean(per):.3f} "
              f"({np.nanmean(np.nanmean(whole, axis=0)):.3f} with the cord and the oesophagus over the whole scan)")
        print("organ          Dice   HD95 (mm, median)   scans")
        for k, organ in enumerate(organs):
            n = int(np.sum(~np.isnan(dice[:, k])))
            print(f"{organ:13s} {per[k]:.3f}  {np.nanmedian(hd95[:, k]):6.1f}             {n:4d}")
        means = [np.nanmean(np.nanmean(dice[fold_of == f], axis=0)) for f in folds]
        print("per fold: " + ", ".join(f"{f}: {m:.3f}" for f, m in zip(folds, means, strict=True))
              + f" (spread {max(means) - min(means):.3f})")


if __name__ == "__main__":
    main()
