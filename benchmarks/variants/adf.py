"""Alternating decision forests against independently grown forests, scikit-learn's RandomForest and ExtraTrees:
Table 2 of Schulter et al., "Alternating decision forests" (CVPR 2013), on the data sets we have.

    python benchmarks/variants/adf.py [--sets letter,usps,g50c,digits,mnist] [--losses tangent,...] [--runs 3]
        [--trees 100] [--json OUT]

Settings as the paper's: T = 100, sqrt(M) candidate features per node, 10 random thresholds, at least 5 points to
split, depth 10, 15 or 25 by the size of the training set (G50c 10, digits and USPS 15, Letter and MNIST 25). Test
error in percent, mean and standard deviation over `--runs` seeds (G50c: its 10 published splits of 50 labelled
training points, `--seeds-per-split` forests each, averaged per split). Every method sees the same training points
in the same process; fit seconds are means over runs. The paper's figures are printed beside ours.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks._measure import write_results
from imageforest import ClassificationForest

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "ml-benchmarks"
DEPTH = {"g50c": 10, "digits": 15, "usps": 15, "letter": 25, "mnist": 25}
PAPER = {  # Table 2: ADF per loss and random forests, test error %
    "g50c": {"logit": 19.83, "hinge": 19.47, "exponential": 19.09, "savage": 19.00, "tangent": 18.71, "rf": 18.91},
    "letter": {"logit": 6.81, "hinge": 4.89, "exponential": 4.27, "savage": 3.94, "tangent": 3.52, "rf": 4.75},
    "usps": {"logit": 6.31, "hinge": 5.87, "exponential": 6.03, "savage": 5.76, "tangent": 5.59, "rf": 5.96},
    "mnist": {"logit": 3.82, "hinge": 3.20, "exponential": 2.96, "savage": 2.78, "tangent": 2.71, "rf": 3.21},
}


def splits(name: str, runs: int):
    """(X_train, y_train, X_test, y_test) per run."""
    if name == "digits":
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split

        X, y = load_digits(return_X_y=True)
        for r in range(runs):
            X_tr, X_te, y_tr, y_te = train_test_split(X.astype(np.float32), y, test_size=0.5, random_state=r,
                                                      stratify=y)
            yield X_tr, y_tr, X_te, y_te
        return
    d = np.load(DATA / f"{name}.npz")
    if name == "g50c":
        for lab, unl in zip(d["split_labeled_idx"], d["split_unlabeled_idx"], strict=True):
            yield d["X"][lab], d["y"][lab], d["X"][unl], d["y"][unl]
        return
    X_train, X_test = d["X_train"].astype(np.float32), d["X_test"].astype(np.float32)
    for _ in range(runs):
        yield X_train, d["y_train"], X_test, d["y_test"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default="g50c,digits,usps,letter")
    ap.add_argument("--losses", default="logit,hinge,exponential,savage,tangent")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seeds-per-split", type=int, default=1,
                    help="forests per split (G50c), averaged: the split-to-split spread stays, the seed's goes")
    ap.add_argument("--trees", type=int, default=100)
    ap.add_argument("--no-sklearn", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    from sklearn.ensemble import ExtraTreesClassifier, RandomForestClassifier

    results = {}
    for name in args.sets.split(","):
        depth = DEPTH[name]
        common = {"n_trees": args.trees, "max_depth": depth, "n_candidates": "sqrt", "n_thresholds": 10,
                  "min_samples_split": 5}
        methods = {"ours independent": lambda seed, c=common: ClassificationForest(**c, random_state=seed)}
        for loss in args.losses.split(","):
            methods[f"ours ADF {loss}"] = (lambda seed, c=common, lo=loss: ClassificationForest(
                **c, growth="alternating", loss=lo, random_state=seed))
        if not args.no_sklearn:
            sk = {"n_estimators": args.trees, "max_depth": depth, "min_samples_split": 5, "n_jobs": 2}
            methods["sklearn RandomForest"] = lambda seed, s=sk: RandomForestClassifier(**s, random_state=seed)
            methods["sklearn ExtraTrees"] = lambda seed, s=sk: ExtraTreesClassifier(**s, random_state=seed)
        errors = {m: [] for m in methods}
        seconds = {m: [] for m in methods}
        per_split = args.seeds_per_split if name == "g50c" else 1
        for run, (X, y, Xt, yt) in enumerate(splits(name, args.runs)):
            for m, make in methods.items():
                errs = []
                for k in range(per_split):
                    model = make(run * per_split + k)
                    t0 = time.perf_counter()
                    model.fit(X, y)
                    seconds[m].append(time.perf_counter() - t0)
                    errs.append(100.0 * float(np.mean(model.predict(Xt) != yt)))
                errors[m].append(float(np.mean(errs)))
        print(f"\n{name} (depth {depth}, {len(errors['ours independent'])} runs)")
        print(f"{'method':<26} {'error %':>14} {'paper':>7} {'fit s':>8} {'x indep.':>9}")
        base = float(np.mean(seconds["ours independent"]))
        results[name] = {}
        for m in methods:
            key = m.split()[-1] if m.startswith("ours ADF") else ("rf" if m == "ours independent" else None)
            paper = PAPER.get(name, {}).get(key) if key else None
            e, s = np.array(errors[m]), float(np.mean(seconds[m]))
            results[name][m] = {"error_mean": float(e.mean()), "error_std": float(e.std()), "fit_s": s,
                                "paper": paper}
            paper_txt = f"{paper:7.2f}" if paper is not None else " " * 7
            print(f"{m:<26} {e.mean():7.2f} +- {e.std():4.2f} {paper_txt} {s:8.2f} {s / base:9.2f}")
    if args.json:
        write_results(args.json, args, results)


if __name__ == "__main__":
    main()
