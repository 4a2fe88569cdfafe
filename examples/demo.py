"""`make demo`: the engine end to end on the monograph's toy problems, with pictures.

Trains a conic-learner classification forest on four noisy spirals and a probabilistic-linear regression forest on
data with a gap, prints accuracy, timings and what the model file holds, reloads the model to check it predicts
the same, and writes two PNGs. (The CT organ localizer will take over this command when it lands.)

    python examples/demo.py --out demo_out
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _plots import figure, save, show_posterior, show_regression

from imageforest import ClassificationForest, RegressionForest
from imageforest.toy_data import gap_regression, spirals


def main() -> None:
    parser = argparse.ArgumentParser(description="imageforest engine demo")
    parser.add_argument("--out", type=Path, default=Path("demo_out"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    X, y = spirals(150, 4, noise=0.04, seed=0)
    Xt, yt = spirals(150, 4, noise=0.04, seed=1)
    t0 = time.perf_counter()
    clf = ClassificationForest(n_trees=100, max_depth=12, weak_learner="conic", n_candidates=20, random_state=0)
    clf.fit(X, y)
    t_fit = time.perf_counter() - t0
    acc = clf.score(Xt, yt)
    model = args.out / "spirals_conic.npz"
    clf.save(model)
    same = np.array_equal(ClassificationForest.load(model).predict_proba(Xt), clf.predict_proba(Xt))
    print(f"4-class spirals, conic weak learner, T=100: held-out accuracy {acc:.3f}, fit {t_fit:.2f} s "
          f"(includes loading compiled kernels), {clf.forest_.n_nodes} nodes")
    print(f"model file {model} ({model.stat().st_size / 1024:.0f} KiB), reloaded predictions identical: {same}")

    fig, axes = figure(2, size=4)
    show_posterior(axes[0, 0], clf, X, y, f"p(c|v), conic, T=100 (acc {acc:.2f})")
    axes[0, 1].imshow(clf.predict_entropy(np.mgrid[1.5:-1.5:200j, -1.5:1.5:200j][::-1].reshape(2, -1).T)
                      .reshape(200, 200), extent=(-1.5, 1.5, -1.5, 1.5), cmap="gray")
    axes[0, 1].set_title("posterior entropy (bright = uncertain)", fontsize=9)
    save(fig, args.out / "classification_posterior.png")

    Xr, yr = gap_regression(100, gap=(0.4, 0.6), seed=0)
    reg = RegressionForest(n_trees=200, max_depth=3, leaf_model="linear", n_thresholds=8, random_state=0)
    reg.fit(Xr, yr)
    dist = reg.predict_distribution(np.array([[0.2], [0.5], [1.1]]))
    for x, m, s in zip([0.2, 0.5, 1.1], dist.mean()[:, 0], dist.std()[:, 0], strict=True):
        where = "on the data" if x == 0.2 else ("in the gap" if x == 0.5 else "extrapolating")
        print(f"regression p(y|x={x}) ({where}): mean {m:.3f}, std {s:.3f}")
    fig, axes = figure(1, size=5)
    show_regression(axes[0, 0], reg, Xr, yr, "p(y|x), probabilistic-linear leaves, T=200")
    save(fig, args.out / "regression_posterior.png")
    print(f"pictures: {args.out / 'classification_posterior.png'}, {args.out / 'regression_posterior.png'}")


if __name__ == "__main__":
    main()
