"""Organs out of view: slabs cut from head-and-neck scans, contoured by the shipped models; an organ with no voxel
in the slab's reference should get none.

    python benchmarks/contour/out_of_view.py ../shared/data/openkbp-hn [--cases 40]

For the test scans of fold 0 (the split of `cross_validate.py`), two slabs per scan: the upper 40% of the slices
(head: no larynx, oesophagus, most of the cord) and the lower 40% (neck: no brainstem, parotids). Organs the scan's
reference contours (clinicians left some out) count: of the (slab, organ) pairs whose slab holds none of the
organ's reference voxels, the share given none; of those whose slab holds some, the mean Dice (often of a few
slices cut at the slab's edge). The shipped localizer and contour model were trained on all 203 scans, these
included: the figures are in-sample for presence (the localizer's cross-validated presence on slabs is in its
README).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from imageforest.apps.contour.api import contour_scan, load_contourer
from imageforest.apps.localize.api import load_localizer
from imageforest.imaging.ct import read_scan
from imageforest.imaging.ct_organs import openkbp_cases
from imageforest.imaging.io import Image, read_image


def slab(image: Image, z0: int, z1: int) -> Image:
    arr = np.ascontiguousarray(image.array[z0:z1])
    origin = image.index_to_physical(np.array([[0.0, 0.0, float(z0)]]))[0]
    return Image(arr, image.spacing.copy(), origin, image.direction.copy(), source=image.source)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path)
    ap.add_argument("--cases", type=int, default=40)
    ap.add_argument("--model", default=None, help="a contour model file (default: the shipped one)")
    args = ap.parse_args()
    cases, organs = openkbp_cases(args.data)
    fold_of = np.random.default_rng(0).permutation(len(cases)) % 5
    test = [cases[i] for i in np.flatnonzero(fold_of == 0)][:args.cases]
    model, localizer = load_contourer(args.model), load_localizer()
    empty_ok = empty_n = 0
    dice: dict[str, list[float]] = {o: [] for o in organs}
    wrong: dict[str, int] = {o: 0 for o in organs}
    wrong_voxels: list[int] = []  # how many voxels an organ absent from the slab was given, where it got some
    for case in test:
        scan, labels = read_scan(case.scan), np.asarray(read_image(case.labels).array)
        nz = scan.array.shape[0]
        for z0, z1 in ((int(0.6 * nz), nz), (0, int(0.4 * nz))):  # LPS: index z grows towards the head
            part = slab(scan, z0, z1)
            truth = labels[z0:z1]
            got = contour_scan(part, model, localizer, posterior=False)[0].labels.array
            for k, organ in enumerate(organs):
                ref, out = truth == k + 1, got == k + 1
                if not (labels == k + 1).any():  # not contoured in this scan at all: nothing to say of the slab
                    continue
                if not ref.any():
                    empty_n += 1
                    empty_ok += not out.any()
                    wrong[organ] += bool(out.any())
                    if out.any():
                        wrong_voxels.append(int(out.sum()))
                else:
                    dice[organ].append(2 * np.sum(ref & out) / (ref.sum() + out.sum()))
    print(f"{len(test)} scans, 2 slabs each: organs absent from the slab given no voxel: {empty_ok}/{empty_n} "
          f"({empty_ok / max(empty_n, 1):.1%}); wrongly labelled per organ: {wrong}; their voxels: "
          f"{sorted(wrong_voxels)}")
    print("Dice of the organs in view: " + ", ".join(f"{o} {np.mean(v):.3f} (n={len(v)})" for o, v in dice.items()
                                                     if v))


if __name__ == "__main__":
    main()
