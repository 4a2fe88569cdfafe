"""Where a forest fit's time goes, by phase, beside scikit-learn's fit at the same settings (one process).

    python benchmarks/engine/fit_phases.py [--n 100000] [--trees 50] [--config NAME ...]

Phases: node statistics (per level), the split search (fused row search, binned table or exhaustive sort),
candidates' responses (the generic path's gather), the partition, and the rest (per-level Python, draws, the
leaf tables), timed by wrapping the trainer's kernels. Single configuration per line, 2 threads unless --threads.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

from sklearn.datasets import make_classification, make_friedman1
from sklearn.ensemble import ExtraTreesClassifier, ExtraTreesRegressor, RandomForestClassifier, RandomForestRegressor

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from imageforest import ClassificationForest, RegressionForest
from imageforest.forest import trainer
from imageforest.forest.weak_learners import VectorFeatures

PHASES = {"segment_stats": "stats", "segment_class_counts": "stats", "segment_one_target_stats": "stats",
          "row_gain_table": "search", "binned_gain_table": "search", "exhaustive_best": "search",
          "exhaustive_best_sorted": "search", "lifted_gain_table": "search",
          "partition_by_row": "partition", "partition_segments": "partition"}


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


def configs(n: int, trees: int, threads: int):
    Xc, yc = make_classification(n, 50, n_informative=20, n_redundant=10, n_classes=2, random_state=0)
    Xm, ym = make_classification(n, 50, n_informative=20, n_redundant=10, n_classes=3, random_state=0)
    X10, y10 = make_classification(n, 50, n_informative=20, n_redundant=10, n_classes=10, random_state=0)
    Xr, yr = make_friedman1(2 * n, n_features=10, noise=1.0, random_state=0)
    clf = dict(n_trees=trees, n_candidates="sqrt", random_state=0, n_jobs=threads)
    skc = dict(n_estimators=trees, max_features="sqrt", random_state=0, n_jobs=threads)
    reg = dict(n_trees=trees, n_candidates=1.0, criterion="squared_error", leaf_model="constant", random_state=0,
               n_jobs=threads)
    skr = dict(n_estimators=trees, max_features=1.0, random_state=0, n_jobs=threads)
    yield "ET 2 classes", Xc, yc, ClassificationForest(n_thresholds=1, **clf), ExtraTreesClassifier(**skc)
    yield "ET 3 classes", Xm, ym, ClassificationForest(n_thresholds=1, **clf), ExtraTreesClassifier(**skc)
    yield "ET 10 classes", X10, y10, ClassificationForest(n_thresholds=1, **clf), ExtraTreesClassifier(**skc)
    yield "RF 2 classes", Xc, yc, ClassificationForest(n_thresholds=None, bootstrap=True, **clf), \
        RandomForestClassifier(**skc)
    yield "ET regression", Xr, yr, RegressionForest(n_thresholds=1, **reg), ExtraTreesRegressor(**skr)
    yield "RF regression", Xr, yr, RegressionForest(n_thresholds=None, bootstrap=True, **reg), \
        RandomForestRegressor(**skr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--trees", type=int, default=50)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--config", nargs="*", default=None, help="names to run (default: all)")
    ap.add_argument("--criterion", choices=("gini", "entropy"), default=None,
                    help="classification criterion of both forests (default: each library's own, entropy for "
                         "imageforest and Gini for scikit-learn)")
    ap.add_argument("--generic-exhaustive", action="store_true",
                    help="exhaustive thresholds by the generic scorer (the search before the sorted one)")
    args = ap.parse_args()
    if args.generic_exhaustive:
        trainer.sorted_search_applies = lambda *_: False
    totals: dict = defaultdict(float)
    instrument(totals)
    print(f"n = {args.n} (regression 2n), T = {args.trees}, {args.threads} threads; seconds")
    print(f"{'configuration':<15} {'fit':>7} {'stats':>7} {'search':>7} {'resp':>7} {'part':>7} {'rest':>7} "
          f"{'sklearn':>8} {'ratio':>6}")
    for name, X, y, ours, theirs in configs(args.n, args.trees, args.threads):
        if args.config and name not in args.config:
            continue
        if args.criterion and isinstance(ours, ClassificationForest):
            ours.set_params(criterion=args.criterion)
            theirs.set_params(criterion=args.criterion)
        ours.fit(X[:2000], y[:2000])  # compile outside the timing
        totals.clear()
        t0 = time.perf_counter()
        ours.fit(X, y)
        fit = time.perf_counter() - t0
        t0 = time.perf_counter()
        theirs.fit(X, y)
        peer = time.perf_counter() - t0
        phases = [totals[p] for p in ("stats", "search", "responses", "partition")]
        print(f"{name:<15} {fit:7.2f} " + " ".join(f"{p:7.2f}" for p in phases)
              + f" {fit - sum(phases):7.2f} {peer:8.2f} {fit / peer:6.2f}", flush=True)


if __name__ == "__main__":
    main()
