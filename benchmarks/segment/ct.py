"""Segmentation of head-and-neck organs in real CT from simulated scribbles, beside scikit-image's trainable
segmenter on the same volume and scribbles.

    python benchmarks/segment/ct.py ../shared/data/openkbp-hn [--cases 3]
    python benchmarks/segment/ct.py ../shared/data/openkbp-hn --fold 0 --cases 10 --no-peer \
        --init-model bench_out/models/entangled_fold0.npz --init-weights 0.25,0.5,0.75

Scribbles are simulated from the reference organ label maps as a user would paint them: on three axial slices per
organ (at a quarter, half and three quarters of its height), the organ's cross-section one voxel in from its
contour (a brush stroke filling it) with the organ's label, and background (label 8) as a ring 2-4 voxels outside
the organs plus every 8th row of the slice wherever it is over 2 voxels from any organ. Reported: Dice per organ
over the whole volume, the seconds to compute the features (once per volume), of the first update (every stroke
but the first organ's top one) and of the update after that last stroke, and for
scikit-image's `fit_segmenter` (scikit-learn's random forest of 50 trees on `multiscale_basic_features`, sigma
1-16) its seconds per volume, features included. `--stroke-heights` moves the scribbled slices (for example
0.35,0.5,0.65: a user who paints the organ's middle only); `--extent-margins` scores the session's
`extent_margin` at other values on the same strokes (inf: no bound).

With `--init-model` (a contour model; with `--fold K` the scans are fold K's test scans of
`benchmarks/contour/cross_validate.py`'s split, so a model it saved for that fold never saw them) each scan is first
contoured automatically (the shipped localizer's boxes, or `--init-localizer`'s) and the session starts from those
labels at each weight of `--init-weights` (`SegmentationSession.set_init`): Dice of the automatic contours alone, of
the scribbles alone, and of the scribbles corrected from the contours.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import numpy as np
from scipy import ndimage

from imageforest.apps.segment import SegmentationSession
from imageforest.imaging.io import read_image

ORGANS = ("Brainstem", "SpinalCord", "RightParotid", "LeftParotid", "Esophagus", "Larynx", "Mandible")
BACKGROUND = 8


def simulated_scribbles(labels: np.ndarray, heights: tuple[float, ...] = (0.25, 0.5, 0.75),
                        organs: list[int] | None = None, avoid: np.ndarray | None = None) -> np.ndarray:
    """(z, y, x) uint8 scribbles from an organ label map (see the module docstring), on the slices at `heights`
    (shares of each organ's axial extent): strokes for `organs` (default: every organ in the map), background
    strokes kept over 2 voxels from every organ of the map and from `avoid` (z, y, x) bool (a reviewer's view of
    the organs kept as they are)."""
    scr = np.zeros(labels.shape, dtype=np.uint8)
    anywhere = labels > 0 if avoid is None else (labels > 0) | avoid
    for organ in range(1, len(ORGANS) + 1) if organs is None else organs:
        zs = np.flatnonzero((labels == organ).any(axis=(1, 2)))
        if zs.size == 0:
            continue
        for q in heights:
            z = int(zs[int(q * (zs.size - 1))])
            inner = ndimage.binary_erosion(labels[z] == organ)
            scr[z][inner if inner.any() else labels[z] == organ] = organ
            away = ~ndimage.binary_dilation(anywhere[z], iterations=2)
            ring = ndimage.binary_dilation(labels[z] == organ, iterations=4) & away
            lines = np.zeros_like(away)
            lines[::8] = True  # broad background strokes across the slice: air, fat, muscle, bone
            scr[z][(ring | (lines & away)) & (scr[z] == 0)] = BACKGROUND
    return scr


def last_stroke_removed(scr: np.ndarray) -> np.ndarray:
    """The scribbles without the first scribbled organ's top stroke (its highest scribbled slice)."""
    organ = int(min(c for c in np.unique(scr) if 0 < c < BACKGROUND))
    top = int(np.flatnonzero((scr == organ).any(axis=(1, 2)))[-1])
    out = scr.copy()
    out[top][out[top] == organ] = 0
    return out


def dice(a: np.ndarray, b: np.ndarray) -> float:
    total = a.sum() + b.sum()
    return float(2 * np.sum(a & b) / total) if total else float("nan")


def fit_segmenter_peer(volume: np.ndarray, scr: np.ndarray, balanced: bool = False) -> np.ndarray:
    """scikit-image's trainable segmenter as its example sets it up (50 trees of depth 10, 5% of the labelled
    voxels per tree), or, `balanced`, with every labelled voxel and classes weighted equally (an organ's few dozen
    scribbled voxels otherwise hardly reach a tree)."""
    from functools import partial

    from skimage.feature import multiscale_basic_features
    from skimage.future import fit_segmenter, predict_segmenter
    from sklearn.ensemble import RandomForestClassifier

    feats = partial(multiscale_basic_features, intensity=True, edges=True, texture=True, sigma_min=1,
                    sigma_max=16)(volume.astype(np.float32))
    if balanced:
        clf = RandomForestClassifier(n_estimators=50, n_jobs=-1, max_depth=10, class_weight="balanced",
                                     random_state=0)
    else:
        clf = RandomForestClassifier(n_estimators=50, n_jobs=-1, max_depth=10, max_samples=0.05, random_state=0)
    clf = fit_segmenter(scr, feats, clf)
    return predict_segmenter(feats, clf)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--cases", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--fold", type=int, default=None, help="fold K's test scans of the contour cross-validation")
    parser.add_argument("--validation", action="store_true",
                        help="with --fold: the scans outside fold K beyond its first --train-cases (never seen by "
                             "that fold's forest, nor reported as its test scans): for choosing settings")
    parser.add_argument("--train-cases", type=int, default=80)
    parser.add_argument("--correct-below", type=float, default=None,
                        help="with --init-model: scribble only the organs whose automatic contour has Dice below "
                             "this (as a reviewer corrects what is wrong); the others keep their contour")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-peer", action="store_true", help="skip scikit-image's segmenter")
    parser.add_argument("--init-model", type=Path, default=None, help="a contour model to start from")
    parser.add_argument("--init-localizer", type=Path, default=None,
                        help="the localizer whose boxes the contour model reads (default: the shipped one, which saw "
                             "every scan; e.g. one trained on the fold's training scans, as "
                             "benchmarks/contour/presence.py trains it)")
    parser.add_argument("--init-weights", default="0.25")
    parser.add_argument("--init-smoothing-mm", type=float, default=None,
                        help="the contour model's posterior smoothing (default: the contour recipe's, as the shipped "
                             "model predicts)")
    parser.add_argument("--no-local", action="store_true",
                        help="recompute each update's forest posterior and geodesic distances everywhere "
                             "(the session's local_updates off)")
    parser.add_argument("--colour-weight", type=float, default=None,
                        help="the session's colour rounds' weight (default: the recipe's for volumes, none)")
    parser.add_argument("--extent-margin", type=float, default=None,
                        help="the session's extent margin (default: the recipe's for volumes; inf: no bound)")
    parser.add_argument("--slice-path-scale", type=float, default=None,
                        help="the session's slice path scale (default: the recipe's for volumes; 1: none)")
    parser.add_argument("--stroke-regions", choices=("on", "off"), default=None,
                        help="the session's stroke_regions (default: the recipe's for volumes)")
    parser.add_argument("--extent-margins", default=None,
                        help="comma-separated extent margins (inf: no bound) each scored as one more column, from "
                             "the same session's strokes (the first column keeps the recipe's)")
    parser.add_argument("--stroke-heights", default="0.25,0.5,0.75",
                        help="where on each organ's axial extent its strokes are simulated (shares of its height)")
    args = parser.parse_args()
    cases = sorted(args.data.glob("*_ct.nii.gz"))
    if args.fold is not None:  # the same split as benchmarks/contour/cross_validate.py
        from imageforest.imaging.ct_organs import openkbp_cases

        named = openkbp_cases(args.data)[0]
        fold_of = np.random.default_rng(args.seed).permutation(len(named)) % args.folds
        if args.validation:
            others = np.flatnonzero(fold_of != args.fold)
            cases = [named[i].scan for i in others[args.train_cases:]]
        else:
            cases = [named[i].scan for i in np.flatnonzero(fold_of == args.fold)]
    cases = cases[: args.cases]
    contourer = localizer = None
    weights = [float(w) for w in args.init_weights.split(",")]
    heights = tuple(float(q) for q in args.stroke_heights.split(","))
    margins = [] if args.extent_margins is None else [float(m) for m in args.extent_margins.split(",")]
    if args.init_model is not None:
        from imageforest.apps.contour.api import load_contourer
        from imageforest.apps.contour.recipe import RECIPE
        from imageforest.apps.localize.api import load_localizer

        contourer, localizer = load_contourer(args.init_model), load_localizer(args.init_localizer)
        contourer.posterior_smoothing_mm = (RECIPE["posterior_smoothing_mm"] if args.init_smoothing_mm is None
                                            else args.init_smoothing_mm)
    rows = []
    for ct_path in cases:
        ct = read_image(ct_path)
        labels = read_image(str(ct_path).replace("_ct.nii.gz", "_organs.nii.gz")).array
        scr = simulated_scribbles(labels, heights)
        t0 = time.perf_counter()
        session = SegmentationSession(ct, colour_weight=args.colour_weight,
                                      colour_rounds=None if args.colour_weight is None else 2,
                                      local_updates=not args.no_local, extent_margin=args.extent_margin,
                                      slice_path_scale=args.slice_path_scale,
                                      stroke_regions=None if args.stroke_regions is None
                                      else args.stroke_regions == "on")
        t1 = time.perf_counter()
        # as a user paints: every stroke but the last one (the first organ's top slice), an update, then that
        # stroke and the update it starts
        first_strokes = last_stroke_removed(scr)
        session.set_scribbles(first_strokes)
        session.update()
        t_first = time.perf_counter()
        session.set_scribbles(scr)
        result = session.update()
        t2 = time.perf_counter()
        stroke_s = t2 - t_first
        no_peer = np.zeros_like(labels)
        peer = no_peer if args.no_peer else fit_segmenter_peer(ct.array, scr)
        t3 = time.perf_counter()
        tuned = no_peer if args.no_peer else fit_segmenter_peer(ct.array, scr, balanced=True)
        row = {"case": ct_path.name, "features_s": t1 - t0, "update_s": t_first - t1,
               "first_result_s": t_first - t0, "stroke_update_s": stroke_s, "update_steps_s": result.timing_s,
               "peer_s": t3 - t2, "dice": {}, "peer_dice": {}, "tuned_peer_dice": {}}
        outcomes = {"dice": result.labels, "peer_dice": peer, "tuned_peer_dice": tuned}
        recipe_margin = session.extent_margin
        for m in margins:
            session.extent_margin = m
            outcomes[f"margin_{m:g}_dice"] = session.update().labels
        session.extent_margin = recipe_margin
        if contourer is not None:
            from imageforest.apps.contour.api import contour_scan
            from imageforest.imaging.ct import read_scan

            automatic = contour_scan(read_scan(ct_path), contourer, localizer, posterior=False)[0].labels.array
            outcomes["contour_dice"] = automatic
            if args.correct_below is not None:  # only the organs a reviewer would correct get scribbles
                wrong = [k for k in range(1, len(ORGANS) + 1) if (labels == k).any()
                         and dice(automatic == k, labels == k) < args.correct_below]
                # strokes on the wrong organs alone; their background strokes stay off the organs kept as they
                # are, in the reference and in the contours shown, as a reviewer paints around what is right
                kept = np.isin(automatic, [k for k in range(1, len(ORGANS) + 1) if k not in wrong])
                partial = simulated_scribbles(labels, heights, organs=wrong, avoid=kept)
                row["corrected"] = [ORGANS[k - 1] for k in wrong]
                session.set_scribbles(partial)
            for w in weights:
                if args.correct_below is not None and not row["corrected"]:
                    outcomes[f"init_{w:g}_dice"] = automatic  # nothing to correct
                    continue
                session.set_init(automatic, BACKGROUND, w)
                t4 = time.perf_counter()
                outcomes[f"init_{w:g}_dice"] = session.update().labels
                row[f"init_{w:g}_update_s"] = time.perf_counter() - t4
        for key in outcomes:
            row.setdefault(key, {})
        for k, organ in enumerate(ORGANS, start=1):
            if (labels == k).any():
                for key, predicted in outcomes.items():
                    row[key][organ] = dice(predicted == k, labels == k)
        rows.append(row)
        print(f"{ct_path.name}: features {t1 - t0:.2f} s, first update {row['update_s']:.2f} s, first result "
              f"{row['first_result_s']:.2f} s; after one more stroke {stroke_s:.2f} s "
              f"({', '.join(f'{k} {v:.2f}' for k, v in result.timing_s.items())}), fit_segmenter {t3 - t2:.1f} s")
    keys = ["dice", "peer_dice", "tuned_peer_dice", *(f"margin_{m:g}_dice" for m in margins)]
    if contourer is not None:
        keys += ["contour_dice", *(f"init_{w:g}_dice" for w in weights)]
    extra = f" | extent margins {', '.join(map(str, margins))}" if margins else ""
    if contourer:
        extra += f" | contour model alone | from its contours at init weights {', '.join(map(str, weights))}"
    print(f"\nDice per organ over {len(rows)} scans (imageforest | scikit-image fit_segmenter as in its example | "
          f"fit_segmenter, all voxels, balanced classes{extra})")
    means = []
    for organ in ORGANS:
        cols = [[r[key][organ] for r in rows if organ in r[key]] for key in keys]
        if cols[0]:
            means.append([np.mean(c) for c in cols])
            print(f"  {organ:14s} " + " | ".join(f"{np.mean(c):.3f}" for c in cols) + f"  ({len(cols[0])} scans)")
    print(f"  {'mean':14s} " + " | ".join(f"{v:.3f}" for v in np.mean(means, axis=0)))
    print(f"seconds (median): features {np.median([r['features_s'] for r in rows]):.2f}, first update "
          f"{np.median([r['update_s'] for r in rows]):.2f}, first result (both) "
          f"{np.median([r['first_result_s'] for r in rows]):.2f}, update after one more stroke "
          f"{np.median([r['stroke_update_s'] for r in rows]):.2f}, fit_segmenter "
          f"{np.median([r['peer_s'] for r in rows]):.1f}")
    print(f"peak resident memory: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
