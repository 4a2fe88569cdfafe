"""Where a forest fit's time goes, by phase, beside scikit-learn's fit at the same settings (one process).

    python benchmarks/engine/fit_phases.py [--n 100000] [--trees 50] [--config NAME ...]

Phases: node statistics (per level), the split search (fused row search, binned table or exhaustive sort),
candidates' responses (the generic path's gather), the partition, small nodes grown depth-first to their leaves
(search and partition included), and the rest (per-level Python, draws, the node and leaf tables), timed by
wrapping the trainer's kernels. Single configuration per line, 2 threads unless --threads.
Every fit runs in a process of its own, so that neither library reuses memory the other one had the machine map
(on a virtual machine, first-touched memory can cost more than the fit's arithmetic), and reports its peak memory.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import sys
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from sklearn.datasets import make_classification, make_friedman1
from sklearn.ensemble import ExtraTreesClassifier, ExtraTreesRegressor, RandomForestClassifier, RandomForestRegressor

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from imageforest import ClassificationForest, RegressionForest
from imageforest.forest import subtree_growth, trainer
from imageforest.forest.weak_learners import VectorFeatures

PHASES = {"segment_stats": "stats", "segment_class_counts": "stats", "segment_one_target_stats": "stats",
          "row_gain_table": "search", "binned_gain_table": "search", "exhaustive_best": "search",
          "exhaustive_best_sorted": "search", "lifted_gain_table": "search",
          "partition_by_row": "partition", "partition_segments": "partition", "grow_subtrees": "subtrees",
          "grow_sorted_subtrees": "subtrees", "grow_weighted_class_subtrees": "subtrees",
          "grow_weighted_one_target_subtrees": "subtrees"}


def instrument(totals: dict) -> None:
    def wrap(fn, phase):
        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                totals[phase] += time.perf_counter() - t0
        return timed

    for name, phase in PHASES.items():
        if hasattr(trainer, name):
            setattr(trainer, name, wrap(getattr(trainer, name), phase))
    VectorFeatures.responses = wrap(VectorFeatures.responses, "responses")


CONFIGS = ("ET 2 classes", "ET 3 classes", "ET 10 classes", "ET Letter", "RF Letter", "RF 2 classes", "ET regression",
           "ET regression gaussian", "RF regression", "ET Wine", "RF Wine", "ET 3 classes weighted",
           "ET 3 classes bagged", "ET regression weighted", "ET regression bagged")
# " weighted": sample weights of 2 on a third of the points (class 0; regression: x0 > 2/3), as class balancing
# gives; " bagged": bootstrap=True on both (ExtraTrees with bagging).
VARIANTS = (" weighted", " bagged")
ML_BENCHMARKS = Path(__file__).resolve().parents[3] / "shared" / "data" / "ml-benchmarks"


def config(name: str, n: int, trees: int, threads: int):
    """Data, the two estimators and the sample weights (or None) of configuration `name`: X, y, X_test, y_test,
    ours, scikit-learn's, weights."""
    for variant in VARIANTS:
        if name.endswith(variant):
            X, y, X_test, y_test, ours, theirs = _base_config(name[:-len(variant)], n, trees, threads)
            if variant == " bagged":
                ours.set_params(bootstrap=True)
                theirs.set_params(bootstrap=True)
                return X, y, X_test, y_test, ours, theirs, None
            heavy = X[:, 0] > 2 / 3 if "regression" in name else y == 0
            return X, y, X_test, y_test, ours, theirs, np.where(heavy, 2.0, 1.0)
    return (*_base_config(name, n, trees, threads), None)


def _base_config(name: str, n: int, trees: int, threads: int):
    """Data and the two estimators of configuration `name`: X, y, X_test, y_test, ours, scikit-learn's.

    Synthetic sets hold out a sixth of what is drawn for the test; Letter has its published split, Wine Quality
    (red and white, 6,497 x 11, the quality score as a regression target) a quarter held out.
    """
    clf = dict(n_trees=trees, n_candidates="sqrt", random_state=0, n_jobs=threads)
    skc = dict(n_estimators=trees, max_features="sqrt", random_state=0, n_jobs=threads)
    reg = dict(n_trees=trees, n_candidates=1.0, criterion="squared_error", leaf_model="constant", random_state=0,
               n_jobs=threads)
    skr = dict(n_estimators=trees, max_features=1.0, random_state=0, n_jobs=threads)
    if name.endswith("Letter"):
        d = np.load(ML_BENCHMARKS / "letter.npz")
        data = d["X_train"], d["y_train"], d["X_test"], d["y_test"]
        if name.startswith("ET"):
            return (*data, ClassificationForest(n_thresholds=1, **clf), ExtraTreesClassifier(**skc))
        return (*data, ClassificationForest(n_thresholds=None, bootstrap=True, **clf), RandomForestClassifier(**skc))
    if name.endswith("Wine"):
        d = np.load(ML_BENCHMARKS / "wine_quality.npz")
        shuffle = np.random.default_rng(0).permutation(len(d["y"]))  # the file lists red wines, then white
        X, y = d["X"][shuffle], d["y"][shuffle].astype(np.float64)
        cut = 3 * len(y) // 4
        data = X[:cut], y[:cut], X[cut:], y[cut:]
        if name.startswith("ET"):
            return (*data, RegressionForest(n_thresholds=1, **reg), ExtraTreesRegressor(**skr))
        return (*data, RegressionForest(n_thresholds=None, bootstrap=True, **reg), RandomForestRegressor(**skr))
    if "regression" in name:
        X, y = make_friedman1(2 * n + 2 * n // 5, n_features=10, noise=1.0, random_state=0)
        data = X[:2 * n], y[:2 * n], X[2 * n:], y[2 * n:]
        if name == "ET regression gaussian":
            return (*data, RegressionForest(n_thresholds=1, **{**reg, "criterion": "gaussian"}),
                    ExtraTreesRegressor(**skr))
        if name.startswith("ET"):
            return (*data, RegressionForest(n_thresholds=1, **reg), ExtraTreesRegressor(**skr))
        return (*data, RegressionForest(n_thresholds=None, bootstrap=True, **reg), RandomForestRegressor(**skr))
    n_classes = int(name.split()[1])
    X, y = make_classification(n + n // 5, 50, n_informative=20, n_redundant=10, n_classes=n_classes, random_state=0)
    data = X[:n], y[:n], X[n:], y[n:]
    if name.startswith("ET"):
        return (*data, ClassificationForest(n_thresholds=1, **clf), ExtraTreesClassifier(**skc))
    return (*data, ClassificationForest(n_thresholds=None, bootstrap=True, **clf), RandomForestClassifier(**skc))


def _rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def fit_once(name: str, library: str, n: int, trees: int, threads: int, criterion: str | None,
             generic_exhaustive: bool) -> dict:
    """One fit in this process (a fresh one): seconds, our phases, and the fit's peak memory above what the
    process held before it (MB, from the peak resident size)."""
    X, y, X_test, y_test, ours, theirs, weights = config(name, n, trees, threads)
    est = ours if library == "imageforest" else theirs
    if criterion and "classes" in name:
        est.set_params(criterion=criterion)
    if generic_exhaustive:
        trainer.sorted_search_applies = lambda *_: False
    totals: dict = defaultdict(float)
    instrument(totals)
    floor = subtree_growth.SUBTREE_MIN_BYTES
    subtree_growth.SUBTREE_MIN_BYTES = 0  # a small warm-up fit takes subtrees too: their kernels load here
    est.fit(X[:2000], y[:2000], sample_weight=None if weights is None else weights[:2000])  # compile outside timing
    subtree_growth.SUBTREE_MIN_BYTES = floor
    totals.clear()
    before = _rss_mb()
    t0 = time.perf_counter()
    est.fit(X, y, sample_weight=weights)
    fit = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - before
    pred = est.predict(X_test)
    regression = "regression" in name or "Wine" in name
    score = float(np.mean((pred - y_test) ** 2)) if regression else float(np.mean(pred == y_test))
    return dict(fit=fit, peak_mb=peak, data_mb=X.astype(np.float32).nbytes / 2**20, score=score,
                phases=[totals[p] for p in ("stats", "search", "responses", "partition", "subtrees")])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--trees", type=int, default=50)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--config", nargs="*", default=None, help=f"names to run (default: all of {CONFIGS})")
    ap.add_argument("--criterion", choices=("gini", "entropy"), default=None,
                    help="classification criterion of both forests (default: each library's own, entropy for "
                         "imageforest and Gini for scikit-learn)")
    ap.add_argument("--generic-exhaustive", action="store_true",
                    help="exhaustive thresholds by the generic scorer (the search before the sorted one)")
    args = ap.parse_args()
    print(f"n = {args.n} (regression 2n), T = {args.trees}, {args.threads} threads; seconds; every fit in a fresh "
          "process; peak: MB above the process's size before the fit; score: held-out accuracy, or MSE")
    print(f"{'configuration':<23} {'fit':>7} {'stats':>7} {'search':>7} {'resp':>7} {'part':>7} {'subtree':>7} "
          f"{'rest':>7} "
          f"{'sklearn':>8} {'ratio':>6} {'peak':>7} {'sk peak':>8} {'data':>6} {'score':>7} {'sk score':>8}")
    spawn = multiprocessing.get_context("spawn")
    for name in CONFIGS:
        if args.config and name not in args.config:
            continue
        runs = {}
        for library in ("imageforest", "sklearn"):
            # not a multiprocessing.Pool: its daemonic workers make joblib fall back to one job
            with ProcessPoolExecutor(1, mp_context=spawn) as pool:
                runs[library] = pool.submit(fit_once, name, library, args.n, args.trees, args.threads,
                                            args.criterion, args.generic_exhaustive).result()
        ours, peer = runs["imageforest"], runs["sklearn"]
        phases = ours["phases"]
        print(f"{name:<23} {ours['fit']:7.2f} " + " ".join(f"{p:7.2f}" for p in phases)
              + f" {ours['fit'] - sum(phases):7.2f} {peer['fit']:8.2f} {ours['fit'] / peer['fit']:6.2f}"
              + f" {ours['peak_mb']:7.0f} {peer['peak_mb']:8.0f} {ours['data_mb']:6.0f}"
              + f" {ours['score']:7.4f} {peer['score']:8.4f}", flush=True)


if __name__ == "__main__":
    main()
