"""Fitting the contour model's posterior calibration, and how well its posteriors then say what they claim.

    python benchmarks/contour/calibrate.py ../shared/data/openkbp-hn --model bench_out/cv80/recipe_fold0.npz
        --localizer bench_out/loc_fold0_80.npz [--fold 0] [--val-cases 42] [--test-cases 40]

The model and the localizer are a fold's (`cross_validate.py --save-models`; the localizer trained on the same
scans). On the validation scans (the training folds' scans beyond the forest's first `--train-cases`, which it
never saw) every voxel of the region the forest ran over gives, per organ, its posterior share and whether the
reference labels it that organ (scans whose reference lacks the organ are left out: clinicians do not contour every
organ on every scan). Per organ, (a, b) of sigmoid(a logit(s) + b) are fitted by maximum likelihood (voxels of share
under 0.02 sampled one in 20 and weighed 20). On the fold's test scans, before and after: the expected calibration
error (10 bins of the posterior, voxels weighed alike), the reliability of the bins, how well each contour's
mean posterior over its voxels predicts the share of them the reference calls that organ (its precision), and how
well a calibrated mean posterior under a threshold names the contours under Dice 0.5 (the review warning of
`imageforest contour`; its threshold chosen with `--score-split validation`).
Prints the pairs for `recipe.py`. With `--pairs` nothing is fitted: given pairs (the recipe's, say) are scored on
the fold's test scans, and `--boxes-json` takes the test scans' boxes from a `cross_validate.py` box cache (a fold's
localizer, not saved itself; the absence check then does not run): whether pairs fitted on one fold's forest serve
another's.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import minimize

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.contour.cross_validate import _boxes_from_cache, fold_split, with_recipe_settings
from imageforest.apps.contour.api import back_to_scan, contour_scan, load_contourer, working_scan
from imageforest.apps.contour.model import calibrated
from imageforest.apps.localize.api import load_localizer
from imageforest.imaging.ct import read_scan
from imageforest.imaging.ct_organs import openkbp_cases
from imageforest.imaging.io import read_image

LOW, KEEP_ONE_IN = 0.02, 20
REVIEW_THRESHOLDS = (0.4, 0.5, 0.55, 0.6, 0.65)  # the review warning's threshold is chosen among these
BINS = np.linspace(0.0, 1.0, 11)


def collect(cases, model, localizer, boxes: dict | None = None):
    """Per scan: its name, its contours (raw shares as `posterior`) and the reference labels; the boxes from the
    localizer, or from `boxes` (name -> (n_organs, 6) mm) when given."""
    for case in cases:
        scan = read_scan(case.scan)
        if boxes is None:
            contours, _ = contour_scan(scan, model, localizer, posterior=True)
        else:
            work = working_scan(model, scan)
            contours = back_to_scan(model.contour(work, np.asarray(boxes[case.name], dtype=float)), work, scan)
        truth = np.asarray(read_image(case.labels).array)
        yield case.name, contours, truth


def fit_pair(s: np.ndarray, t: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    """(a, b) of sigmoid(a logit(s) + b) by weighted maximum likelihood."""
    z = np.log(np.clip(s, 1e-6, 1 - 1e-6) / (1 - np.clip(s, 1e-6, 1 - 1e-6)))

    def loss(p):
        u = p[0] * z + p[1]
        log_sig = -np.logaddexp(0.0, -u)
        log_not = -np.logaddexp(0.0, u)
        value = -np.sum(w * (t * log_sig + (1 - t) * log_not))
        sig = np.exp(log_sig)
        g = -(w * (t - sig))
        return value, np.array([np.sum(g * z), np.sum(g)])

    res = minimize(loss, np.array([1.0, 0.0]), jac=True, method="L-BFGS-B", bounds=[(1e-3, 20.0), (-20.0, 20.0)])
    return float(res.x[0]), float(res.x[1])


def reliability(s: np.ndarray, t: np.ndarray) -> tuple[float, list]:
    b = np.clip(np.digitize(s, BINS) - 1, 0, 9)
    n = np.bincount(b, minlength=10).astype(float)
    ps = np.bincount(b, weights=s, minlength=10)
    ts = np.bincount(b, weights=t, minlength=10)
    ok = n > 0
    ece = float(np.sum(np.abs(ps[ok] - ts[ok])) / n.sum())
    return ece, [(ps[i] / n[i], ts[i] / n[i], int(n[i])) for i in range(10) if n[i] > 0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path)
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--localizer", type=Path, default=None)
    ap.add_argument("--pairs", default=None, help="score these (a,b;a,b;... one per organ) instead of fitting")
    ap.add_argument("--boxes-json", type=Path, default=None,
                    help="with --pairs: the test scans' boxes from a cross_validate.py box cache")
    ap.add_argument("--fold", type=int, default=0)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--train-cases", type=int, default=80)
    ap.add_argument("--val-cases", type=int, default=42)
    ap.add_argument("--test-cases", type=int, default=40)
    ap.add_argument("--score-split", choices=("test", "validation"), default="test",
                    help="the scans the pairs are scored on (validation: the scans they were fitted on, all of them, "
                         "for choosing the review warning's threshold)")
    args = ap.parse_args()
    cases, _ = openkbp_cases(args.data)
    fold_of = fold_split(len(cases), args.folds)
    others = np.flatnonzero(fold_of != args.fold)
    val = [cases[i] for i in others[args.train_cases:args.train_cases + args.val_cases]]
    test = [cases[i] for i in np.flatnonzero(fold_of == args.fold)][: args.test_cases]
    if args.score_split == "validation":
        test = [cases[i] for i in others[args.train_cases:]]
    model = with_recipe_settings(load_contourer(args.model))
    model.posterior_calibration = None  # fitted on the raw shares
    if args.localizer is None and args.boxes_json is None:
        raise SystemExit("give --localizer, or --pairs with --boxes-json")
    localizer = None if args.localizer is None else load_localizer(args.localizer)
    organs = list(model.organs)
    rng = np.random.default_rng(0)
    if args.pairs is not None:
        pairs = [tuple(float(v) for v in pair.split(",")) for pair in args.pairs.split(";")]
        boxes = None if args.boxes_json is None else _boxes_from_cache(json.loads(args.boxes_json.read_text())["boxes"])
        score(test, model, localizer, boxes, np.array(pairs), organs)
        return
    data = {o: ([], [], []) for o in organs}
    for name, contours, truth in collect(val, model, localizer):
        if contours.posterior is None:
            continue
        for k, o in enumerate(organs):
            share = contours.posterior[k]
            inside = share > 0
            if not (truth == k + 1).any() or not inside.any():
                continue
            s, t = share[inside], (truth == k + 1)[inside]
            keep = (s >= LOW) | (rng.random(s.size) < 1.0 / KEEP_ONE_IN)
            data[o][0].append(s[keep])
            data[o][1].append(t[keep].astype(np.float64))
            data[o][2].append(np.where(s[keep] >= LOW, 1.0, float(KEEP_ONE_IN)))
        print(f"validation {name}", flush=True)
    pairs = []
    for o in organs:
        s, t, w = (np.concatenate(x) for x in data[o])
        pairs.append(fit_pair(s, t, w))
        print(f"{o}: a {pairs[-1][0]:.3f}, b {pairs[-1][1]:.3f} ({s.size} voxels)", flush=True)
    score(test, model, localizer, None, np.array(pairs), organs)


def score(test, model, localizer, boxes: dict | None, table: np.ndarray, organs: list[str]) -> None:
    """Calibration before and after `table` (n_organs, 2) on the test scans, printed."""
    raw = {o: ([], []) for o in organs}
    precision = {o: [] for o in organs}
    review = []  # per contour: calibrated mean posterior, Dice
    for name, contours, truth in collect(test, model, localizer, boxes):
        if contours.posterior is None:
            continue
        cal = calibrated(contours.posterior, table)
        labels = np.asarray(contours.labels.array)
        for k, o in enumerate(organs):
            inside = contours.posterior[k] > 0
            if not (truth == k + 1).any() or not inside.any():
                continue
            t = (truth == k + 1)[inside]
            raw[o][0].append(contours.posterior[k][inside])
            raw[o][1].append(t)
            mine = labels == k + 1
            if mine.any():
                true_share = float(np.mean(truth[mine] == k + 1))
                precision[o].append((float(contours.posterior[k][mine].mean()), float(cal[k][mine].mean()),
                                     true_share))
                ref = truth == k + 1
                review.append((float(cal[k][mine].mean()), float(2 * np.sum(ref & mine) / (ref.sum() + mine.sum()))))
        print(f"test {name}", flush=True)
    print(f"\nper organ on {len(test)} test scans: ECE raw -> calibrated; |mean posterior over the contour - its "
          "precision| raw -> calibrated (median over scans)")
    eces = []
    for k, o in enumerate(organs):
        if not raw[o][0] or not precision[o]:
            print(f"  {o:13s} not in these scans' references")
            continue
        s = np.concatenate(raw[o][0])
        t = np.concatenate(raw[o][1]).astype(np.float64)
        before, bins_before = reliability(s, t)
        after, bins_after = reliability(calibrated(s[None], table[k:k + 1])[0], t)
        eces.append((before, after))
        p = np.array(precision[o])
        print(f"  {o:13s} ECE {before:.4f} -> {after:.4f}; precision error {np.median(np.abs(p[:, 0] - p[:, 2])):.3f} "
              f"-> {np.median(np.abs(p[:, 1] - p[:, 2])):.3f} ({len(p)} contours)")
        print("    raw " + " ".join(f"{a:.2f}->{b:.2f}" for a, b, _ in bins_before))
        print("    cal " + " ".join(f"{a:.2f}->{b:.2f}" for a, b, _ in bins_after))
    e = np.array(eces)
    print(f"mean ECE {e[:, 0].mean():.4f} -> {e[:, 1].mean():.4f}")
    print("posterior_calibration = (" + ", ".join(f"({a:.3f}, {b:.3f})" for a, b in table) + ")")
    m, d = np.array(review).T
    print(f"\nthe calibrated mean posterior as a review signal, {m.size} contours: correlation with Dice "
          f"{np.corrcoef(m, d)[0, 1]:.2f}; {np.sum(d < 0.5)} under Dice 0.5")
    for below in REVIEW_THRESHOLDS:
        named = m < below
        print(f"  named under {below:g}: {named.sum()} contours, {np.sum(named & (d < 0.5))} of them under Dice 0.5; "
              f"mean Dice named {d[named].mean() if named.any() else float('nan'):.3f}, others {d[~named].mean():.3f}")


if __name__ == "__main__":
    main()
