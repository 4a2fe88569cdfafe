"""Draw the monograph's chapter 3-4 figures from this engine (seeds/000 Fig. 3.3-3.12, 4.6-4.9).

    python examples/gallery.py --out gallery

Writes one PNG per experiment: weak learners, forest size T, depth, randomness rho, ERT and ferns, the
max-margin ramp, and regression posteriors p(y|x). Depths are `max_depth` (edges from the root, as in
scikit-learn): the monograph's D counts levels, so its D = max_depth + 1.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _plots import figure, save, show_posterior, show_regression

from imageforest import ClassificationForest, RegressionForest
from imageforest.toy_data import (
    ambiguous_gap_regression,
    four_clusters,
    gap_regression,
    separable_clusters,
    spirals,
)


def weak_learners(out: Path) -> None:
    """Fig. 3.6: axis-aligned learners are over-confident far from the data; oblique and conic are not."""
    X, y = four_clusters(50, seed=2)
    fig, axes = figure(3)
    for ax, wl in zip(axes[0], ["axis", "oblique", "conic"], strict=True):
        f = ClassificationForest(n_trees=200, max_depth=3, weak_learner=wl, n_candidates=50, random_state=0)
        show_posterior(ax, f.fit(X, y), X, y, f"{wl}, T=200, max_depth=3, rho=50", lim=2.0)
    save(fig, out / "ch3_weak_learners.png")


def forest_size(out: Path) -> None:
    """Fig. 3.3 / 3.9: more trees give smoother posteriors; stumps ramp linearly across the gap."""
    X, y = separable_clusters(60, (-0.25, 0.25), seed=1)
    fig, axes = figure(3)
    for ax, T in zip(axes[0], [1, 8, 400], strict=True):
        f = ClassificationForest(n_trees=T, max_depth=1, n_candidates=50, n_thresholds=4, random_state=0)
        show_posterior(ax, f.fit(X, y), X, y, f"T={T}, stumps (max_depth=1), axis")
    save(fig, out / "ch3_forest_size_max_margin.png")


def depth(out: Path) -> None:
    """Fig. 3.5: depth controls under- and over-fitting."""
    X, y = spirals(60, 4, noise=0.08, seed=3)
    fig, axes = figure(3)
    for ax, D in zip(axes[0], [3, 6, 12], strict=True):
        f = ClassificationForest(n_trees=200, max_depth=D, weak_learner="conic", n_candidates=20, random_state=0)
        show_posterior(ax, f.fit(X, y), X, y, f"max_depth={D}, T=200, conic")
    save(fig, out / "ch3_depth.png")


def randomness(out: Path) -> None:
    """Fig. 3.7 / 8.1: rho trades confidence for randomness; ERT (rho=1) and ferns are the extremes."""
    X, y = spirals(60, 4, noise=0.04, seed=4)
    settings = [("rho=1000", dict(n_candidates=1000)), ("rho=10", dict(n_candidates=10)),
                ("ERT rho=1, K=1", dict(n_candidates=1, n_thresholds=1)),
                ("ferns, rho=10", dict(n_candidates=10, structure="fern"))]
    fig, axes = figure(4)
    for ax, (name, kw) in zip(axes[0], settings, strict=True):
        f = ClassificationForest(n_trees=200, max_depth=10, weak_learner="conic", random_state=0, **kw)
        show_posterior(ax, f.fit(X, y), X, y, f"{name}, T=200, max_depth=10")
    save(fig, out / "ch3_randomness_ert_ferns.png")


def regression(out: Path) -> None:
    """Fig. 4.6-4.9: p(y|x) of probabilistic-linear forests: smooth means, widening and bimodal gaps."""
    X, y = gap_regression(80, gap=(0.4, 0.6), seed=0)
    fig, axes = figure(3, 2, size=3.4)
    for ax, T in zip(axes[0], [1, 10, 400], strict=True):
        f = RegressionForest(n_trees=T, max_depth=2, leaf_model="linear", n_thresholds=8, random_state=0)
        show_regression(ax, f.fit(X, y), X, y, f"T={T}, max_depth=2, prob.-linear")
    Xa, ya = ambiguous_gap_regression(120, seed=1)
    for ax, (D, lm) in zip(axes[1], [(1, "linear"), (4, "linear"), (4, "gaussian")], strict=True):
        f = RegressionForest(n_trees=400, max_depth=D, leaf_model=lm, n_thresholds=8, random_state=0)
        show_regression(ax, f.fit(Xa, ya), Xa, ya, f"T=400, max_depth={D}, {lm} leaves")
    save(fig, out / "ch4_regression_posteriors.png")


def main() -> None:
    parser = argparse.ArgumentParser(description="Draw the chapter 3-4 figures from imageforest.")
    parser.add_argument("--out", type=Path, default=Path("gallery"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for fn in (weak_learners, forest_size, depth, randomness, regression):
        t0 = time.perf_counter()
        fn(args.out)
        print(f"{fn.__name__:14s} {time.perf_counter() - t0:6.1f} s")
    print(f"figures in {args.out}/: " + ", ".join(sorted(p.name for p in args.out.glob("*.png"))))


if __name__ == "__main__":
    main()
