"""Horse detection by 5-fold cross-validation: the Hough forest beside dlib's HOG detector and a sliding-window
classification forest, in the same process on the same folds.

    python benchmarks/detect/horses.py [--folds 5] [--trees 10] [--depth 15] [--patches 400] [--variants hough,...]
        [--seeds 0] [--json OUT] [--no-dlib] [--no-window]

Data: the 228 Weizmann horses (boxes from their masks) at the masks' resolution (about 320 x 240). Folds: a seeded
permutation cut in five. The 35 GrabCut images (no horses) are dealt round-robin to the folds: each fold's are
added to its test images as negatives, the others are background images for training (ours and dlib's alike).
A detection is correct when it overlaps a not yet claimed true box with IoU >= 0.5 (PASCAL); reported: average
precision (monotone precision, VOC 2010), recall at the equal-error rate, median seconds per test image (warm,
all scales), training seconds and peak resident memory growth during training.

Peers:
- dlib's `simple_object_detector` (HOG + structural SVM, left-right flips, 80x80 window, C = 5), scored on every
  window above -1;
- a sliding-window classification forest: the same patches and forest settings with every node reducing class
  uncertainty only (offset_share = 0), windows of the learnt object size at three aspect ratios scoring the mean
  p(object | patch) inside them, at the same scales.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks._measure import measure, mib
from benchmarks.detect.common import (
    Scorer,
    dlib_available,
    folds,
    load_backgrounds,
    load_horses,
    run_dlib,
    sliding_window,
    train_dlib,
)
from imageforest.apps.detect.model import HoughForestDetector


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--trees", type=int, default=10)
    ap.add_argument("--depth", type=int, default=15)
    ap.add_argument("--patches", type=int, default=400)
    ap.add_argument("--candidates", type=int, default=200)
    ap.add_argument("--seeds", default="0", help="comma-separated forest seeds (each runs every fold)")
    ap.add_argument("--variants", default="hough", help="comma-separated: hough, adhf")
    ap.add_argument("--loss", default="tangent", help="global loss of adhf")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--no-dlib", action="store_true")
    ap.add_argument("--no-window", action="store_true")
    args = ap.parse_args()

    horses, backgrounds = load_horses(), load_backgrounds()
    parts = folds(len(horses), args.folds)
    bg_fold = np.arange(len(backgrounds)) % args.folds
    print(f"{len(horses)} horses, {len(backgrounds)} background images, {args.folds} folds")
    seeds = [int(s) for s in args.seeds.split(",")]
    variants = args.variants.split(",")
    scorers: dict[str, Scorer] = {}
    fits: dict[str, list[tuple[float, int]]] = {}

    def record(name: str, fit: tuple[float, int] | None) -> Scorer:
        if fit is not None:
            fits.setdefault(name, []).append(fit)
        return scorers.setdefault(name, Scorer())

    aspects = None
    for k, test_idx in enumerate(parts):
        train = [horses[i] for i in range(len(horses)) if i not in set(test_idx)]
        test = [horses[i] for i in test_idx] + [b for b, f in zip(backgrounds, bg_fold, strict=True) if f == k]
        negatives = [b for b, f in zip(backgrounds, bg_fold, strict=True) if f != k]
        wh = np.concatenate([s.boxes[:, 2:] - s.boxes[:, :2] for s in train])
        aspects = np.exp(np.percentile(np.log(wh[:, 0] / wh[:, 1]), [20, 50, 80]))
        models = {}
        for seed in seeds:
            runs = [(v, 0.5) for v in variants] + ([("window-forest", 0.0)] if not args.no_window else [])
            for name, share in runs:
                if name == "window-forest" and seed != seeds[0]:
                    continue
                det = HoughForestDetector(args.trees, max_depth=args.depth, n_candidates=args.candidates,
                                          patches_per_image=args.patches, offset_share=share, random_state=seed,
                                          variant="adhf" if name == "adhf" else "hough", loss=args.loss)
                images, boxes, background = [s.rgb for s in train], [s.boxes for s in train], [s.rgb for s in negatives]
                _, fit_s, fit_mem = measure(lambda d=det, i=images, b=boxes, n=background: d.fit(i, b, n))
                label = name if len(seeds) == 1 or name == "window-forest" else f"{name}/seed{seed}"
                models[label] = det
                record(label, (fit_s, fit_mem))
        if not args.no_dlib and dlib_available():
            models["dlib-hog"], fit_s, fit_mem = measure(lambda t=train, n=negatives: train_dlib(t, n))
            record("dlib-hog", (fit_s, fit_mem))
        for label, model in models.items():
            sc = record(label, None)
            for s in test:
                t0 = time.perf_counter()
                if label == "dlib-hog":
                    boxes, scores = run_dlib(model, s.rgb)
                elif label == "window-forest":
                    boxes, scores = sliding_window(model, s.rgb, aspects)
                else:
                    found = model.detect(s.rgb, threshold=0.0).detections
                    boxes = np.array([d.box_xyxy for d in found]).reshape(-1, 4)
                    scores = np.array([d.score for d in found])
                sc.seconds.append(time.perf_counter() - t0)
                sc.add(boxes, scores, s.boxes)
        print(f"fold {k + 1}/{args.folds}: " + ", ".join(f"{n} AP {sc.ap():.3f}" for n, sc in scorers.items()),
              flush=True)

    print(f"\n{'method':<18} {'AP':>6} {'EER rec':>8} {'s/image':>8} {'fit s':>8} {'fit MiB':>8}")
    out = {}
    for name, sc in scorers.items():
        summ = sc.summary()
        fit_s = float(np.mean([f[0] for f in fits[name]]))
        fit_mem = int(np.max([f[1] for f in fits[name]]))
        summ.update({"fit_s": fit_s, "fit_peak_mib": fit_mem / 2**20})
        out[name] = summ
        print(f"{name:<18} {summ['ap']:6.3f} {summ['eer_recall']:8.3f} {summ['s_per_image']:8.3f} {fit_s:8.1f} "
              f"{mib(fit_mem):>8}")
    summary = {}
    for v in variants:
        aps = [r["ap"] for k, r in out.items() if k.split("/")[0] == v]
        fit = [r["fit_s"] for k, r in out.items() if k.split("/")[0] == v]
        summary[v] = {"ap_mean": float(np.mean(aps)), "ap_std": float(np.std(aps)), "fit_s": float(np.mean(fit))}
        print(f"{v}: mean AP over {len(aps)} seed(s) {np.mean(aps):.3f} +- {np.std(aps):.3f}, fit {np.mean(fit):.1f} s")
    if "hough" in summary and "adhf" in summary:
        print(f"AP adhf - hough: {summary['adhf']['ap_mean'] - summary['hough']['ap_mean']:+.4f}, fit time ratio "
              f"{summary['adhf']['fit_s'] / summary['hough']['fit_s']:.2f}")
    if "dlib-hog" in out:
        print(f"AP hough - dlib: {summary[variants[0]]['ap_mean'] - out['dlib-hog']['ap']:+.3f}")
    out["summary"] = summary
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)}, "results": out}, indent=1))


if __name__ == "__main__":
    main()
