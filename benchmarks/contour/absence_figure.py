"""The absence check on one neck slab, as a reviewer sees it: the contour overlay without the check and with it.

    python benchmarks/contour/absence_figure.py ../shared/data/openkbp-hn --model bench_out/cv80/recipe_fold0.npz
        --localizer bench_out/loc_fold0_80.npz [--case train_pt_137] [-o apps/contour/docs/absence_check.png]

The scan's lower 40% (below the parotids, as `out_of_view.py` cuts it) is contoured by the forest in the localizer's
boxes, with the recipe's settings after the forest, once without the localizer's evidence (the check off) and once
with it; the two overlays (`imageforest contour --overlay`'s drawing) are stacked into one PNG.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image as PILImage

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.contour.cross_validate import with_recipe_settings
from benchmarks.contour.out_of_view import slab
from imageforest.apps.contour.api import load_contourer, localized
from imageforest.apps.contour.overlay import write_overlay
from imageforest.apps.localize.api import load_localizer
from imageforest.imaging.ct import read_scan
from imageforest.imaging.ct_organs import openkbp_cases


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path)
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--localizer", type=Path, default=None)
    ap.add_argument("--case", default="train_pt_137")
    ap.add_argument("-o", "--out", type=Path, default=Path("apps/contour/docs/absence_check.png"))
    args = ap.parse_args()
    cases, _ = openkbp_cases(args.data)
    case = next(c for c in cases if c.name == args.case)
    model = with_recipe_settings(load_contourer(args.model))
    localizer = load_localizer(args.localizer)
    scan = read_scan(case.scan)
    part = slab(scan, 0, int(0.4 * scan.array.shape[0]))
    boxes, evidence = localized(model, localizer, part)
    with tempfile.TemporaryDirectory() as work:
        panels = []
        for name, given in (("without", None), ("with", evidence)):
            contours = model.contour(part, boxes, given)
            kept = {o: int((contours.labels.array == k + 1).sum()) for k, o in enumerate(model.organs)}
            print(f"{name} the check: " + ", ".join(f"{o} {n}" for o, n in kept.items() if n))
            path = Path(work) / f"{name}.png"
            write_overlay(contours, model.organs, path, part, title=f"{case.name}, neck slab, {name} the absence check")
            panels.append(PILImage.open(path).convert("RGB"))
        width = max(p.width for p in panels)
        sheet = PILImage.new("RGB", (width, sum(p.height for p in panels)))
        y = 0
        for p in panels:
            sheet.paste(p, (0, y))
            y += p.height
        sheet.save(args.out)
    print(f"wrote {args.out}; localizer evidence (probability, spread mm) per organ: "
          + ", ".join(f"{o} ({p:.2f}, {s:.1f})" for o, (p, s) in zip(model.organs, np.asarray(evidence), strict=True)))


if __name__ == "__main__":
    main()
