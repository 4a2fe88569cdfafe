"""Can a forest that reads no box correct the localizer's boxes before the contour forest reads its atlas in them?

    python benchmarks/contour/box_refit.py ../shared/data/openkbp-hn --plain DIR/plain_fold0.npz \
        --recipe DIR/recipe_fold0.npz [--method atlas-fit|labels] [--axes z] [--organs Brainstem,...] [--dice]

The contour forest reads its box atlas relative to the localizer's boxes, so a box off by 8 mm moves the contour
with it (fold 0's forest: 0.672 mean Dice inside an unseen localizer's boxes, 0.754 inside the true ones). A plain
forest (`cross_validate.py --methods plain --save-models DIR`: the CT and its windows only) gives evidence that
does not follow the boxes. Two ways to turn it into new boxes, per organ:
- atlas-fit: slide each pair of walls on the chosen axes within +-`--reach` mm to the place where the box atlas,
  read in the moved box, best matches the plain forest's log-odds of the organ against the background (the
  Bernoulli log-likelihood of its posterior under the atlas);
- labels: the box of the plain forest's own contour of the organ (its largest component).

Scored on the 42 validation scans of fold 0 (the training folds' scans after the forests' 80, as `tune.py` takes
them) in the boxes of a localizer trained on those 80 scans (`bench_out/contour_fold0_localizer_boxes_validation.json`,
written by `tune.py --boxes fold-localizer`): each wall's median error against the true boxes before and after,
and with `--dice` the recipe forest's Dice in both sets of boxes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from scipy import ndimage

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.contour.cross_validate import AFTER_THE_FOREST, AXIAL_ONLY, _boxes_from_cache, fold_split
from benchmarks.contour.scores import organ_scores
from imageforest.apps.contour.model import ATLAS_RANGE, OrganContourer, smooth_posteriors
from imageforest.apps.contour.recipe import recipe_for
from imageforest.imaging.ct import read_scan
from imageforest.imaging.ct_organs import openkbp_cases
from imageforest.imaging.io import read_image

WALLS = ("x lo", "x hi", "y lo", "y hi", "z lo", "z hi")


def organ_log_odds(plain: OrganContourer, scan, boxes: np.ndarray):
    """The plain forest's log-odds of each organ against the background (n_organs, z, y, x) on its crop, 0 outside
    its region, and the crop; (None, None) when no organ is boxed."""
    post, where = plain.forest_posteriors(scan, boxes)
    if post is None:
        return None, None
    post = smooth_posteriors(post, where.mask, 2.0 / where.crop.spacing[::-1])
    scale = plain._per_organ(plain.background_scale, "background_scale")
    odds = np.log(post[1:] + 1e-3) - np.log(post[:1] + 1e-3) - np.log(scale)[:, None, None, None]
    odds[:, ~where.mask] = 0.0
    return odds.astype(np.float32), where.crop


def fit_walls(atlas: np.ndarray, crop, box: np.ndarray, odds: np.ndarray, axis: int, reach: float) -> np.ndarray:
    """`box` (6,) mm with its two walls on `axis` (0 x, 1 y, 2 z) moved, within +-`reach` mm in half-voxel steps,
    to where the atlas (bins^3) read in the box best matches `odds` (z, y, x)."""
    bins = atlas.shape[0]
    lo_r, hi_r = ATLAS_RANGE
    size = np.maximum(box[1::2] - box[0::2], 1e-3)
    grow = 0.5 * size + reach  # the atlas reaches half a box beyond each wall
    i_lo = np.maximum(np.floor((box[0::2] - grow - crop.origin) / crop.spacing).astype(int), 0)
    i_hi = np.minimum(np.ceil((box[1::2] + grow - crop.origin) / crop.spacing).astype(int),
                      np.array(odds.shape[::-1]) - 1)
    if np.any(i_hi < i_lo):
        return box
    sub = odds[i_lo[2]:i_hi[2] + 1, i_lo[1]:i_hi[1] + 1, i_lo[0]:i_hi[0] + 1]
    zz, yy, xx = np.nonzero(sub)
    if zz.size == 0:
        return box
    ijk = np.c_[xx + i_lo[0], yy + i_lo[1], zz + i_lo[2]]
    u = (crop.origin + crop.spacing * ijk - box[0::2]) / size  # identity direction (openkbp-hn)
    index = ((u[:, ::-1] - lo_r) / (hi_r - lo_r) * bins - 0.5).T.copy()  # (3, n) z, y, x atlas indices
    along = ijk[:, axis] - i_lo[axis]
    n = int(i_hi[axis] - i_lo[axis] + 1)
    # profile[i, j]: the evidence in slab i (along the axis) weighted by the atlas at bin j along the axis, the
    # other coordinates where the box puts them; a wall shift only changes which bin each slab reads
    profile = np.zeros((n, bins + 2))
    for j in range(bins):
        index[2 - axis] = j
        profile[:, j + 1] = np.bincount(along, weights=sub[zz, yy, xx] * ndimage.map_coordinates(
            atlas, index, order=1, mode="constant", cval=0.0), minlength=n)
    pos = crop.origin[axis] + crop.spacing[axis] * (i_lo[axis] + np.arange(n))
    steps = np.arange(-reach, reach + 1e-9, crop.spacing[axis] / 2)
    a, b = (v.ravel() for v in np.meshgrid(steps, steps, indexing="ij"))
    lo, hi = box[2 * axis] + a, box[2 * axis + 1] + b
    keep = hi - lo >= 2.0
    lo, hi = lo[keep], hi[keep]
    t = ((pos[None] - lo[:, None]) / (hi - lo)[:, None] - lo_r) / (hi_r - lo_r) * bins + 0.5
    f = np.floor(t).astype(int)
    frac = t - f
    rows = np.broadcast_to(np.arange(n), f.shape)
    score = (profile[rows, np.clip(f, 0, bins + 1)] * (1 - frac)
             + profile[rows, np.clip(f + 1, 0, bins + 1)] * frac).sum(axis=1)
    best = int(np.argmax(score))
    out = box.copy()
    out[2 * axis], out[2 * axis + 1] = lo[best], hi[best]
    return out


def refit(method: str, plain: OrganContourer, atlas: np.ndarray, scan, boxes: np.ndarray, which: list[int],
          axes: list[int], reach: float) -> np.ndarray:
    out = boxes.copy()
    if method == "labels":
        labels = plain.contour(scan, boxes).labels
        for k in which:
            zz, yy, xx = np.nonzero(labels.array == k + 1)
            if zz.size and not np.isnan(boxes[k]).any():
                lo = labels.origin + labels.spacing * (np.array([xx.min(), yy.min(), zz.min()]) - 0.5)
                hi = labels.origin + labels.spacing * (np.array([xx.max(), yy.max(), zz.max()]) + 0.5)
                for a in axes:
                    out[k, 2 * a], out[k, 2 * a + 1] = lo[a], hi[a]
        return out
    odds, crop = organ_log_odds(plain, scan, boxes)
    for k in which:
        if odds is not None and not np.isnan(boxes[k]).any():
            for a in axes:
                out[k] = fit_walls(atlas[k], crop, out[k], odds[k], a, reach)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path)
    ap.add_argument("--plain", type=Path, required=True, help="a plain forest of fold 0 (cross_validate.py)")
    ap.add_argument("--recipe", type=Path, required=True, help="the recipe forest of fold 0, trained on the same scans")
    ap.add_argument("--method", choices=("atlas-fit", "labels"), default="atlas-fit")
    ap.add_argument("--axes", default="z", help="the axes whose walls move, e.g. z or xyz")
    ap.add_argument("--organs", default=None, help="the organs whose boxes move (default: all)")
    ap.add_argument("--reach", type=float, default=12.0, help="mm (atlas-fit)")
    ap.add_argument("--cases", type=int, default=42)
    ap.add_argument("--dice", action="store_true", help="also contour in both sets of boxes")
    args = ap.parse_args()
    cases, organs = openkbp_cases(args.data)
    fold_of = fold_split(len(cases))
    val = [int(i) for i in np.flatnonzero(fold_of != 0)][80:80 + args.cases]
    given = _boxes_from_cache(json.loads(
        Path("bench_out/contour_fold0_localizer_boxes_validation.json").read_text())["boxes"])
    plain, recipe = OrganContourer.load(args.plain), OrganContourer.load(args.recipe)
    for name, value in recipe_for(organs).items():
        if name in AFTER_THE_FOREST:
            for model in (plain, recipe):
                setattr(model, name, tuple(value) if isinstance(value, list) else value)
    which = [organs.index(o) for o in args.organs.split(",")] if args.organs else list(range(len(organs)))
    axes = ["xyz".index(a) for a in args.axes]
    axial = tuple(organs.index(o) for o in AXIAL_ONLY)
    errors, dice = {"given": [], "refit": []}, {"given": [], "refit": []}
    for n, i in enumerate(val):
        scan = read_scan(cases[i].scan)
        boxes = {"given": np.asarray(given[cases[i].name], dtype=np.float64)}
        boxes["refit"] = refit(args.method, plain, recipe.box_atlas_, scan, boxes["given"], which, axes, args.reach)
        truth_boxes = np.asarray(cases[i].boxes, dtype=np.float64)
        line = f"{n + 1}/{len(val)} {cases[i].name}"
        for key in errors:
            errors[key].append(boxes[key] - truth_boxes)
            if args.dice:
                pred = recipe.contour(scan, boxes[key]).labels.array
                truth = np.asarray(read_image(cases[i].labels).array)
                dice[key].append(organ_scores(pred, truth, len(organs), scan.spacing[::-1], axial)["dice_axial"])
                line += f" {key} {np.nanmean(dice[key][-1]):.3f}"
        print(line, flush=True)
    print(f"median |wall error| mm, given -> refit (median signed error after); {args.method}, axes {args.axes}")
    print(f"{'':11s}" + "".join(f"{w:>19s}" for w in WALLS))
    before, after = np.array(errors["given"]), np.array(errors["refit"])
    for k, organ in enumerate(organs):
        cells = []
        for w in range(6):
            ok = ~np.isnan(before[:, k, w]) & ~np.isnan(after[:, k, w])
            cells.append(f"{np.median(np.abs(before[ok, k, w])):5.1f} > {np.median(np.abs(after[ok, k, w])):4.1f}"
                         f" ({np.median(after[ok, k, w]):+5.1f})")
        print(f"{organ[:10]:11s}" + "".join(f"{c:>19s}" for c in cells))
    if args.dice:
        for key in dice:
            per = np.nanmean(np.array(dice[key]), axis=0)
            print(f"Dice in the {key} boxes: mean {np.nanmean(per):.3f} | "
                  + " ".join(f"{o[:8]} {v:.3f}" for o, v in zip(organs, per, strict=True)))


if __name__ == "__main__":
    main()
