"""Segmentation of head-and-neck organs in real CT from simulated scribbles, beside scikit-image's trainable
segmenter on the same volume and scribbles.

    python benchmarks/segment/ct.py ../shared/data/openkbp-hn [--cases 3]

Scribbles are simulated from the reference organ label maps as a user would paint them: on three axial slices per
organ (at a quarter, half and three quarters of its height), the organ's cross-section one voxel in from its
contour (a brush stroke filling it) with the organ's label, and background (label 8) as a ring 2-4 voxels outside
the organs plus every 8th row of the slice wherever it is over 2 voxels from any organ. Reported: Dice per organ
over the whole volume, the seconds to compute the features (once per volume) and per update, and for
scikit-image's `fit_segmenter` (scikit-learn's random forest of 50 trees on `multiscale_basic_features`, sigma
1-16) its seconds per volume, features included.
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


def simulated_scribbles(labels: np.ndarray) -> np.ndarray:
    """(z, y, x) uint8 scribbles from an organ label map (see the module docstring)."""
    scr = np.zeros(labels.shape, dtype=np.uint8)
    anywhere = labels > 0
    for organ in range(1, len(ORGANS) + 1):
        zs = np.flatnonzero((labels == organ).any(axis=(1, 2)))
        if zs.size == 0:
            continue
        for q in (0.25, 0.5, 0.75):
            z = int(zs[int(q * (zs.size - 1))])
            inner = ndimage.binary_erosion(labels[z] == organ)
            scr[z][inner if inner.any() else labels[z] == organ] = organ
            away = ~ndimage.binary_dilation(anywhere[z], iterations=2)
            ring = ndimage.binary_dilation(labels[z] == organ, iterations=4) & away
            lines = np.zeros_like(away)
            lines[::8] = True  # broad background strokes across the slice: air, fat, muscle, bone
            scr[z][(ring | (lines & away)) & (scr[z] == 0)] = BACKGROUND
    return scr


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
    args = parser.parse_args()
    cases = sorted(args.data.glob("*_ct.nii.gz"))[: args.cases]
    rows = []
    for ct_path in cases:
        ct = read_image(ct_path)
        labels = read_image(str(ct_path).replace("_ct.nii.gz", "_organs.nii.gz")).array
        scr = simulated_scribbles(labels)
        t0 = time.perf_counter()
        session = SegmentationSession(ct)
        t1 = time.perf_counter()
        session.set_scribbles(scr)
        result = session.update()
        t2 = time.perf_counter()
        peer = fit_segmenter_peer(ct.array, scr)
        t3 = time.perf_counter()
        tuned = fit_segmenter_peer(ct.array, scr, balanced=True)
        row = {"case": ct_path.name, "features_s": t1 - t0, "update_s": t2 - t1, "update_steps_s": result.timing_s,
               "peer_s": t3 - t2, "dice": {}, "peer_dice": {}, "tuned_peer_dice": {}}
        for k, organ in enumerate(ORGANS, start=1):
            if (labels == k).any():
                row["dice"][organ] = dice(result.labels == k, labels == k)
                row["peer_dice"][organ] = dice(peer == k, labels == k)
                row["tuned_peer_dice"][organ] = dice(tuned == k, labels == k)
        rows.append(row)
        print(f"{ct_path.name}: features {t1 - t0:.2f} s, update {t2 - t1:.2f} s "
              f"({', '.join(f'{k} {v:.2f}' for k, v in result.timing_s.items())}), fit_segmenter {t3 - t2:.1f} s")
    print(f"\nDice per organ over {len(rows)} scans (imageforest | scikit-image fit_segmenter as in its example | "
          "fit_segmenter, all voxels, balanced classes)")
    means = []
    for organ in ORGANS:
        cols = [[r[key][organ] for r in rows if organ in r[key]] for key in ("dice", "peer_dice", "tuned_peer_dice")]
        if cols[0]:
            means.append([np.mean(c) for c in cols])
            print(f"  {organ:14s} " + " | ".join(f"{np.mean(c):.3f}" for c in cols) + f"  ({len(cols[0])} scans)")
    print(f"  {'mean':14s} " + " | ".join(f"{v:.3f}" for v in np.mean(means, axis=0)))
    print(f"seconds (median): features {np.median([r['features_s'] for r in rows]):.2f}, update "
          f"{np.median([r['update_s'] for r in rows]):.2f}, fit_segmenter {np.median([r['peer_s'] for r in rows]):.1f}")
    print(f"peak resident memory: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
