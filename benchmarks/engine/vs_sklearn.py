"""The forest engine against scikit-learn's RandomForest and ExtraTrees, side by side in one process.

Matched settings (same T, depth, candidate features per node, n_jobs=2):

- vs ExtraTrees: imageforest with rho = max_features, K = 1 random threshold per candidate, no bagging
  (Geurts' extremely randomized trees: the best of rho random (feature, threshold) pairs);
- vs RandomForest: imageforest with bagging and exhaustive thresholds (n_thresholds=None).

Prints fit / predict time ratios (imageforest / sklearn, < 1 means faster), accuracy or MSE deltas, peak memory
growth and model file size (imageforest .npz vs the pickle scikit-learn users save). Compilation is measured apart:
a fresh process with an empty numba cache (cold compile) and one with the cache filled (cold start).

    python benchmarks/engine/vs_sklearn.py [--quick] [--trees 100] [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
from functools import partial
from pathlib import Path

import numpy as np
from sklearn.datasets import load_breast_cancer, load_diabetes, load_digits, make_classification, make_friedman1
from sklearn.ensemble import (
    ExtraTreesClassifier,
    ExtraTreesRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from sklearn.model_selection import train_test_split

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks._measure import measure, mib
from imageforest import ClassificationForest, RegressionForest
from imageforest.forest import subtree_growth

N_JOBS = 2
# Letter and Wine Quality, when the shared data is beside the repository (medium sets: 20,000 x 16 with 26
# classes, 6,497 x 11)
ML_BENCHMARKS = Path(__file__).resolve().parents[3] / "shared" / "data" / "ml-benchmarks"


def datasets(quick: bool):
    big = 20_000 if quick else 200_000
    X, y = load_digits(return_X_y=True)
    yield "digits", "clf", X, y
    X, y = load_breast_cancer(return_X_y=True)
    yield "breast_cancer", "clf", X, y
    if (ML_BENCHMARKS / "letter.npz").exists():
        d = np.load(ML_BENCHMARKS / "letter.npz")
        yield "letter", "clf", np.concatenate([d["X_train"], d["X_test"]]), np.concatenate([d["y_train"], d["y_test"]])
    X, y = make_classification(big, 50, n_informative=20, n_redundant=10, n_classes=2, random_state=0)
    yield f"classification_{big // 1000}k_x50", "clf", X, y
    X, y = load_diabetes(return_X_y=True)
    yield "diabetes", "reg", X, y
    if (ML_BENCHMARKS / "wine_quality.npz").exists():
        d = np.load(ML_BENCHMARKS / "wine_quality.npz")
        yield "wine_quality", "reg", d["X"], d["y"].astype(np.float64)
    X, y = make_friedman1(big, n_features=10, noise=1.0, random_state=0)
    yield f"friedman_{big // 1000}k", "reg", X, y


def pairs(task: str, n_trees: int, max_depth):
    """(name, imageforest estimator, sklearn estimator) at matched settings."""
    if task == "clf":
        common = dict(n_trees=n_trees, max_depth=max_depth, n_candidates="sqrt", random_state=0, n_jobs=N_JOBS)
        sk = dict(n_estimators=n_trees, max_depth=max_depth, max_features="sqrt", random_state=0, n_jobs=N_JOBS)
        yield ("ExtraTrees", ClassificationForest(n_thresholds=1, **common), ExtraTreesClassifier(**sk))
        yield ("RandomForest", ClassificationForest(n_thresholds=None, bootstrap=True, **common),
               RandomForestClassifier(**sk))
    else:
        common = dict(n_trees=n_trees, max_depth=max_depth, n_candidates=1.0, criterion="squared_error",
                      leaf_model="constant", random_state=0, n_jobs=N_JOBS)
        sk = dict(n_estimators=n_trees, max_depth=max_depth, max_features=1.0, random_state=0, n_jobs=N_JOBS)
        yield ("ExtraTrees", RegressionForest(n_thresholds=1, **common), ExtraTreesRegressor(**sk))
        yield ("RandomForest", RegressionForest(n_thresholds=None, bootstrap=True, **common),
               RandomForestRegressor(**sk))


def clone(est):
    return type(est)(**est.get_params())


def warm_up(ours, X, y, X_test) -> None:
    """Load (or compile) the kernels this configuration's fit and predict will run, outside the timing: start-up
    is measured apart. Two trees on the same data take the same paths with the same dtypes; the depth-first
    subtrees' size floors are lifted for it, so that their kernels load even where two trees stay below them."""
    floors = subtree_growth.SUBTREE_MIN_BYTES, subtree_growth.SUBTREE_MIN_POSITIONS
    subtree_growth.SUBTREE_MIN_BYTES = subtree_growth.SUBTREE_MIN_POSITIONS = 0
    try:
        clone(ours).set_params(n_trees=2).fit(X, y).predict(X_test[:10])
    finally:
        subtree_growth.SUBTREE_MIN_BYTES, subtree_growth.SUBTREE_MIN_POSITIONS = floors


def score(task: str, est, X, y) -> float:
    pred = est.predict(X)
    return float(np.mean(pred == y)) if task == "clf" else float(np.mean((pred - y) ** 2))


def model_bytes(ours, theirs) -> tuple[int, int]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.npz"
        ours.save(path)
        mine = path.stat().st_size
    # Pickle only to measure what a scikit-learn user would store; nothing is written.
    return mine, len(pickle.dumps(theirs, protocol=pickle.HIGHEST_PROTOCOL))


STARTUP = """
import time
t0 = time.perf_counter()
import numpy as np
from imageforest import ClassificationForest, RegressionForest
rng = np.random.default_rng(0)
X = rng.normal(size=(300, 4)); y = (X[:, 0] > 0).astype(int)
ClassificationForest(n_trees=3).fit(X, y).predict_proba(X)
RegressionForest(n_trees=3).fit(X, X[:, 1]).predict(X)
print(time.perf_counter() - t0)
"""


def startup_seconds(empty_cache: bool) -> float:
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as tmp:
        if empty_cache:
            env["NUMBA_CACHE_DIR"] = tmp
        out = subprocess.run([sys.executable, "-c", STARTUP], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def repeated_splits(repeats: int, n_trees: int, max_depth) -> list[dict]:
    """Accuracy / MSE of the small sets over many random splits: on breast cancer's 143 test samples one split
    moves by 0.7 points per sample, more than the 0.5-point tolerance being checked."""
    if repeats <= 0:
        return []
    print(f"\nsmall sets, mean over {repeats} random 75/25 splits (seeds of both forests vary with the split):")
    print(f"{'data':24s} {'peer':12s} {'metric':>9s} {'peer':>9s} {'delta':>9s} {'+-se':>7s}")
    rows = []
    for name, task, X, y in datasets(quick=True):
        if X.shape[0] > 5000:
            continue
        for peer_name, ours, theirs in pairs(task, n_trees, max_depth):
            mine, peer = [], []
            for r in range(repeats):
                Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.25, random_state=r)
                Xtr32, Xte32 = Xtr.astype(np.float32), Xte.astype(np.float32)
                a = clone(ours).set_params(random_state=r).fit(Xtr32, ytr)
                b = type(theirs)(**{**theirs.get_params(), "random_state": r}).fit(Xtr32, ytr)
                mine.append(score(task, a, Xte32, yte))
                peer.append(score(task, b, Xte32, yte))
            scale = 100 if task == "clf" else 1
            diff = (np.array(mine) - np.array(peer)) * scale
            se = diff.std(ddof=1) / np.sqrt(repeats) if repeats > 1 else float("nan")  # one split: no spread
            se_text = f"{se:7.3f}" if repeats > 1 else f"{'-':>7s}"
            print(f"{name:24s} {peer_name:12s} {np.mean(mine):9.4f} {np.mean(peer):9.4f} {diff.mean():+9.3f} "
                  f"{se_text}", flush=True)
            rows.append(dict(data=name, peer=peer_name, repeats=repeats, score_mean=float(np.mean(mine)),
                             peer_score_mean=float(np.mean(peer)), delta_mean=float(diff.mean()),
                             delta_se=float(se)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="20k instead of 200k samples on the large sets")
    parser.add_argument("--trees", type=int, default=100)
    parser.add_argument("--max-depth", type=int, default=None)
    parser.add_argument("--json", type=Path, default=None, help="also write the rows to this JSON file")
    parser.add_argument("--skip-startup", action="store_true")
    parser.add_argument("--repeats", type=int, default=20,
                        help="random 75/25 splits for the accuracy of the small sets (one split is a few samples)")
    parser.add_argument("--only", default=None,
                        help="comma-separated data names (prefixes, e.g. 'classification') to run; default all")
    parser.add_argument("--peer", choices=("ExtraTrees", "RandomForest"), default=None,
                        help="run one peer configuration only")
    args = parser.parse_args()
    only = args.only.split(",") if args.only else None

    rows = []
    if not args.skip_startup:
        compile_s = startup_seconds(empty_cache=True)
        cached_s = startup_seconds(empty_cache=False)
        print(f"start-up (import + first tiny fit/predict, new process): compile {compile_s:.1f} s, "
              f"cached {cached_s:.2f} s")
        rows.append({"startup_compile_s": compile_s, "startup_cached_s": cached_s})

    head = (f"{'data':24s} {'peer':12s} {'fit s':>7s} {'peer':>7s} {'ratio':>6s} {'pred s':>7s} {'peer':>7s} "
            f"{'ratio':>6s} {'metric':>9s} {'peer':>9s} {'delta':>8s} {'memMiB':>7s} {'peer':>7s} "
            f"{'fileMiB':>7s} {'peer':>7s}")
    print(head)
    print("-" * len(head))
    for name, task, X, y in datasets(args.quick):
        if only and not any(name.startswith(o) for o in only):
            continue
        Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.25, random_state=0)
        Xtr32, Xte32 = Xtr.astype(np.float32), Xte.astype(np.float32)
        for peer_name, ours, theirs in pairs(task, args.trees, args.max_depth):
            if args.peer and peer_name != args.peer:
                continue
            warm_up(ours, Xtr32, ytr, Xte32)
            _, fit_o, mem_o = measure(partial(ours.fit, Xtr32, ytr))
            _, fit_s, mem_s = measure(partial(theirs.fit, Xtr32, ytr))
            _, pred_o, _ = measure(partial(ours.predict, Xte32))
            _, pred_s, _ = measure(partial(theirs.predict, Xte32))
            m_o, m_s = score(task, ours, Xte32, yte), score(task, theirs, Xte32, yte)
            size_o, size_s = model_bytes(ours, theirs)
            metric = "acc" if task == "clf" else "mse"
            delta = (m_o - m_s) * (100 if task == "clf" else 1)
            print(f"{name:24s} {peer_name:12s} {fit_o:7.2f} {fit_s:7.2f} {fit_o / fit_s:6.2f} {pred_o:7.3f} "
                  f"{pred_s:7.3f} {pred_o / pred_s:6.2f} {m_o:9.4f} {m_s:9.4f} "
                  f"{delta:+8.3f}{'pt' if task == 'clf' else ''} {mib(mem_o)} {mib(mem_s)} {mib(size_o)} "
                  f"{mib(size_s)}", flush=True)
            rows.append(dict(data=name, task=task, peer=peer_name, metric=metric, fit_s=fit_o, peer_fit_s=fit_s,
                             predict_s=pred_o, peer_predict_s=pred_s, score=m_o, peer_score=m_s,
                             peak_mem_bytes=mem_o, peer_peak_mem_bytes=mem_s, model_bytes=size_o,
                             peer_model_bytes=size_s, n_trees=args.trees, max_depth=args.max_depth))
    print("ratio = imageforest / scikit-learn (below 1: imageforest faster). delta: accuracy points or MSE.")
    rows += repeated_splits(args.repeats, args.trees, args.max_depth)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
