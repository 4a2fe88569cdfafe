"""Fit the contourer's absence check (`OrganContourer`'s `absence_logit`) on slabs of scans that neither the
forest nor the localizer saw, and score it on the test scans.

    python benchmarks/contour/presence.py ../shared/data/openkbp-hn --model bench_out/cv80/recipe_fold0.npz
        [--localizer bench_out/loc_fold0_80.npz] [--val-cases 82] [--test-cases 40] [--json OUT]

`--model` is a fold-0 forest of `cross_validate.py --train-cases 80 --save-models DIR` (trained on the first 80
scans of the training folds); `--localizer` a localizer trained on the same 80 scans (trained and saved there first
when the file does not exist, about 7 minutes). Every scan of the validation split (the training folds' scans after
those 80) and of fold 0's test scans is contoured three times, as `out_of_view.py` cuts it: its upper 40%, its
lower 40% and whole, with the recipe's settings after the forest and the localizer's evidence. For every organ the
scan's reference contours, the record holds what the check reads (the organ's
voxels against the count its box atlas expects, its mean posterior share, the localizer's presence probability and
mean wall spread) and whether the reference has the organ in the piece.

A logistic regression (scikit-learn, class-balanced, C = 1) of "absent from the piece" on those four, over the
validation records of organs that got voxels; its threshold is chosen by 5-fold cross-validation on the validation
records, for the best sum of the slabs' score (1 for an absent organ left empty, the Dice of one partly in view,
averaged over the pairs) and the whole scans' mean Dice. Printed: the recipe entry (the coefficients on the raw
features) and, on the test scans, the share of absent organs left empty, the Dice of organs partly in view and of
whole scans, with the check and with `min_expected_share` alone.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.contour.cross_validate import fold_split, with_recipe_settings
from benchmarks.contour.out_of_view import slab, split_cases
from imageforest.apps.contour.api import load_contourer, localized, working_scan
from imageforest.imaging.ct import read_scan
from imageforest.imaging.ct_organs import openkbp_cases
from imageforest.imaging.io import read_image

FEATURES = ("log voxel ratio", "mean posterior", "localizer probability", "localizer spread (mm)")
THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)


def records(model, localizer, cases) -> list[dict]:
    """Per (piece, organ): the check's inputs, the organ's voxels and Dice with the check off, the reference's."""
    out = []
    for case in cases:
        scan, labels = read_scan(case.scan), np.asarray(read_image(case.labels).array)
        nz = scan.array.shape[0]
        for piece, (z0, z1) in (("upper", (int(0.6 * nz), nz)), ("lower", (0, int(0.4 * nz))), ("whole", (0, nz))):
            part, truth = slab(scan, z0, z1), labels[z0:z1]
            work = working_scan(model, part)
            if work is not part:
                raise SystemExit(f"{case.name}: finer than the model's grid; this benchmark contours on the scan's")
            boxes, evidence = localized(model, localizer, work)
            post, where = model.forest_posteriors(work, boxes)  # no evidence: the check off
            got = model.labels_from_posteriors(post, where)
            for k, organ in enumerate(model.organs):
                if not (labels == k + 1).any():  # not contoured in this scan: nothing to say of the piece
                    continue
                ref, mine = truth == k + 1, got.labels.array == k + 1
                n = int(mine.sum())  # 0 where the localizer calls the organ absent
                out.append({
                    "case": case.name, "piece": piece, "organ": organ, "ref_voxels": int(ref.sum()), "voxels": n,
                    "dice": float(2 * np.sum(ref & mine) / max(ref.sum() + n, 1)),
                    "expected": float(where.prior[k].sum(dtype=np.float64)) if n else None,
                    "mean_posterior": float(got.mean_posterior[k]) if n else None,
                    "probability": float(evidence[k, 0]), "spread_mm": float(evidence[k, 1])})
        print(f"  {case.name}", flush=True)
    return out


def features(rows: list[dict]) -> np.ndarray:
    return np.array([[np.log(r["voxels"] / max(r["expected"], 1e-6) + 1e-3), r["mean_posterior"], r["probability"],
                      r["spread_mm"]] for r in rows])


def score(rows: list[dict], drop: np.ndarray) -> tuple[float, int, float, float]:
    """(share of absent (slab, organ) pairs left empty, their count, mean Dice of organs partly in a slab, mean Dice
    of whole scans' organs), with the organs `drop` marks cleared."""
    empty, partial, whole = [], [], []
    for r, d in zip(rows, drop, strict=True):
        given = r["voxels"] > 0 and not d
        dice = r["dice"] if given else 0.0
        if r["piece"] == "whole":
            if r["ref_voxels"] > 0:
                whole.append(dice)
        elif r["ref_voxels"] == 0:
            empty.append(not given)
        else:
            partial.append(dice)
    return float(np.mean(empty)), len(empty), float(np.mean(partial)), float(np.mean(whole))


def objective(rows: list[dict], drop: np.ndarray) -> float:
    empty, n, partial, whole = score(rows, drop)
    n_partial = sum(1 for r in rows if r["piece"] != "whole" and r["ref_voxels"] > 0)
    return (empty * n + partial * n_partial) / (n + n_partial) + whole


def main() -> None:
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path)
    ap.add_argument("--model", type=Path, required=True, help="fold 0's forest trained on 80 scans")
    ap.add_argument("--localizer", type=Path, default=Path("bench_out/loc_fold0_80.npz"))
    ap.add_argument("--val-cases", type=int, default=82)
    ap.add_argument("--test-cases", type=int, default=40)
    ap.add_argument("--json", type=Path, default=None, help="write the records here")
    args = ap.parse_args()
    cases, organs = openkbp_cases(args.data)
    model = with_recipe_settings(load_contourer(args.model))
    model.posterior_calibration = None  # the check reads the forest's shares, not the calibrated posteriors
    model.absence_logit = None  # the records are of the contours without the check
    if not args.localizer.is_file():
        from imageforest.apps.localize.training import train_localizer

        fold_of = fold_split(len(cases))
        train = [cases[i] for i in np.flatnonzero(fold_of != 0)][:80]
        t0 = time.perf_counter()
        trained = train_localizer(train, organs)
        print(f"localizer trained on {len(train)} scans in {time.perf_counter() - t0:.0f} s", flush=True)
        args.localizer.parent.mkdir(parents=True, exist_ok=True)
        trained.save(args.localizer)
    from imageforest.apps.localize.api import load_localizer

    localizer = load_localizer(args.localizer)
    print(f"validation: {args.val_cases} scans")
    val = records(model, localizer, split_cases(cases, "validation", args.val_cases))
    print(f"test: {args.test_cases} scans")
    test = records(model, localizer, split_cases(cases, "test", args.test_cases))
    if args.json:
        args.json.write_text(json.dumps({"validation": val, "test": test}))

    given_v = np.array([r["voxels"] > 0 for r in val])
    X, y = features([r for r, g in zip(val, given_v, strict=True) if g]), \
        np.array([r["ref_voxels"] == 0 for r, g in zip(val, given_v, strict=True) if g])
    mean, scale = X.mean(axis=0), X.std(axis=0) + 1e-9

    def fitted(rows_x, rows_y):
        return LogisticRegression(C=1.0, class_weight="balanced", max_iter=1000).fit((rows_x - mean) / scale, rows_y)

    held_out = np.zeros(len(y))
    for fit_rows, score_rows in StratifiedKFold(5, shuffle=True, random_state=0).split(X, y):
        held_out[score_rows] = fitted(X[fit_rows], y[fit_rows]).predict_proba((X[score_rows] - mean) / scale)[:, 1]
    best = max(THRESHOLDS, key=lambda t: objective(val, np.isin(np.arange(len(val)), np.flatnonzero(given_v)[
        held_out > t])))
    clf = fitted(X, y)
    coef = clf.coef_[0] / scale
    logit = (float(clf.intercept_[0] - np.sum(coef * mean)), *(float(c) for c in coef))
    print(f"absent organs among those given voxels: {int(y.sum())} of {len(y)} validation records")
    print(f"recipe: 'absence_logit': ({', '.join(f'{v:.4g}' for v in logit)}), 'absence_threshold': {best}")
    print("  coefficients on " + ", ".join(FEATURES))

    def check(rows: list[dict]) -> np.ndarray:
        drop = np.zeros(len(rows), dtype=bool)
        for i, r in enumerate(rows):
            if r["voxels"] > 0:
                z = logit[0] + float(np.dot(logit[1:], features([r])[0]))
                drop[i] = 1.0 / (1.0 + np.exp(-z)) > best
        return drop

    for name, rows in (("validation (fitted here)", val), ("test", test)):
        share = np.array([0 < r["voxels"] < model.min_expected_share * r["expected"] for r in rows])
        for label, drop in (("min_expected_share alone", share), ("with the absence check", share | check(rows))):
            empty, n, partial, whole = score(rows, drop)
            print(f"{name}, {label}: absent organs left empty {empty:.1%} of {n}, organs partly in view Dice "
                  f"{partial:.3f}, whole scans Dice {whole:.4f}")


if __name__ == "__main__":
    main()
