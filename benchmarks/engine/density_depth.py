"""Density forests that choose their own depth and variance floor, against the peers a user would try first, side by
side in one process.

    python benchmarks/engine/density_depth.py [--sets mixture5,spiral2,wine,blobs6] [--n 3000] [--draws K]

For every set (n training and n held-out points): held-out mean log-likelihood (higher is better) and fit and
scoring time of
- `DensityForest()` (the defaults: max_depth="auto", variance_floor="auto", leaf_support="auto", 100 trees),
- `DensityForest(leaf_support="cell")` (the same with every leaf's Gaussian kept in its cell, as before the support
  was chosen),
- `DensityForest(max_depth=4, variance_floor=1e-3, n_thresholds=16, leaf_support="cell")` (the defaults before
  the depth was chosen),
- the same forest at the default's chosen depth and floor (what the choice costs: fit time against it),
- scikit-learn's `KernelDensity`, Gaussian kernel, bandwidth by 5-fold cross-validation over 20 values,
- scikit-learn's `GaussianMixture`, full covariances, 1-12 components by BIC.
Then the fit time of fixed-depth forests (100 trees, depth 5) on 500 points in 2, 4 and 8 dimensions, and of the
default forest on the same points, with peak memory.

Sets: a 2-D mixture of five Gaussians of different shapes and weights; a two-armed spiral (2-D); Wine Quality's
11 physicochemical features, standardised (`../shared/data/ml-benchmarks/wine_quality.npz`, 6497 rows: a random
half to train, the other half held out, at most n each); a 6-D mixture of three non-Gaussian clusters (a bent
banana, a ring and a heavy-tailed blob, embedded by a random rotation).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from sklearn.mixture import GaussianMixture
from sklearn.model_selection import GridSearchCV
from sklearn.neighbors import KernelDensity

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks._measure import measure, mib
from imageforest import DensityForest
from imageforest.toy_data import spirals

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "ml-benchmarks" / "wine_quality.npz"


def mixture5(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    means = np.array([[-2.0, -1.5], [0.0, 2.0], [2.5, -0.5], [-0.5, 0.0], [1.5, 1.8]])
    covs = [np.array([[0.3, 0.2], [0.2, 0.3]]), np.diag([0.6, 0.05]), np.diag([0.1, 0.4]),
            np.array([[0.15, -0.1], [-0.1, 0.2]]), np.diag([0.02, 0.02])]
    weights = np.array([0.3, 0.2, 0.2, 0.2, 0.1])
    k = rng.choice(5, n, p=weights)
    return np.stack([rng.multivariate_normal(means[c], covs[c]) for c in k])


def spiral2(n: int, seed: int) -> np.ndarray:
    return spirals(n // 2, 2, noise=0.05, seed=seed)[0]


def blobs6(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    k = rng.integers(0, 3, n)
    t = rng.uniform(-1.5, 1.5, n)
    banana = np.c_[t, 0.8 * t**2 - 1.0, rng.normal(0, 0.1, (n, 4))]
    angle = rng.uniform(0, 2 * np.pi, n)
    ring = np.c_[3 + 1.2 * np.cos(angle), 1.2 * np.sin(angle), rng.normal(0, 0.1, (n, 4))]
    blob = np.c_[rng.standard_t(3, (n, 2)) * 0.4 + [-3, 2], rng.standard_t(3, (n, 4)) * 0.2]
    X = np.where(k[:, None] == 0, banana, np.where(k[:, None] == 1, ring, blob))
    rotation = np.linalg.qr(np.random.default_rng(7).normal(size=(6, 6)))[0]
    return X @ rotation


def wine(n: int) -> tuple[np.ndarray, np.ndarray] | None:
    if not DATA.is_file():
        return None
    X = np.load(DATA, allow_pickle=False)["X"].astype(np.float64)
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    idx = np.random.default_rng(0).permutation(len(X))
    half = len(X) // 2
    return X[idx[:half]][:n], X[idx[half:]][:n]


def sets(names: list[str], n: int, draws: int = 1):
    makers = {"mixture5": mixture5, "spiral2": spiral2, "blobs6": blobs6}
    for name in names:
        if name == "wine":
            got = wine(n)
            if got is None:
                print(f"wine: {DATA} is absent (the shared data); skipped")
                continue
            yield name, *got
        else:  # draw k: training points from seed 2k, held-out points from seed 2k + 1
            for k in range(draws):
                yield name if draws == 1 else f"{name}/{k}", makers[name](n, 2 * k), makers[name](n, 2 * k + 1)


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default="mixture5,spiral2,wine,blobs6")
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--draws", type=int, default=1, help="draws of each generated set (their spread is the noise)")
    args = ap.parse_args()
    DensityForest(4, max_depth=3, variance_floor=1e-3, random_state=0).fit(np.random.default_rng(0).normal(
        size=(200, 3)))  # compile outside the timings
    print("held-out mean log-likelihood (higher is better); fit / score seconds")
    print(f"{'data':9s} {'d':>3s} {'forest auto':>12s} {'(D, floor, support)':>25s} {'cells':>8s} {'D=4':>8s} "
          f"{'KDE-CV':>9s} {'GMM-BIC':>9s}  {'fit: auto':>9s} {'cells':>6s} {'D=4':>6s} {'KDE':>6s} {'GMM':>6s}  "
          f"{'score: auto':>11s} {'KDE':>6s}")
    for name, X, Xt in sets(args.sets.split(","), args.n, args.draws):
        auto, t_auto = timed(lambda X=X: DensityForest(random_state=0).fit(X))
        cells, t_cells = timed(lambda X=X: DensityForest(leaf_support="cell", random_state=0).fit(X))
        old, t_old = timed(lambda X=X: DensityForest(max_depth=4, variance_floor=1e-3, n_thresholds=16,
                                                     leaf_support="cell", random_state=0).fit(X))
        _, t_fixed = timed(lambda X=X, a=auto: DensityForest(max_depth=int(a.depths_[0]),
                                                             variance_floor=a.variance_floor_,
                                                             leaf_support=a.leaf_support_, random_state=0).fit(X))
        kde, t_kde = timed(lambda X=X: GridSearchCV(KernelDensity(), {"bandwidth": np.logspace(-2, 0.5, 20)},
                                                     cv=5).fit(X).best_estimator_)
        gmm, t_gmm = timed(lambda X=X: min((GaussianMixture(k, random_state=0).fit(X) for k in range(1, 13)),
                                           key=lambda g, X=X: g.bic(X)))
        ll_auto, s_auto = timed(lambda a=auto, Xt=Xt: a.score(Xt))
        ll_kde, s_kde = timed(lambda k=kde, Xt=Xt: k.score(Xt) / len(Xt))
        ll = {"auto": ll_auto, "cells": cells.score(Xt), "old": old.score(Xt), "KDE": ll_kde, "GMM": gmm.score(Xt)}
        chosen = f"({auto.depths_[0]}, {auto.variance_floor_:g}, {auto.leaf_support_})"
        print(f"{name:9s} {X.shape[1]:3d} {ll['auto']:12.3f} {chosen:>25s} {ll['cells']:8.3f} {ll['old']:8.3f} "
              f"{ll['KDE']:9.3f} {ll['GMM']:9.3f}  {t_auto:9.2f} {t_cells:6.2f} {t_old:6.2f} {t_kde:6.2f} "
              f"{t_gmm:6.2f}  {s_auto:11.2f} {s_kde:6.2f}", flush=True)
        print(f"{'':9s} margin of the default over the better peer: {ll['auto'] - max(ll['KDE'], ll['GMM']):+.3f}; "
              f"fit {t_auto / t_fixed:.1f}x a forest fixed at the chosen settings ({t_fixed:.2f} s); selection "
              f"{({k: {kk: round(vv, 3) for kk, vv in v.items()} for k, v in auto.selection_.items()})}", flush=True)
    print("\nfit time on 500 points, 100 trees (seconds; peak MiB of the default's fit)")
    for d in (2, 4, 8):
        X = np.random.default_rng(d).normal(size=(500, d)) @ np.random.default_rng(d + 1).normal(size=(d, d))
        _, t_fixed = timed(lambda X=X: DensityForest(100, max_depth=5, variance_floor=1e-3, random_state=0).fit(X))
        _, t_depth5 = timed(lambda X=X: DensityForest(100, max_depth=5, random_state=0).fit(X))
        auto, t_auto, peak = measure(lambda X=X: DensityForest(100, random_state=0).fit(X))
        print(f"  d={d}: max_depth=5 and floor 1e-3 {t_fixed:.2f} s; max_depth=5 (floor chosen) {t_depth5:.2f} s; "
              f"default {t_auto:.2f} s (D {auto.depths_[0]}), peak {mib(peak).strip()} MiB", flush=True)


if __name__ == "__main__":
    main()
