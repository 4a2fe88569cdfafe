"""Segmentation from real user scribbles on the GrabCut images, beside the tools a user would pick instead.

    python benchmarks/segment/grabcut.py ../shared/data/grabcut-scribbles [--sets 1,2] [--limit N] [--sheet PNG]
        [--colour-grid] [--per-image] [--json OUT]

Per scribble set (set-1 sparse, set-2 denser; 35 images), the mean foreground IoU over the images (pixels of the
ground truth's uncertain band, value 128, are not scored) and the median seconds per image, all in this process on
the same inputs:

- imageforest: `SegmentationSession` (forest on the scribbled pixels + geodesic transduction + graph cut + colour
  rounds), and its ingredients switched off one at a time (forest alone = a supervised-only forest on the scribbled
  pixels; without the geodesic term; without the graph cut; without the colour rounds; geodesic transduction alone
  with the cut), and with `stroke_regions` on (`--stroke-regions`: the foreground keeps only the regions its
  strokes touch);
- scikit-image's trainable segmenter: `fit_segmenter` with scikit-learn's RandomForestClassifier (50 trees, depth
  10, 5% samples per tree, as scikit-image's example) on `multiscale_basic_features` (sigma 1-16, colour);
- scikit-image's `random_walker` on the L*a*b* image (beta 130, the scribbles as seeds);
- OpenCV's GrabCut initialised from the scribbles (scribbled pixels fixed, the rest of the scribbles' bounding box
  probable foreground, outside it probable background, 5 iterations).

`--colour-grid` scores the colour rounds' weight and count on a grid instead, and chooses them by 5-fold
cross-validation over the images (a setting chosen on four fifths of the images, by the mean IoU of both sets, is
scored on the other fifth), so that the reported figure is not chosen on the images it is measured on.

`--per-image` prints each picture's IoU per method (imageforest against GrabCut and random_walker, where the
differences are); `--json` writes the per-picture scores.

Then the interactive latencies on 640 x 480 images: the features (once per image), the first result (features and
the first update) and an update after one more stroke. Peak memory is the process's resident peak.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import time
from pathlib import Path

import numpy as np
from PIL import Image as PILImage

from imageforest.apps.segment import SegmentationSession, prepare


def load(root: Path, name: str, scribble_set: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    picture = glob.glob(str(root / "images" / f"{name}.*"))[0]
    img = np.array(PILImage.open(picture).convert("RGB"))
    scr = np.array(PILImage.open(root / f"scribbles-set-{scribble_set}" / f"{name}.png"))
    gt = np.array(PILImage.open(root / "gt" / f"{name}.png").convert("L"))
    return img, scr, gt


def iou(fg: np.ndarray, gt: np.ndarray) -> float:
    scored = gt != 128
    truth = gt > 128
    return float(np.sum(fg & truth & scored) / max(np.sum((fg | truth) & scored), 1))


def ours(variant: dict):
    def run(img, scr, prepared):
        session = SegmentationSession(prepared, **variant)
        session.set_scribbles(scr)
        return session.update().labels == 1
    return run


def fit_segmenter_peer(img, scr, prepared):
    from functools import partial

    from skimage.feature import multiscale_basic_features
    from skimage.future import fit_segmenter, predict_segmenter
    from sklearn.ensemble import RandomForestClassifier

    feats = partial(multiscale_basic_features, intensity=True, edges=True, texture=True, sigma_min=1, sigma_max=16,
                    channel_axis=-1)(img)
    clf = RandomForestClassifier(n_estimators=50, n_jobs=-1, max_depth=10, max_samples=0.05, random_state=0)
    clf = fit_segmenter(scr, feats, clf)
    return predict_segmenter(feats, clf) == 1


def random_walker_peer(img, scr, prepared):
    from skimage.segmentation import random_walker

    return random_walker(prepared.guide[0], scr, beta=130, mode="cg_j", channel_axis=-1) == 1


def grabcut_peer(img, scr, prepared):
    import cv2

    mask = np.full(scr.shape, cv2.GC_PR_BGD, np.uint8)
    ys, xs = np.nonzero(scr)
    mask[ys.min():ys.max() + 1, xs.min():xs.max() + 1] = cv2.GC_PR_FGD
    mask[scr == 1] = cv2.GC_FGD
    mask[scr == 2] = cv2.GC_BGD
    bgd, fgd = np.zeros((1, 65), np.float64), np.zeros((1, 65), np.float64)
    cv2.grabCut(np.ascontiguousarray(img[..., ::-1]), mask, None, bgd, fgd, 5, cv2.GC_INIT_WITH_MASK)
    return (mask == cv2.GC_FGD) | (mask == cv2.GC_PR_FGD)


METHODS = {
    "imageforest": ours({}),
    "  with stroke regions": ours({"stroke_regions": True}),
    "  forest alone (supervised)": ours({"geodesic_weight": 0.0, "smoothness": 0.0}),
    "  without geodesic": ours({"geodesic_weight": 0.0}),
    "  without graph cut": ours({"smoothness": 0.0}),
    "  without colour rounds": ours({"colour_weight": 0.0}),
    "  geodesic alone + cut": ours({"geodesic_weight": 1.0}),
    "skimage fit_segmenter": fit_segmenter_peer,
    "skimage random_walker": random_walker_peer,
    "OpenCV GrabCut": grabcut_peer,
}


COLOUR_GRID = [(c, r) for c in (0.1, 0.2, 0.3, 0.4, 0.5) for r in (1, 2, 3)]


def colour_grid(root: Path, names: list[str], sets: list[int], folds: int = 5) -> dict:
    """Per image and set, the IoU of every (colour_weight, colour_rounds) of `COLOUR_GRID` (and of none); the
    5-fold choice over the images and the IoU it gives on the held-out images."""
    grid = [(0.0, 0), *COLOUR_GRID]
    scores = np.zeros((len(sets), len(names), len(grid)))
    for a, s in enumerate(sets):
        for b, name in enumerate(names):
            img, scr, gt = load(root, name, s)
            prepared = prepare(img)
            for g, (c, r) in enumerate(grid):
                session = SegmentationSession(prepared, colour_weight=c, colour_rounds=r)
                session.set_scribbles(scr)
                scores[a, b, g] = iou(session.update().labels == 1, gt)
            print(f"set-{s} {name}: " + " ".join(f"{v:.3f}" for v in scores[a, b]), flush=True)
    fold = np.arange(len(names)) % folds
    held = np.zeros((len(sets), len(names)))
    chosen = []
    for f in range(folds):
        train = fold != f
        best = int(np.argmax(scores[:, train].mean(axis=(0, 1))))
        chosen.append(grid[best])
        held[:, ~train] = scores[:, ~train, best]
    means = scores.mean(axis=1)
    print("mean IoU per setting (colour_weight, rounds): " + ", ".join(
        f"{c:g}/{r}: " + "/".join(f"{m:.3f}" for m in means[:, g]) for g, (c, r) in enumerate(grid)))
    print(f"5-fold choice per fold {chosen}; held-out IoU " + ", ".join(
        f"set-{s} {held[a].mean():.3f}" for a, s in enumerate(sets)))
    return {"grid": grid, "per_image": scores.tolist(), "folds_choice": chosen,
            "held_out": {f"set-{s}": float(held[a].mean()) for a, s in enumerate(sets)}}


def latency(root: Path, names: list[str]) -> dict[str, float]:
    """On 640 x 480 images (medians over up to 8): the features, the first result (features + the first update,
    with the set-2 scribbles but their last stroke) and the update after that last stroke is added."""
    from scipy import ndimage

    feats, firsts, updates = [], [], []
    for name in names:
        img, scr, _ = load(root, name, 2)
        if img.shape[:2] != (480, 640):
            continue
        strokes, n = ndimage.label(scr > 0, structure=np.ones((3, 3)))
        last = strokes == n
        t0 = time.perf_counter()
        session = SegmentationSession(img)
        t1 = time.perf_counter()
        session.set_scribbles(np.where(last, 0, scr))
        session.update()
        t2 = time.perf_counter()
        session.add_scribbles(np.where(last, scr, 0))
        session.update()
        t3 = time.perf_counter()
        feats.append(t1 - t0)
        firsts.append(t2 - t0)
        updates.append(t3 - t2)
        if len(feats) == 8:
            break
    return {"features": float(np.median(feats)), "update": float(np.median(updates)),
            "first": float(np.median(firsts)), "n": len(feats)}


def contact_sheet(root: Path, names: list[str], path: Path) -> None:
    """Image with scribbles | imageforest | GrabCut | truth, for a few images of set-1."""
    rows = []
    for name in names:
        img, scr, gt = load(root, name, 1)
        prepared = prepare(img)
        shown = img.copy()
        shown[scr == 1] = (255, 0, 0)
        shown[scr == 2] = (0, 0, 255)
        tiles = [shown]
        for fg in (METHODS["imageforest"](img, scr, prepared), grabcut_peer(img, scr, prepared), gt > 128):
            tile = (img * 0.35).astype(np.uint8)
            tile[fg] = img[fg]
            tiles.append(tile)
        row = np.concatenate([np.array(PILImage.fromarray(t).resize((240, 180))) for t in tiles], axis=1)
        rows.append(row)
    PILImage.fromarray(np.concatenate(rows, axis=0)).save(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--sets", default="1,2")
    parser.add_argument("--limit", type=int, default=None, help="first N images only")
    parser.add_argument("--methods", default=None, help="comma-separated subset of the method names")
    parser.add_argument("--sheet", type=Path, default=None, help="write a contact sheet PNG of set-1 results")
    parser.add_argument("--latency-only", action="store_true", help="only the 640 x 480 latencies")
    parser.add_argument("--colour-grid", action="store_true",
                        help="choose the colour rounds' weight and count by 5-fold cross-validation over the images")
    parser.add_argument("--json", type=Path, default=None, help="write the per-picture scores here")
    parser.add_argument("--per-image", action="store_true", help="print each picture's IoU per method")
    args = parser.parse_args()
    names = sorted(os.path.splitext(f)[0] for f in os.listdir(args.data / "images"))[: args.limit]
    if args.colour_grid:
        out = colour_grid(args.data, names, [int(v) for v in args.sets.split(",")])
        if args.json is not None:
            args.json.write_text(json.dumps(out))
        return
    if args.latency_only:
        lat = latency(args.data, names)
        print(f"640x480 (median of {lat['n']}): features {lat['features']:.2f} s, update {lat['update']:.3f} s, "
              f"first result {lat['first']:.2f} s")
        return
    methods = {k: v for k, v in METHODS.items() if args.methods is None or k.strip() in args.methods.split(",")}
    results: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for s in (int(v) for v in args.sets.split(",")):
        for name in names:
            img, scr, gt = load(args.data, name, s)
            prepared = prepare(img)
            for label, method in methods.items():
                t0 = time.perf_counter()
                fg = method(img, scr, prepared)
                results.setdefault((label, s), []).append((iou(fg, gt), time.perf_counter() - t0))
    sets = sorted({s for _, s in results})
    print(f"mean foreground IoU over {len(names)} images (seconds per image, median; imageforest's exclude the "
          "features, computed once per image)")
    print(f"{'method':32s}" + "".join(f"  set-{s} IoU   s/img" for s in sets))
    for label in methods:
        cells = "".join(f"  {np.mean([r[0] for r in results[(label, s)]]):9.3f}"
                        f" {np.median([r[1] for r in results[(label, s)]]):7.2f}" for s in sets)
        print(f"{label:32s}{cells}")
    if args.per_image:
        for s in sets:
            print(f"set-{s}: {'picture':<14}" + "".join(f"{k.strip()[:14]:>16}" for k in methods))
            for b, name in enumerate(names):
                print(f"set-{s}: {name:<14}" + "".join(f"{results[(k, s)][b][0]:16.3f}" for k in methods))
    if args.json is not None:
        args.json.write_text(json.dumps({"names": names, "iou": {f"{k.strip()}/set-{s}": [r[0] for r in v]
                                                                  for (k, s), v in results.items()}}))
    if "imageforest" in methods:
        for s in sets:
            base = np.mean([r[0] for r in results[("imageforest", s)]])
            ratios = ", ".join(f"{k.strip()} {np.mean([r[0] for r in results[(k, s)]]) / base:.2f}"
                               for k in methods if k != "imageforest" and not k.startswith("  "))
            print(f"set-{s}: peers' IoU / imageforest's: {ratios}")
    lat = latency(args.data, names)
    print(f"640x480 (median of {lat['n']}): features {lat['features']:.2f} s, update {lat['update']:.3f} s, first "
          f"result {lat['first']:.2f} s")
    print(f"peak resident memory: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    if args.sheet is not None:
        contact_sheet(args.data, names[:6], args.sheet)
        print(f"contact sheet: {args.sheet}")


if __name__ == "__main__":
    main()
