"""Cross-validated CT organ localization against three baselines, side by side in one run.

    python benchmarks/localize/cross_validate.py ../shared/data/openkbp-hn [--folds 4] [--atlas-cases 12]
        [--methods ...]
    python benchmarks/localize/cross_validate.py --rescore PREDICTIONS.npz [--contour-stop-walls Organ:wall,...]

For a folder in the openkbp-hn format: per organ, mean absolute wall error (mm), centroid error (mm), presence
accuracy and seconds per scan of
- the regression-voting `OrganLocalizer` (trained on the other folds),
- the body-relative population mean box (fitted on the other folds),
- multi-atlas affine registration with SimpleITK (5 atlases from the other folds, per-wall median), on the first
  `--atlas-cases` test cases of every fold (it takes tens of seconds per scan),
- the quick regression-voting prototype: scikit-learn's ExtraTreesRegressor per organ on random box features,
  every voxel voting, per-wall median (`benchmarks.localize.baselines.ExtraTreesVoting`).
`--methods` runs a subset (comma-separated, from forest, body_mean_box, multi_atlas, extra_trees).
Presence is scored on the full scans (contoured organs must be found) and on two slabs of each test scan
(upper 60% and lower 50% of its slices: organs cut out of view must be reported absent).
Prints tables and ratios; `--json` writes every number; `--predictions F.npz` writes, per test scan (full scans,
in test order), its case name and fold, the reference boxes and every method's boxes and presence, plus the forest's
walls as voted before they move to voxel faces, so per-case analyses need no retraining (no pickle: names are a
unicode array; a box counts only where its presence flag is set; NaN reference rows for organs not contoured, NaN
multi-atlas rows for the scans it did not run).

The tables add a second mean without the walls `--contour-stop-walls` names (by default the spinal cord's and the
esophagus's lower walls, which in this data are where a clinician stopped contouring: see
`benchmarks/localize/contour_ends.py`); the main figure keeps every wall. `--rescore F.npz` prints the wall tables
of a saved `--predictions` file again (no training; presence on slabs is not in the file).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks._measure import measure
from benchmarks.localize.baselines import BodyRelativeMeanBox, ExtraTreesVoting, MultiAtlasAffine
from imageforest.apps.localize.evaluate import CONTOUR_STOP_WALLS, WALL_NAMES, OrganScores, parse_walls
from imageforest.apps.localize.model import OrganLocalizer, boxes_in_view
from imageforest.apps.localize.recipe import PARAMETERS
from imageforest.apps.localize.training import case_truth
from imageforest.exceptions import InvalidInputError
from imageforest.imaging.ct import crop_z, read_scan
from imageforest.imaging.ct_organs import OrganSlices, openkbp_cases

METHODS = ("forest", "body_mean_box", "multi_atlas", "extra_trees")


def slabs(scan):
    nz = scan.array.shape[0]
    return [crop_z(scan, nz * 2 // 5, nz), crop_z(scan, 0, nz // 2)]


def fit_method(name: str, scans: list, truths: list, boxes: list, organs: list[str], params: dict, seed: int):
    """One method of `METHODS` fitted on a fold's training scans (truths: label maps or boxes; boxes: (n, 6))."""
    if name == "forest":
        return OrganLocalizer(organs, **params).fit(scans, truths)
    if name == "body_mean_box":
        return BodyRelativeMeanBox().fit(scans, boxes)
    if name == "multi_atlas":
        return MultiAtlasAffine(n_atlases=5).fit(scans, boxes)
    return ExtraTreesVoting(seed=seed).fit(scans, boxes)


def _predict(method, img) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Boxes (n_organs, 6) mm, presence (n_organs,) and the walls before the voxel-face step (the boxes for the
    baselines)."""
    if isinstance(method, OrganLocalizer):
        r = method.localize(img)
        return (np.array([o.box_mm for o in r.organs]), np.array([o.present for o in r.organs]),
                np.array([o.voted_box_mm for o in r.organs]))
    boxes, present = method.predict(img)
    return boxes, present, boxes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cases_dir", type=Path, nargs="?")
    ap.add_argument("--folds", type=int, default=4)
    ap.add_argument("--max-cases", type=int, default=None, help="use only the first N cases (quick runs)")
    ap.add_argument("--atlas-cases", type=int, default=12, help="test cases per fold for the atlas baseline")
    ap.add_argument("--trees", type=int, default=None)
    ap.add_argument("--depth", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--predictions", type=Path, default=None, help="per-scan boxes of every method (.npz)")
    ap.add_argument("--methods", default=",".join(METHODS), help="comma-separated subset of " + ", ".join(METHODS))
    ap.add_argument("--contour-stop-walls", default=CONTOUR_STOP_WALLS,
                    help="walls (Organ:wall, wall one of " + ", ".join(WALL_NAMES) + ") left out of the second mean")
    ap.add_argument("--rescore", type=Path, default=None, help="print the wall tables of a --predictions file")
    args = ap.parse_args()
    try:
        parse_walls(args.contour_stop_walls, [])
    except InvalidInputError as exc:
        ap.error(f"--contour-stop-walls: {exc}")
    if args.rescore is not None:
        rescore(args.rescore, args.contour_stop_walls)
        return
    if args.cases_dir is None:
        ap.error("give CASES_DIR (or --rescore F.npz)")
    methods = tuple(m for m in METHODS if m in args.methods.split(","))
    unknown = set(args.methods.split(",")) - set(METHODS)
    if unknown or not methods:
        ap.error(f"--methods: unknown {sorted(unknown)}; choose from {', '.join(METHODS)}")

    cases, organs = openkbp_cases(args.cases_dir)
    rng = np.random.default_rng(args.seed)
    cases = [cases[i] for i in rng.permutation(len(cases))][: args.max_cases]
    folds = np.array_split(np.arange(len(cases)), args.folds)
    print(f"{len(cases)} cases, {args.folds} folds, organs: {', '.join(organs)}", flush=True)
    # The default model's parameters, so that the cross-validated numbers describe the shipped model.
    params = {**PARAMETERS, "random_state": args.seed}
    params.update({k: v for k, v in (("n_trees", args.trees), ("max_depth", args.depth)) if v is not None})

    full = {m: OrganScores(organs) for m in methods}
    cut = {m: OrganScores(organs) for m in methods}
    memory = {m: 0.0 for m in methods}
    fit_s = {m: 0.0 for m in methods}
    n_org = len(organs)
    per_scan: dict[str, list] = {"case": [], "fold": [], "truth_mm": [], "forest_voted_mm": [],
                                 **{f"{m}_mm": [] for m in methods}, **{f"{m}_present": [] for m in methods}}
    for f, test_idx in enumerate(folds):
        train_idx = np.setdiff1d(np.arange(len(cases)), test_idx)
        scans = [read_scan(cases[i].scan) for i in train_idx]
        truths = [case_truth(cases[i], len(organs)) for i in train_idx]
        boxes = [t.boxes() if isinstance(t, OrganSlices) else t for t in truths]
        fitted = {}
        for name in methods:
            t0 = time.perf_counter()
            fitted[name] = fit_method(name, scans, truths, boxes, organs, params, args.seed)
            fit_s[name] += time.perf_counter() - t0
        del scans
        for j, i in enumerate(test_idx):
            scan = read_scan(cases[i].scan)
            truth = case_truth(cases[i], len(organs))
            t_full = boxes_in_view(truth, scan, len(organs))
            known = ~np.isnan(t_full[:, 0])
            per_scan["case"].append(cases[i].name)
            per_scan["fold"].append(f)
            per_scan["truth_mm"].append(t_full)
            for name, method in fitted.items():
                if name == "multi_atlas" and j >= args.atlas_cases:
                    per_scan[f"{name}_mm"].append(np.full((n_org, 6), np.nan))
                    per_scan[f"{name}_present"].append(np.zeros(n_org, bool))
                    continue
                for k, img in enumerate([scan, *slabs(scan)]):
                    if name == "multi_atlas" and k > 0:
                        break  # registration of slabs is not what atlases are for; full scans only
                    t_img = t_full if k == 0 else boxes_in_view(truth, img, len(organs))
                    (pred, present, voted), dt, peak = measure(lambda m=method, im=img: _predict(m, im))
                    if k == 0:
                        per_scan[f"{name}_mm"].append(pred)
                        per_scan[f"{name}_present"].append(present)
                        if name == "forest":
                            per_scan["forest_voted_mm"].append(voted)
                    memory[name] = max(memory[name], peak / 2**20)
                    (full if k == 0 else cut)[name].add(pred, present, t_img, known, dt if k == 0 else None)
        print(f"fold {f + 1}/{args.folds}: " + ", ".join(f"{m} {full[m].mean_wall_error():.2f} mm" for m in methods)
              + " so far", flush=True)

    leave_out = parse_walls(args.contour_stop_walls, organs)
    print_wall_table(full, methods, organs, leave_out, args.contour_stop_walls)
    print("\npresence accuracy: full scans (contoured organs found) | slabs (organs out of view called absent)")
    for m in methods:
        print(f"  {m:<14} {full[m].presence_accuracy():.3f} | {cut[m].presence_accuracy():.3f}")
    print("\nseconds per scan (median), peak memory of one localization (MiB), fit seconds over all folds")
    for m in methods:
        print(f"  {m:<14} {np.median(full[m].seconds):7.3f} s  {memory[m]:8.0f} MiB  fit {fit_s[m]:7.1f} s")
    if "forest" in methods and len(methods) > 1:
        fw, ft = full["forest"].mean_wall_error(), np.median(full["forest"].seconds)
        print("\nratios (forest / peer), wall error and seconds per scan: " + "; ".join(
            f"{m} {fw / full[m].mean_wall_error():.2f}, {ft / np.median(full[m].seconds):.3f}"
            for m in methods if m != "forest"))
    if args.json:
        doc = {m: {"organs": full[m].rows(), "mean_wall_mm": full[m].mean_wall_error(),
                   "mean_wall_mm_without_contour_stops": full[m].mean_wall_error(leave_out),
                   "presence_full": full[m].presence_accuracy(), "presence_slabs": cut[m].presence_accuracy(),
                   "seconds_median": float(np.median(full[m].seconds)), "peak_mib": memory[m]} for m in methods}
        doc["protocol"] = (f"benchmarks/localize/cross_validate.py: {len(cases)} cases, {args.folds}-fold "
                           f"cross-validation, seed {args.seed}; multi-atlas on {args.atlas_cases} test cases per fold")
        doc["contour_stop_walls"] = args.contour_stop_walls
        args.json.write_text(json.dumps(doc, indent=2))
    if args.predictions:
        arrays = {k: np.array(v, dtype=np.str_ if k == "case" else None) for k, v in per_scan.items()}
        np.savez_compressed(args.predictions, organs=np.array(organs, dtype=np.str_), **arrays)


def print_wall_table(full: dict[str, OrganScores], methods, organs: list[str], leave_out: dict[int, list[int]],
                     spec: str) -> None:
    """Per organ and method: mean wall error (centroid error, scans scored); the mean over organs with every wall
    and without the walls `leave_out` (named by `spec`)."""
    print("\nmean absolute wall error (mm) per organ, cross-validated on unseen cases (n = scans scored)")
    print(f"{'organ':<14}" + "".join(f"{m:>22}" for m in methods))
    for k, organ in enumerate(organs):
        cells = []
        for m in methods:
            row = full[m].rows()[k]
            cells.append(f"{row['wall_mm']:8.2f} (c {row['centroid_mm']:5.1f}, n {row['n']:3d})")
        print(f"{organ:<14}" + "".join(f"{c:>22}" for c in cells))
    print(f"{'all organs':<14}" + "".join(f"{full[m].mean_wall_error():22.2f}" for m in methods))
    if leave_out:
        print(f"{'  without':<14}" + "".join(f"{full[m].mean_wall_error(leave_out):22.2f}" for m in methods)
              + f"   (walls left out: {spec})")


def rescore(path: Path, spec: str) -> None:
    """The wall tables of a `--predictions` file, scored as the run that wrote it scored them."""
    with np.load(path, allow_pickle=False) as p:
        organs = [str(o) for o in p["organs"]]
        methods = [m for m in METHODS if f"{m}_mm" in p.files]
        truths = p["truth_mm"]
        full = {m: OrganScores(organs) for m in methods}
        for m in methods:
            for pred, present, truth in zip(p[f"{m}_mm"], p[f"{m}_present"], truths, strict=True):
                if m == "multi_atlas" and np.all(np.isnan(pred)):
                    continue  # a scan the atlases did not run on
                full[m].add(pred, present, truth)
    print(f"{path}: {len(truths)} test scans")
    print_wall_table(full, methods, organs, parse_walls(spec, organs), spec)


if __name__ == "__main__":
    main()
