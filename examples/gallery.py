"""Draw the monograph's chapter 3-7 figures from this engine (Criminisi et al. 2012, Fig. 3.3-3.12, 4.6-4.9, ch. 5-7).

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

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _plots import figure, save, show_posterior, show_regression

from imageforest import ClassificationForest, DensityForest, ManifoldForest, RegressionForest, SemiSupervisedForest
from imageforest.toy_data import (
    ambiguous_gap_regression,
    four_clusters,
    gap_regression,
    s_shape,
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


def _density_image(ax, forest, X, title, lim=2.0):
    g = np.linspace(-lim, lim, 200)
    xx, yy = np.meshgrid(g, g[::-1])
    p = np.exp(forest.score_samples(np.c_[xx.ravel(), yy.ravel()])).reshape(200, 200)
    ax.imshow(p, extent=(-lim, lim, -lim, lim), cmap="magma")
    ax.scatter(X[:, 0], X[:, 1], s=1, c="c", alpha=0.4)
    ax.set_title(title, fontsize=9)
    ax.set_xticks([])
    ax.set_yticks([])


def density(out: Path) -> None:
    """Fig. 5.4-5.6, 5.10, 5.14: densities for varying T and depth, samples, and conditionals of the S."""
    X = spirals(200, 4, noise=0.05, seed=0)[0]
    fig, axes = figure(4, 2, size=3.0)
    for ax, (T, D) in zip(axes[0], [(1, 5), (100, 3), (100, 5), (100, 8)], strict=True):
        _density_image(ax, DensityForest(n_trees=T, max_depth=D, random_state=0).fit(X), X,
                       f"p(v): T={T}, max_depth={D}", lim=1.4)
    f = DensityForest(n_trees=100, max_depth=5, random_state=0).fit(X)
    S = f.sample(3000, random_state=0)
    axes[1, 0].scatter(S[:, 0], S[:, 1], s=1, c="r")
    axes[1, 0].set_title("3000 samples (Alg. 5.1)", fontsize=9)
    axes[1, 0].set_xlim(-1.4, 1.4)
    axes[1, 0].set_ylim(-1.4, 1.4)
    Xs = s_shape(3000, seed=0)
    fs = DensityForest(n_trees=100, max_depth=6, random_state=0).fit(Xs)
    _density_image(axes[1, 1], fs, Xs, 'the "S", T=100, max_depth=6', lim=1.3)
    grid = np.linspace(-1.3, 1.3, 400)
    for ax, x0 in zip(axes[1, 2:], (0.0, 0.45), strict=True):
        pdf = fs.conditional_pdf([[x0]], grid, y_dim=1)[0]
        smp = fs.sample_conditional([[x0]], 5000, y_dim=1, random_state=0)[0]
        ax.hist(smp, bins=80, density=True, color="0.8", label="samples (Alg. 5.3)")
        ax.plot(grid, pdf, "k", lw=1.2, label="p(y|x)")
        ax.set_title(f"p(y | x = {x0}) of the S", fontsize=9)
        ax.legend(fontsize=7)
    save(fig, out / "ch5_density.png")


def leaf_support(out: Path) -> None:
    """Leaves in their cells (eq. 5.3), over the whole space (each tree a mixture of its leaves), and that mixture
    refitted by EM steps: one tree each way, the same tree, and the density along one line (one tree and 100)."""
    X = spirals(200, 4, noise=0.05, seed=0)[0]
    fig, axes = figure(4, size=3.0)
    line = np.linspace(-1.4, 1.4, 1000)
    kinds = (("cell", 0), ("space", 0), ("space", 4))
    for ax, (support, steps) in zip(axes[0, :3], kinds, strict=True):
        for T in (1, 100):
            f = DensityForest(n_trees=T, max_depth=6, variance_floor=1e-3, leaf_support=support,
                              mixture_steps=steps, random_state=0).fit(X)
            p = np.exp(f.score_samples(np.c_[line, np.full_like(line, 0.3)]))
            axes[0, 3].plot(line, p, lw=0.8 if T == 1 else 1.6, label=f"{support}, {steps} EM steps, T={T}")
            if T == 1:
                _density_image(ax, f, X, f'"{support}", {steps} EM steps, one tree', lim=1.4)
                ax.axhline(0.3, color="w", lw=0.5, ls=":")
    axes[0, 3].set_title("p(v) along the dotted line, max_depth=6", fontsize=9)
    axes[0, 3].legend(fontsize=6)
    save(fig, out / "ch5_leaf_support.png")


def manifold(out: Path) -> None:
    """Fig. 6.x: swiss-roll embeddings coloured by the true manifold coordinate."""
    from sklearn.datasets import make_swiss_roll
    from sklearn.manifold import trustworthiness

    X, t = make_swiss_roll(2000, noise=0.05, random_state=0)
    fig, axes = figure(5, size=3.0)
    ax3 = fig.add_subplot(1, 5, 1, projection="3d")
    axes[0, 0].remove()
    ax3.scatter(X[:, 0], X[:, 1], X[:, 2], c=t, s=2, cmap="viridis")
    ax3.set_title("swiss roll (colour: position)", fontsize=9)
    settings = [("laplacian", aff) for aff in ("binary", "gaussian", "mahalanobis")] + [("geodesic", "binary")]
    for ax, (embedding, aff) in zip(axes[0, 1:], settings, strict=True):
        m = ManifoldForest(2, affinity=aff, embedding=embedding, n_trees=30, random_state=0)
        E = m.fit_transform(X)
        ax.scatter(E[:, 0], E[:, 1], c=t, s=2, cmap="viridis")
        name = f"{aff} affinity" if embedding == "laplacian" else "geodesic (leaf-mates)"
        ax.set_title(f"{name}, T=30\ntrustworthiness {trustworthiness(X, E, n_neighbors=10):.3f}", fontsize=8)
    save(fig, out / "ch6_manifold.png")


def semi_supervised(out: Path) -> None:
    """Fig. 7.x: transductive and inductive posteriors from 4 labels."""
    from sklearn.datasets import make_moons

    X, y = make_moons(500, noise=0.08, random_state=0)
    X = (X - X.mean(0)) / X.std(0) * 0.6
    rng = np.random.default_rng(0)  # 2 random labels per class, as in the tests
    lab = np.r_[rng.choice(np.flatnonzero(y == 0), 2, replace=False), rng.choice(np.flatnonzero(y == 1), 2,
                                                                                   replace=False)]
    partial = np.full(y.size, -1)
    partial[lab] = y[lab]
    f = SemiSupervisedForest(n_trees=100, random_state=0).fit(X, partial)
    sup = ClassificationForest(n_trees=100, random_state=0).fit(X[lab], y[lab])
    fig, axes = figure(3, size=3.4)
    axes[0, 0].scatter(X[:, 0], X[:, 1], c=np.where(partial < 0, 0.5, partial), cmap="coolwarm", s=4)
    axes[0, 0].scatter(X[lab, 0], X[lab, 1], c=y[lab], cmap="coolwarm", s=80, edgecolors="k", marker="*")
    axes[0, 0].set_title("4 labels (stars), 496 unlabelled", fontsize=9)
    axes[0, 1].scatter(X[:, 0], X[:, 1], c=f.label_distributions_[:, 1], cmap="coolwarm", s=4)
    axes[0, 1].set_title(f"transduction (acc {np.mean(f.transduction_ == y):.2f})", fontsize=9)
    show_posterior(axes[0, 2], f, X, y, f"induction p(c|v), acc {f.score(X, y):.2f} "
                   f"(supervised on 4 labels: {sup.score(X, y):.2f})", lim=1.5)
    axes[0, 2].title.set_fontsize(8)
    save(fig, out / "ch7_semi_supervised.png")


def main() -> None:
    parser = argparse.ArgumentParser(description="Draw the chapter 3-4 figures from imageforest.")
    parser.add_argument("--out", type=Path, default=Path("gallery"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for fn in (weak_learners, forest_size, depth, randomness, regression, density, leaf_support, manifold,
               semi_supervised):
        t0 = time.perf_counter()
        fn(args.out)
        print(f"{fn.__name__:14s} {time.perf_counter() - t0:6.1f} s")
    print(f"figures in {args.out}/: " + ", ".join(sorted(p.name for p in args.out.glob("*.png"))))


if __name__ == "__main__":
    main()
