"""Compile the engine's common numba kernels into the on-disk cache (run by `make install`).

A first fit in a new environment otherwise spends 8-13 s compiling (`benchmarks/engine/first_run.py`): the default
classification and regression forests, and the depth-first subtree kernels that fits on matrices of 512 KiB and
more take (one threshold or many, the same kernels: the count is a run-time value).

    python -m imageforest.warmup
"""

from __future__ import annotations

import time

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


if __name__ == "__main__":
    main()
