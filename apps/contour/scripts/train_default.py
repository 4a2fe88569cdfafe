"""The recipe of the default model shipped in `apps/contour/models/hn_contours.npz` (settings: `recipe.py`).

    python -m imageforest.apps.contour.scripts.train_default [../shared/data/openkbp-hn] [--cv-json RESULTS.json]
        [--card-only | --atlas-only | --settings-only]

Trains on every case of the openkbp-hn folder (203 head-and-neck CTs with clinical contours of 7 organs) with the
recipe and a fixed seed, so the same data gives the same bytes. With `--cv-json` (the output of
`benchmarks/contour/cross_validate.py --json`) the model card records the cross-validated scores. With
`--atlas-only` the existing model keeps its forest and gets the box atlas (counted with the same draws as a full
training) and the recipe's prediction settings (`background_scale`, `prior_weight`, `posterior_smoothing_mm`):
the forest, atlas and settings a full training with this recipe gives (only the card's training time differs), in
minutes instead of an hour. With `--settings-only` it keeps its forest and atlas and takes the recipe's
prediction settings alone (those that act after the forest and need no count, all but `atlas_bins`).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from imageforest.apps.contour.api import DEFAULT_MODEL
from imageforest.apps.contour.model import OrganContourer
from imageforest.apps.contour.recipe import recipe_for
from imageforest.apps.contour.training import train_contourer
from imageforest.imaging.ct_organs import openkbp_cases

NAME = "openkbp-hn-7-organ-contours"
# Settings that act after the forest (a model trained before they changed takes them with --atlas-only)
PREDICTION_SETTINGS = ("background_scale", "prior_weight", "atlas_bins", "posterior_smoothing_mm", "cut_smoothness",
                       "min_expected_share", "absence_logit", "absence_threshold", "posterior_calibration")
VERSION = "1"
SEED = 0


def cross_validation_card(cv: dict) -> dict:
    """Mean Dice and median HD95 per organ and method from a cross-validation JSON."""
    organs = cv["organs"]
    card = {"folds": cv["folds"], "folds_run": sorted({c["fold"] for e in cv["methods"].values()
                                                      for c in e["cases"].values()}),
            "train_cases_per_fold": cv["train_cases"], "boxes": cv["boxes"], "methods": {}}

    def value(v: float, digits: int):  # organs no test scan holds: null, not NaN (JSON has no NaN)
        return None if np.isnan(v) else round(float(v), digits)

    for method, entry in cv["methods"].items():
        cases = list(entry["cases"].values())
        with np.errstate(all="ignore"):
            dice = np.nanmean(np.array([c["dice_axial"] for c in cases], dtype=float), axis=0)
            hd = np.nanmedian(np.array([c["hd95_axial"] for c in cases], dtype=float), axis=0)
        card["methods"][method] = {"scans": len(cases), "mean_dice": round(float(np.nanmean(dice)), 3),
                                   "dice": {o: value(d, 3) for o, d in zip(organs, dice, strict=True)},
                                   "hd95_mm": {o: value(h, 1) for o, h in zip(organs, hd, strict=True)}}
    return card


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", nargs="?", type=Path,
                    default=Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "openkbp-hn")
    ap.add_argument("--out", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--cv-json", type=Path, default=None, help="benchmarks/contour/cross_validate.py --json output")
    ap.add_argument("--card-only", action="store_true",
                    help="only add --cv-json's scores to the model card of the existing --out model")
    ap.add_argument("--atlas-only", action="store_true",
                    help="give the existing --out model the box atlas and the recipe's prediction settings")
    ap.add_argument("--settings-only", action="store_true",
                    help="give the existing --out model the recipe's prediction settings, forest and atlas kept")
    args = ap.parse_args()
    if args.card_only:
        model = OrganContourer.load(args.out)
    elif args.settings_only:
        model = OrganContourer.load(args.out)
        recipe = recipe_for(model.organs)
        for key in PREDICTION_SETTINGS:
            if key != "atlas_bins":  # the atlas was counted in its bins
                setattr(model, key, recipe[key])
        model.model_card_["parameters"] = model.saved_hyper_parameters()
    elif args.atlas_only:
        from imageforest.apps.contour.training import read_case

        model = OrganContourer.load(args.out)
        cases, organs = openkbp_cases(args.data)
        if [c.name for c in cases] != model.model_card_.get("cases") or tuple(organs) != model.organs:
            raise SystemExit(f"{args.out} was not trained on these cases and organs")
        read = [read_case(c, len(organs)) for c in cases]
        recipe = recipe_for(organs)
        for key in PREDICTION_SETTINGS:
            setattr(model, key, recipe[key])
        model.fit_atlas([r[0] for r in read], [r[1] for r in read], [r[2] for r in read])
        model.model_card_["parameters"] = model.saved_hyper_parameters()
    else:
        cases, organs = openkbp_cases(args.data)
        t0 = time.perf_counter()
        model = train_contourer(cases, organs, progress=print, name=NAME, version=VERSION,
                                data_note="openkbp-hn: 203 head-and-neck CT scans with clinical contours (OpenKBP "
                                          "challenge, Babier et al., Med Phys 2021; TCIA)",
                                random_state=SEED)
        print(f"trained in {time.perf_counter() - t0:.0f} s")
    if args.cv_json is not None:
        model.model_card_["cross_validation"] = cross_validation_card(json.loads(args.cv_json.read_text()))
    model.save(args.out)
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
