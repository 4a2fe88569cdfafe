"""Organs out of view: slabs cut from head-and-neck scans and contoured; an organ with no voxel in the slab's
reference should get none.

    python benchmarks/contour/out_of_view.py ../shared/data/openkbp-hn [--cases 40] [--model M]
        [--split test|validation] [--shares 0,0.1,0.2] [--full] [--recipe-settings]

Two slabs per scan: the upper 40% of the slices (head: no larynx, oesophagus, most of the cord) and the lower 40%
(neck: no brainstem, parotids). Organs the scan's reference contours (clinicians left some out) count: of the
(slab, organ) pairs whose slab holds none of the organ's reference voxels, the share given none; of those whose slab
holds some, the mean Dice (often of a few slices cut at the slab's edge); and the two in one score, the mean over
all pairs of 1 or 0 for an absent organ (given none or not) and the Dice of a present one. With `--full` the whole
scans are contoured too (mean Dice per organ, whole scan), to show what a setting costs where every organ is in view.

`--split test` takes fold 0's test scans of `cross_validate.py`'s split; `--split validation` the scans of the other
folds after the first 80 (those a fold-0 forest grown with `--train-cases 80` never saw), where settings are chosen.
`--shares` scores each value of the contourer's `min_expected_share` on one run of the forest per slab;
`--recipe-settings` gives a model file (a cross-validation fold's forest) the recipe's settings that act after the
forest, as the shipped model has them. Boxes (and the evidence the absence check reads) come
from the shipped localizer, which was trained on all 203 scans, so its presence figures are in-sample (its
cross-validated presence on slabs is in its README), or from `--localizer` (e.g. one trained on the fold's
training scans, as `presence.py` trains it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.contour.cross_validate import fold_split, with_recipe_settings
from imageforest.apps.contour.api import load_contourer, localized, working_scan
from imageforest.apps.localize.api import load_localizer
from imageforest.imaging.ct import read_scan
from imageforest.imaging.ct_organs import openkbp_cases
from imageforest.imaging.io import Image, read_image


def slab(image: Image, z0: int, z1: int) -> Image:
    arr = np.ascontiguousarray(image.array[z0:z1])
    origin = image.index_to_physical(np.array([[0.0, 0.0, float(z0)]]))[0]
    return Image(arr, image.spacing.copy(), origin, image.direction.copy(), source=image.source)


def split_cases(cases: list, split: str, n: int) -> list:
    fold_of = fold_split(len(cases))
    if split == "test":
        return [cases[i] for i in np.flatnonzero(fold_of == 0)][:n]
    return [cases[i] for i in np.flatnonzero(fold_of != 0)][80:80 + n]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path)
    ap.add_argument("--cases", type=int, default=40)
    ap.add_argument("--model", default=None, help="a contour model file (default: the shipped one)")
    ap.add_argument("--localizer", default=None, help="a localizer model file (default: the shipped one)")
    ap.add_argument("--split", choices=("test", "validation"), default="test")
    ap.add_argument("--shares", default=None, help="min_expected_share values to score (default: the model's)")
    ap.add_argument("--full", action="store_true", help="also contour the whole scans")
    ap.add_argument("--recipe-settings", action="store_true",
                    help="the recipe's settings that act after the forest, in place of the model file's")
    args = ap.parse_args()
    cases, organs = openkbp_cases(args.data)
    use = split_cases(cases, args.split, args.cases)
    model, localizer = load_contourer(args.model), load_localizer(args.localizer)
    if args.recipe_settings:
        with_recipe_settings(model)
    shares = [float(v) for v in args.shares.split(",")] if args.shares else [float(model.min_expected_share)]
    # per share: absent pairs (given none?), Dice of present pairs in slabs, Dice per organ of whole scans
    absent: dict[float, list[bool]] = {s: [] for s in shares}
    partial: dict[float, list[float]] = {s: [] for s in shares}
    full: dict[float, list[list[float]]] = {s: [[] for _ in organs] for s in shares}
    wrong: dict[float, dict[str, list[int]]] = {s: {o: [] for o in organs} for s in shares}
    for case in use:
        scan, labels = read_scan(case.scan), np.asarray(read_image(case.labels).array)
        nz = scan.array.shape[0]
        # LPS: index z grows towards the head
        for z0, z1 in ((int(0.6 * nz), nz), (0, int(0.4 * nz))) + (((0, nz),) if args.full else ()):
            whole = z1 - z0 == nz
            part, truth = slab(scan, z0, z1), labels[z0:z1]
            work = working_scan(model, part)
            if work is not part:
                raise SystemExit(f"{case.name}: finer than the model's grid; this benchmark contours on the scan's")
            run = model.forest_posteriors(work, *localized(model, localizer, work))
            for share in shares:
                model.min_expected_share = share
                got = model.labels_from_posteriors(*run).labels.array
                for k, organ in enumerate(organs):
                    if not (labels == k + 1).any():  # not contoured in this scan: nothing to say of the slab
                        continue
                    ref, out = truth == k + 1, got == k + 1
                    dice = 2 * np.sum(ref & out) / max(ref.sum() + out.sum(), 1)
                    if whole:
                        full[share][k].append(dice)
                    elif not ref.any():
                        absent[share].append(not out.any())
                        if out.any():
                            wrong[share][organ].append(int(out.sum()))
                    else:
                        partial[share].append(dice)
    print(f"{args.split}: {len(use)} scans, 2 slabs each, model {args.model or 'shipped'}")
    for share in shares:
        ok, dice = absent[share], partial[share]
        both = np.mean([float(v) for v in ok] + dice)
        line = (f"min_expected_share {share:g}: absent organs given no voxel {sum(ok)}/{len(ok)} ({np.mean(ok):.1%}), "
                f"organs partly in view mean Dice {np.mean(dice):.3f} (n={len(dice)}), both {both:.4f}")
        if args.full:
            per = [np.mean(v) for v in full[share]]
            line += f", whole scans mean Dice {np.mean(per):.4f} (" + " ".join(
                f"{o[:8]} {d:.3f}" for o, d in zip(organs, per, strict=True)) + ")"
        print(line)
        print("  wrongly given voxels: " + ", ".join(f"{o} {v}" for o, v in wrong[share].items() if v))


if __name__ == "__main__":
    main()
