"""The recipe of the default model shipped in `apps/localize/models/hn_organs.npz` (parameters: `recipe.py`).

    python -m imageforest.apps.localize.scripts.train_default [../shared/data/openkbp-hn] [--cv-json RESULTS.json]

Trains on every case of the openkbp-hn folder (203 head-and-neck CTs, 7 organs) with the parameters below and a
fixed seed, so the same data gives the same bytes. The model card in the file's metadata records the data, organs,
working spacing, parameters and, when `--cv-json` names the output of
`benchmarks/localize/cross_validate.py --json`, the cross-validated errors measured with the same parameters.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from imageforest.apps.localize.api import DEFAULT_MODEL
from imageforest.apps.localize.model import OrganLocalizer
from imageforest.apps.localize.recipe import PARAMETERS
from imageforest.apps.localize.training import train_localizer
from imageforest.imaging.ct_organs import openkbp_cases

NAME = "openkbp-hn-7-organs"
VERSION = "2"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", nargs="?", type=Path,
                    default=Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "openkbp-hn")
    ap.add_argument("--out", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--cv-json", type=Path, default=None, help="benchmarks/localize/cross_validate.py --json output")
    ap.add_argument("--card-only", action="store_true",
                    help="only add --cv-json's numbers to the model card of the existing --out model")
    args = ap.parse_args()

    if args.card_only:
        model = OrganLocalizer.load(args.out)
    else:
        cases, organs = openkbp_cases(args.data)
        t0 = time.perf_counter()
        model = train_localizer(cases, organs, progress=print, name=NAME, version=VERSION,
                                data_note="openkbp-hn: 203 head-and-neck CT scans with clinical contours (OpenKBP "
                                          "challenge, Babier et al., Med Phys 2021; TCIA)", **PARAMETERS)
        print(f"trained in {time.perf_counter() - t0:.0f} s")
    if args.cv_json is not None:
        cv = json.loads(args.cv_json.read_text())
        forest = cv["forest"]
        model.model_card_["cross_validation"] = {
            "mean_wall_mm": round(forest["mean_wall_mm"], 2),
            "per_organ_wall_mm": {r["organ"]: round(r["wall_mm"], 2) for r in forest["organs"]},
            "presence_full_scans": round(forest["presence_full"], 3),
            "presence_out_of_view_slabs": round(forest["presence_slabs"], 3),
            "protocol": cv.get("protocol", "benchmarks/localize/cross_validate.py"),
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    model.save(args.out)
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
