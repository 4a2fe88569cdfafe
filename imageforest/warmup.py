"""Compile the engine's common numba kernels into the on-disk cache (run by `make install`).

A first fit in a new environment otherwise spends 8-13 s compiling (`benchmarks/engine/first_run.py`): the default
classification and regression forests, and the depth-first subtree kernels that fits on matrices of 512 KiB and
more take (one threshold or many, the same kernels: the count is a run-time value). `--wider` compiles the other
common settings instead: random-forest settings (bagging, every threshold; float32 and float64 points), sample
weights (on small and large matrices), oblique weak learners, several regression targets, linear leaves, product
posteriors and density forests; `--variants` the papers' variants (alternating, consistent, online and
semi-supervised forests). `--apps` runs the warm-up each installed application declares (`imageforest.App.warmup`),
or those named. `--all` runs every one of these in its own process, `--jobs` at a time (what `make install` runs).

    python -m imageforest.warmup [--wider | --variants | --apps [NAME ...] | --all [--jobs N]]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np


def main() -> None:
    from imageforest import ClassificationForest, RegressionForest

    t0 = time.perf_counter()
    rng = np.random.default_rng(0)
    for n in (500, 20_000):  # the second is large enough for subtrees (20,000 x 8 float32: 640 KB)
        X = rng.normal(size=(n, 8)).astype(np.float32)
        y = (X[:, 0] + X[:, 1] > 0).astype(int)
        ClassificationForest(2, random_state=0).fit(X, y).predict_proba(X)
        RegressionForest(2, random_state=0).fit(X, X[:, 0]).predict(X)
    print(f"engine kernels compiled and cached in {time.perf_counter() - t0:.1f} s")


def wider() -> None:
    from imageforest import ClassificationForest, DensityForest, RegressionForest

    t0 = time.perf_counter()
    rng = np.random.default_rng(0)
    X = rng.normal(size=(500, 4)).astype(np.float32)
    y = (X[:, 0] + X[:, 1] > 0).astype(int)
    w = rng.uniform(0.5, 2.0, 500)
    # random-forest settings: 500 points grow depth-first from the root, 20,000 level-wise above 8,192 points too
    big = rng.normal(size=(20_000, 4)).astype(np.float32)
    X64 = X.astype(np.float64)
    # every threshold reads the points as given, so float64 (most users' arrays) takes kernels of its own
    for data, labels in ((X, y), (X64, y), (big, (big[:, 0] > 0).astype(int))):
        ClassificationForest(2, n_thresholds=None, bootstrap=True, random_state=0).fit(data, labels).predict(data)
        RegressionForest(2, n_thresholds=None, bootstrap=True, criterion="squared_error",
                         random_state=0).fit(data, data[:, 0])
    ClassificationForest(2, random_state=0).fit(X, y, sample_weight=w).predict(X)
    # weights on a matrix large enough for depth-first subtrees (20,000 x 8 float32: 640 KB) take kernels of their
    # own: sample weights, class_weight and bagging with random thresholds (8 s of compiling in a first fit)
    wide = rng.normal(size=(20_000, 8)).astype(np.float32)
    wide_w = rng.uniform(0.5, 2.0, wide.shape[0])
    ClassificationForest(2, random_state=0).fit(wide, (wide[:, 0] > 0).astype(int), sample_weight=wide_w)
    RegressionForest(2, random_state=0).fit(wide, wide[:, 0], sample_weight=wide_w)
    ClassificationForest(2, weak_learner="oblique", random_state=0).fit(X, y).predict(X)
    RegressionForest(2, random_state=0).fit(X, X[:, :2]).predict(X)
    RegressionForest(2, max_depth=3, leaf_model="linear", random_state=0).fit(X64, X64[:, 0]).predict(X64)
    ClassificationForest(2, posterior="product", random_state=0).fit(X64, y).predict(X64)
    DensityForest(2, max_depth=3, random_state=0).fit(X[:, :2]).score_samples(X[:, :2])
    DensityForest(2, max_depth=3, variance_floor=1e-3, leaf_support="space", mixture_steps=1,
                  random_state=0).fit(X[:, :2]).score_samples(X[:, :2])  # the EM kernel, whatever "auto" chose
    print(f"wider engine kernels compiled and cached in {time.perf_counter() - t0:.1f} s")


def variants() -> None:
    from imageforest import ClassificationForest, RegressionForest, SemiSupervisedForest

    t0 = time.perf_counter()
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 4)).astype(np.float32)
    y = (X[:, 0] + X[:, 1] > 0).astype(int)
    ClassificationForest(2, growth="alternating", loss="tangent", random_state=0).fit(X, y).predict(X)
    for variant in ("denil", "biau08", "biau12"):
        RegressionForest(2, variant=variant, random_state=0).fit(X, X[:, 0]).predict(X)
    online = ClassificationForest(2, random_state=0)
    for a in (0, 200):  # the second call updates grown leaves, a read completes them
        online.partial_fit(X[a:a + 200], y[a:a + 200], classes=[0, 1])
    online.predict(X)
    RegressionForest(2, random_state=0).partial_fit(X, X[:, 0]).predict(X)
    partial = np.where(np.arange(400) < 20, y, -1)
    SemiSupervisedForest(n_trees=2, random_state=0).fit(X, partial).predict_proba(X)
    print(f"variant kernels compiled and cached in {time.perf_counter() - t0:.1f} s")


def everything(jobs: int) -> int:
    """Every warm-up (the engine's three, then each installed application's) in its own process, `jobs` at a time;
    the exit code is non-zero when any failed."""
    from imageforest.applications import installed_apps

    runs = [["--variants"], ["--wider"], *(["--apps", app.name] for app in installed_apps() if app.warmup)]
    runs.insert(0, [])  # the engine's common kernels first: the others reuse many of them

    def one(args: list[str]) -> int:
        return subprocess.run([sys.executable, "-m", "imageforest.warmup", *args], check=False).returncode

    with ThreadPoolExecutor(max(1, jobs)) as pool:
        codes = list(pool.map(one, runs))
    return max(codes)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m imageforest.warmup", description=__doc__.splitlines()[0])
    kind = parser.add_mutually_exclusive_group()
    kind.add_argument("--wider", action="store_true", help="the engine's other common settings")
    kind.add_argument("--variants", action="store_true", help="the papers' variants")
    kind.add_argument("--apps", nargs="*", metavar="NAME", help="the installed applications' warm-ups (or those named)")
    kind.add_argument("--all", action="store_true", help="every warm-up, each in its own process")
    parser.add_argument("--jobs", type=int, default=2, help="processes at a time with --all (default 2)")
    args = parser.parse_args()
    if args.all:
        sys.exit(everything(args.jobs))
    elif args.variants:
        variants()
    elif args.wider:
        wider()
    elif args.apps is not None:
        from imageforest.applications import run_warmups

        run_warmups(args.apps or None)
    else:
        main()
