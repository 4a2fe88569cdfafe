"""Consistent regression forests against Breiman's and scikit-learn's: Fig. 2 and Fig. 3 of Denil, Matheson &
de Freitas, "Narrowing the Gap: Random Forests In Theory and In Practice" (ICML 2014), on Diabetes and Wine Quality.

    python benchmarks/variants/consistent.py [--sets diabetes,wine] [--runs 5] [--trees 100] [--png OUT.png]
        [--json OUT.json]

Settings as the paper's: one third of the features as candidate dimensions, leaves of at least 5 points (Breiman,
ours) or n/5 leaves (Biau08, Biau12), m = 1000 structure points bounding the search, leaf predictions are means.
Mean squared error of five-fold cross-validation, mean and standard deviation over `--runs` shuffles. Labels as the
paper's: +T / +F data split per tree / once per forest, +S no data split, +NB no bootstrap. scikit-learn's
RandomForestRegressor (same candidates and leaf size) runs on the same folds as the peer. The MSE against forest
size (Fig. 3) comes from the same forests, averaging their first t trees.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks._figures import pyplot, save_png
from benchmarks._measure import measure, mib, write_results
from imageforest import RegressionForest

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "ml-benchmarks"
ORDER = ("Breiman", "Ours", "Biau12", "Biau08")  # the paper's ordering, best first (Wine: Biau08 before Biau12)
METHODS = {  # label -> RegressionForest settings beyond the shared ones
    "Breiman": {"variant": "breiman", "bootstrap": True, "n_thresholds": None},
    "Breiman+NB": {"variant": "breiman", "bootstrap": False, "n_thresholds": None},
    "Ours": {"variant": "denil", "data_split": "tree"},
    "Ours+F": {"variant": "denil", "data_split": "forest"},
    "Ours+S": {"variant": "denil", "data_split": None},
    "Biau12": {"variant": "biau12", "data_split": "forest"},
    "Biau12+T": {"variant": "biau12", "data_split": "tree"},
    "Biau12+S": {"variant": "biau12", "data_split": None},
    "Biau08": {"variant": "biau08", "data_split": None},
}


def load(name: str) -> tuple[np.ndarray, np.ndarray]:
    if name == "diabetes":
        from sklearn.datasets import load_diabetes

        X, y = load_diabetes(return_X_y=True)
        return X.astype(np.float32), y.astype(np.float64)
    d = np.load(DATA / "wine_quality.npz")
    return d["X"].astype(np.float32), d["y"].astype(np.float64)


def per_tree_predictions(model: RegressionForest, X: np.ndarray) -> np.ndarray:
    """(n_samples, T) prediction of each tree (leaf means)."""
    return model.leaf_mean_[model.apply(X), 0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default="diabetes,wine")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--trees", type=int, default=100)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--no-sklearn", action="store_true")
    ap.add_argument("--png", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.model_selection import KFold

    shared = {"n_trees": args.trees, "n_candidates": 1 / 3, "min_samples_leaf": 5, "criterion": "squared_error",
              "leaf_model": "constant", "n_jobs": 2}
    labels = args.methods.split(",")
    results = {}
    for name in args.sets.split(","):
        X, y = load(name)
        for m in labels:  # compile first: the timed fits are warm
            RegressionForest(**{**shared, "n_trees": 2}, **METHODS[m], random_state=0).fit(X[:200], y[:200])
        mse = {m: np.zeros(args.runs) for m in labels}
        curve = {m: np.zeros((args.runs, args.trees)) for m in labels}
        fit_s = {m: [] for m in labels}
        peak = {m: 0 for m in labels}
        if not args.no_sklearn:
            mse["sklearn RF"] = np.zeros(args.runs)
            fit_s["sklearn RF"] = []
            peak["sklearn RF"] = 0
        for run in range(args.runs):
            folds = list(KFold(args.folds, shuffle=True, random_state=run).split(X))
            for fold, (tr, te) in enumerate(folds):
                seed = run * args.folds + fold
                X_tr, y_tr = X[tr], y[tr]
                for m in labels:
                    model = RegressionForest(**shared, **METHODS[m], random_state=seed)
                    _, sec, mem = measure(lambda mo=model, a=X_tr, b=y_tr: mo.fit(a, b))
                    fit_s[m].append(sec)
                    peak[m] = max(peak[m], mem)
                    trees = per_tree_predictions(model, X[te])
                    running = np.cumsum(trees, axis=1) / np.arange(1, args.trees + 1)
                    err = ((running - y[te, None]) ** 2).mean(axis=0)
                    curve[m][run] += err * te.size / X.shape[0]
                    mse[m][run] += err[-1] * te.size / X.shape[0]
                if not args.no_sklearn:
                    peer = RandomForestRegressor(args.trees, max_features=1 / 3, min_samples_leaf=5, n_jobs=2,
                                                 random_state=seed)
                    _, sec, mem = measure(lambda p=peer, a=X_tr, b=y_tr: p.fit(a, b))
                    fit_s["sklearn RF"].append(sec)
                    peak["sklearn RF"] = max(peak["sklearn RF"], mem)
                    mse["sklearn RF"][run] += float(np.mean((peer.predict(X[te]) - y[te]) ** 2)) * te.size / len(X)
        ref = float(np.mean(fit_s["sklearn RF"])) if not args.no_sklearn else None
        print(f"\n{name}: {X.shape[0]} x {X.shape[1]}, T = {args.trees}, {args.runs} runs of {args.folds}-fold CV")
        print(f"{'method':<12} {'MSE':>18} {'fit s':>8} {'x sklearn':>10} {'peak MiB':>9}")
        results[name] = {}
        for m in mse:
            s = float(np.mean(fit_s[m]))
            ratio = f"{s / ref:10.2f}" if ref else " " * 10
            print(f"{m:<12} {mse[m].mean():9.4f} +- {mse[m].std():6.4f} {s:8.3f} {ratio} {mib(peak[m])}")
            results[name][m] = {"mse_mean": float(mse[m].mean()), "mse_std": float(mse[m].std()), "fit_s": s,
                                "peak_mib": peak[m] / 2**20,
                                "curve": curve[m].mean(axis=0).tolist() if m in curve else None,
                                "curve_std": curve[m].std(axis=0).tolist() if m in curve else None}
        if all(m in mse for m in ORDER):
            means = [mse[m].mean() for m in ORDER]
            print("ordering Breiman < Ours < Biau12 < Biau08:",
                  " < ".join(f"{m} {v:.4g}" for m, v in sorted(zip(ORDER, means, strict=True), key=lambda p: p[1])))
    if args.png:
        figure(results, args.png)
    if args.json:
        write_results(args.json, args, results)


def figure(results: dict, path: Path) -> None:
    """Fig. 2 (MSE per method, one panel per data set) and Fig. 3 (MSE against forest size, last data set)."""
    plt = pyplot()
    names = list(results)
    fig, axes = plt.subplots(1, len(names) + 1, figsize=(5.2 * (len(names) + 1), 4.2))
    colours = {"Breiman": "#1b7837", "Ours": "#2166ac", "Biau12": "#b2182b", "Biau08": "#8c510a",
               "sklearn": "#777777"}

    def colour(m: str) -> str:
        return next((c for k, c in colours.items() if m.startswith(k)), "#444444")

    for ax, name in zip(axes, names, strict=False):
        methods = list(results[name])
        mean = [results[name][m]["mse_mean"] for m in methods]
        std = [results[name][m]["mse_std"] for m in methods]
        ax.bar(range(len(methods)), mean, yerr=std, color=[colour(m) for m in methods], capsize=3)
        ax.set_xticks(range(len(methods)), methods, rotation=60, ha="right", fontsize=8)
        low = min(mean) * 0.9
        ax.set_ylim(low, max(mean) + max(std) + (max(mean) - low) * 0.1)
        ax.set_title(f"{name}: MSE (5-fold CV)")
    ax = axes[-1]
    last = names[-1]
    for m in ("Breiman", "Breiman+NB", "Ours", "Ours+S", "Biau12", "Biau08"):
        entry = results[last].get(m)
        if not entry or entry["curve"] is None:
            continue
        c, s = np.array(entry["curve"]), np.array(entry["curve_std"])
        t = np.arange(1, c.size + 1)
        style = "--" if "+" in m else "-"
        ax.plot(t, c, style, color=colour(m), label=m)
        ax.fill_between(t, c - s, c + s, color=colour(m), alpha=0.15)
    ax.set_xscale("log")
    ax.set_xlabel("number of trees")
    ax.set_ylabel("MSE")
    ax.set_title(f"{last}: MSE against forest size")
    ax.legend(fontsize=8)
    save_png(fig, path)


if __name__ == "__main__":
    main()
