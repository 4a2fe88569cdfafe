"""Cross-validated organ contouring on openkbp-hn: the entangled forest beside its peers, in the same run.

    python benchmarks/contour/cross_validate.py ../shared/data/openkbp-hn [--folds 5] [--train-cases 40]
        [--test-cases 10] [--methods entangled,plain,atlas] [--atlas-cases 2] [--boxes localizer|truth] [--json OUT]

Methods (each fold trains on the other folds' scans, at most `--train-cases` of them, and scores its first
`--test-cases` scans):
- recipe: the contour application's forest (`OrganContourer`, the recipe's settings: one stage whose context
  tests read the box atlas);
- entangled: the same with entangled stages at depths 8 and 12 (later tests also read the posterior maps);
- entangled-ct: entangled stages without the atlas as context (the posteriors are the only context);
- plain: no context at all, the CT's boxes alone (same trees, depth, points, candidates, atlas weighting);
- atlas: multi-atlas segmentation with SimpleITK, 5 of 10 training atlases (those that agree best with the scan
  after an affine alignment near their organs) warped on by demons, a majority vote per organ of the warped label
  maps (`atlas.py`), on the first `--atlas-cases` test scans of a fold (a minute or two per scan).

The forests contour inside the boxes given by `--boxes`: the shipped localizer's (which was trained on all 203
scans, so its boxes are better than on unseen scans), a localizer trained on the fold's training scans alone (the
boxes an unseen scan gets; about 10 minutes per fold for 80 scans), or the true boxes. Scores: Dice and
HD95 per organ, SpinalCord and Esophagus also inside the reference's axial extent; time per scan; training time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.contour.scores import organ_scores
from imageforest.apps.contour.model import OrganContourer
from imageforest.apps.contour.recipe import recipe_for
from imageforest.imaging.ct import read_scan
from imageforest.imaging.ct_organs import openkbp_cases
from imageforest.imaging.io import read_image

AXIAL_ONLY = ("SpinalCord", "Esophagus")
AFTER_THE_FOREST = ("background_scale", "prior_weight", "posterior_smoothing_mm", "largest_component", "cut_smoothness",
                    "min_expected_share", "absence_logit", "absence_threshold", "posterior_calibration")
# Each forest method: the recipe with these settings changed
VARIANTS = {"recipe": {}, "entangled": {"entangled_depths": (8, 12)},
            "entangled-ct": {"entangled_depths": (8, 12), "prior_maps": False},
            "plain": {"entangled_depths": (), "prior_maps": False}}


ABSENT = -1e9  # JSON has no NaN: an absent organ's box is cached as this


def fold_split(n_cases: int, folds: int = 5, seed: int = 0) -> np.ndarray:
    """(n_cases,) the fold of each case (in `openkbp_cases` order): the split every contour benchmark shares."""
    return np.random.default_rng(seed).permutation(n_cases) % folds


def add_fold_model_arguments(ap) -> None:
    """The arguments of a script that scores a fold's saved forest and localizer on that fold's first test scans:
    DATA, --model, --localizer, --fold, --folds, --cases."""
    ap.add_argument("data", type=Path)
    ap.add_argument("--model", type=Path, required=True, help="a fold's forest (cross_validate.py --save-models)")
    ap.add_argument("--localizer", type=Path, required=True, help="a localizer trained on the same scans")
    ap.add_argument("--fold", type=int, default=0)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--cases", type=int, default=12, help="the fold's first test scans scored")


def with_recipe_settings(model):
    """`model` (an `OrganContourer`, e.g. a fold's saved forest) with the recipe's settings after the forest, as
    the shipped model has them; returned for chaining."""
    recipe = recipe_for(model.organs)
    for key in AFTER_THE_FOREST:
        setattr(model, key, recipe[key])
    return model


def _cached_boxes(model, scan) -> list:
    return np.nan_to_num(model.localize(scan).boxes(), nan=ABSENT).tolist()


def _boxes_from_cache(known: dict) -> dict[str, list]:
    return {k: np.where(np.asarray(v) < ABSENT / 10, np.nan, np.asarray(v)).tolist() for k, v in known.items()}


def localizer_boxes(cases, scans, cache: Path) -> dict[str, list]:
    """The shipped localizer's boxes per case (NaN rows: absent), cached in `cache`."""
    known = json.loads(cache.read_text()) if cache.is_file() else {}
    todo = [i for i, c in enumerate(cases) if c.name not in known]
    if todo:
        from imageforest.apps.localize.api import load_localizer

        model = load_localizer()
        for i in todo:
            known[cases[i].name] = _cached_boxes(model, scans[i])
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(known))
    return _boxes_from_cache(known)


def fold_localizer_boxes(cases, scans, organs, train: list[int], test: list[int], cache: Path) -> dict[str, list]:
    """Boxes of the `test` scans from a localizer (the default recipe) trained on the `train` scans alone: what a
    scan the whole pipeline never saw gets. Cached in `cache` with the training scans' names."""
    names = [cases[i].name for i in train]
    known = json.loads(cache.read_text()) if cache.is_file() else {}
    if known.get("train") != names or any(cases[i].name not in known.get("boxes", {}) for i in test):
        from imageforest.apps.localize.training import train_localizer

        t0 = time.perf_counter()
        model = train_localizer([cases[i] for i in train], organs)
        print(f"fold localizer trained on {len(train)} scans in {time.perf_counter() - t0:.0f} s", flush=True)
        known = {"train": names, "boxes": {cases[i].name: _cached_boxes(model, scans[i]) for i in test}}
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(known))
    return _boxes_from_cache(known["boxes"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--run-folds", default=None, help="comma-separated folds to run (default: all)")
    ap.add_argument("--train-cases", type=int, default=40)
    ap.add_argument("--test-cases", type=int, default=10)
    ap.add_argument("--methods", default="recipe,entangled,plain")
    ap.add_argument("--atlas-cases", type=int, default=2, help="test cases per fold for the (slow) atlas peer")
    ap.add_argument("--boxes", choices=("localizer", "fold-localizer", "truth"), default="localizer",
                    help="the shipped localizer's boxes (it saw every scan), a localizer trained on the fold's "
                         "training scans only, or the true boxes")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="override a recipe setting of every forest (JSON value), e.g. --set n_trees=4")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--load-models", type=Path, default=None, metavar="DIR",
                    help="score the forests --save-models kept, where a method's file is there, instead of training "
                         "(--set then changes only the "
                         "settings applied after the forest: background_scale, prior_weight, posterior_smoothing_mm, "
                         "largest_component, cut_smoothness)")
    ap.add_argument("--save-models", type=Path, default=None, metavar="DIR",
                    help="keep each fold's forests as DIR/<method>_fold<k>.npz (e.g. to start segmentation from)")
    args = ap.parse_args()

    cases, organs = openkbp_cases(args.data)
    fold_of = fold_split(len(cases), args.folds, args.seed)
    methods = args.methods.split(",")
    unknown = set(methods) - {*VARIANTS, "atlas"}
    if unknown:
        raise SystemExit(f"unknown methods {sorted(unknown)}: choose from {[*VARIANTS, 'atlas']}")
    overrides = {k: json.loads(v) for k, v in (s.split("=", 1) for s in args.set)}
    print(f"{len(cases)} cases, {args.folds} folds, methods {methods}, boxes {args.boxes}, overrides {overrides}")
    t0 = time.perf_counter()
    scans = [read_scan(c.scan) for c in cases]
    labels = [np.asarray(read_image(c.labels).array) for c in cases]
    print(f"read in {time.perf_counter() - t0:.0f} s")
    boxes = {c.name: c.boxes for c in cases}
    given = (localizer_boxes(cases, scans, Path("bench_out/contour_localizer_boxes.json"))
             if args.boxes == "localizer" else {c.name: c.boxes.tolist() for c in cases})  # fold-localizer: per fold
    axial = tuple(organs.index(o) for o in AXIAL_ONLY if o in organs)
    results: dict = {"organs": organs, "methods": {}, "settings": {**recipe_for(organs), **overrides},
                     "boxes": args.boxes,
                     "folds": args.folds, "train_cases": args.train_cases, "test_cases": args.test_cases}
    run_folds = range(args.folds) if args.run_folds is None else [int(f) for f in args.run_folds.split(",")]
    for fold in run_folds:
        train = [i for i in np.flatnonzero(fold_of != fold)][:args.train_cases]
        test = [i for i in np.flatnonzero(fold_of == fold)][:args.test_cases]
        if args.boxes == "fold-localizer":
            given = fold_localizer_boxes(cases, scans, organs, train, test,
                                         Path(f"bench_out/contour_fold{fold}_localizer_boxes.json"))
        for method in methods:
            entry = results["methods"].setdefault(method, {"cases": {}, "train_s": [], "peak_mb": []})
            tracemalloc.start()
            t1 = time.perf_counter()
            if method == "atlas":
                from benchmarks.contour.atlas import MultiAtlasSegmentation

                model = MultiAtlasSegmentation(n_atlases=5, seed=args.seed).fit(
                    [scans[i] for i in train], [labels[i] for i in train])
            elif args.load_models is not None and (args.load_models / f"{method}_fold{fold}.npz").is_file():
                model = OrganContourer.load(args.load_models / f"{method}_fold{fold}.npz")
                for key, value in overrides.items():
                    if key not in AFTER_THE_FOREST:
                        raise SystemExit(f"--set {key}: a loaded forest keeps its training settings")
                    setattr(model, key, tuple(value) if isinstance(value, list) else value)
            else:
                params = {**recipe_for(organs), **VARIANTS[method], **overrides, "organs": tuple(organs),
                          "random_state": args.seed + fold}
                model = OrganContourer(**params).fit_scans([scans[i] for i in train], [labels[i] for i in train],
                                                           [boxes[cases[i].name] for i in train])
            entry["train_s"].append(time.perf_counter() - t1)
            if args.save_models is not None and method != "atlas":
                args.save_models.mkdir(parents=True, exist_ok=True)
                model.save(args.save_models / f"{method}_fold{fold}.npz")
            for i in test[:args.atlas_cases] if method == "atlas" else test:
                t2 = time.perf_counter()
                if method == "atlas":
                    pred = model.predict(scans[i])
                else:
                    pred = model.contour(scans[i], np.asarray(given[cases[i].name], dtype=np.float64)).labels.array
                elapsed = time.perf_counter() - t2
                sc = organ_scores(pred, labels[i], len(organs), scans[i].spacing[::-1], axial)
                entry["cases"][cases[i].name] = {**sc, "time_s": elapsed, "fold": fold}
            entry["peak_mb"].append(tracemalloc.get_traced_memory()[1] / 1e6)
            tracemalloc.stop()
            summary(method, entry, organs)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1))
    print("\nfinal")
    for method in methods:
        summary(method, results["methods"][method], organs)


def summary(method: str, entry: dict, organs: list[str]) -> None:
    cases = entry["cases"].values()
    d = np.array([c["dice"] for c in cases])
    da = np.array([c["dice_axial"] for c in cases])
    h = np.array([c["hd95_axial"] for c in cases])
    t = np.array([c["time_s"] for c in cases])
    with np.errstate(all="ignore"):
        per = np.nanmean(d, axis=0)
        per_a = np.nanmean(da, axis=0)
        hd = np.nanmedian(h, axis=0)
    cells = " ".join(f"{o[:8]} {a:.3f}/{b:.3f}/{c:.1f}" for o, a, b, c in zip(organs, per, per_a, hd, strict=True))
    print(f"{method:9s} n={len(d)} mean Dice {np.nanmean(per):.3f} (axial {np.nanmean(per_a):.3f}) | {cells} | "
          f"{np.mean(t):.2f} s/scan, train {np.mean(entry['train_s']):.0f} s, peak {max(entry['peak_mb']):.0f} MB",
          flush=True)


if __name__ == "__main__":
    main()
