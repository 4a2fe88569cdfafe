"""Density, manifold and semi-supervised forests against scikit-learn, side by side in one process.

- density: held-out mean log-likelihood against KernelDensity (bandwidth by 5-fold cross-validation) and
  GaussianMixture (components by BIC) on 2-D and 5-D mixtures, the spiral and the "S" data; plus the
  reconstruction error of eq. 5.11 (mean |p_forest - p_true| on a grid) against a known density as T grows.
- manifold: trustworthiness (10 neighbours) and time on swiss roll and S-curve (n = 2,000 and 20,000) against
  SpectralEmbedding and Isomap.
- semi-supervised: accuracy on held-out points with 2-10 labels per class on half-moons, four spirals and four
  Gaussians against LabelSpreading (rbf and knn kernels, best reported) and SelfTrainingClassifier.

    python benchmarks/engine/unsupervised_vs_sklearn.py [--quick]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from scipy import stats
from sklearn.datasets import make_moons, make_s_curve, make_swiss_roll
from sklearn.ensemble import RandomForestClassifier
from sklearn.manifold import Isomap, SpectralEmbedding, trustworthiness
from sklearn.mixture import GaussianMixture
from sklearn.model_selection import GridSearchCV
from sklearn.neighbors import KernelDensity
from sklearn.semi_supervised import LabelSpreading, SelfTrainingClassifier

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks._measure import measure, mib
from imageforest import DensityForest, ManifoldForest, SemiSupervisedForest
from imageforest.toy_data import s_shape, spirals

# ----------------------------------------------------------------------------------------------- density
MIXTURE_SD = 0.35  # every component's standard deviation


def mixture_centres(d):
    """The 4 component centres (4, d) of the d-dimensional mixture."""
    return np.random.default_rng(100 + d).uniform(-2, 2, (4, d))


def gaussian_mixture_data(n, d, seed):
    rng = np.random.default_rng(seed)
    c = rng.integers(0, 4, n)
    return mixture_centres(d)[c] + rng.normal(0, MIXTURE_SD, (n, d))


def gaussian_mixture_log_density(X):
    """The true log density of `gaussian_mixture_data` (what no estimator can beat on average)."""
    d = X.shape[1]
    cov = MIXTURE_SD**2 * np.eye(d)
    return np.log(np.mean([stats.multivariate_normal(c, cov).pdf(X) for c in mixture_centres(d)], axis=0))


def density_sets(n):
    yield "mixture_2d", gaussian_mixture_data(n, 2, 0), gaussian_mixture_data(n, 2, 1)
    yield "mixture_5d", gaussian_mixture_data(n, 5, 0), gaussian_mixture_data(n, 5, 1)
    yield "spiral", spirals(n // 4, 4, noise=0.04, seed=0)[0], spirals(n // 4, 4, noise=0.04, seed=1)[0]
    yield "S", s_shape(n, seed=0), s_shape(n, seed=1)


def best_density_forest(X):
    """The default forest: depth, floor, leaf support and EM steps chosen on a held-out fifth of the training
    points (as the peers tune their parameters by cross-validation)."""
    forest = DensityForest(random_state=0).fit(X)
    return forest, int(forest.depths_[0])


def density_benchmark(n):
    print("density: held-out mean log-likelihood (higher is better)")
    print(f"{'data':12s} {'forest':>9s} {'(D)':>4s} {'KDE-CV':>9s} {'GMM-BIC':>9s} {'best':>7s} "
          f"{'t forest':>8s} {'t KDE':>7s} {'t GMM':>7s} {'truth':>8s}")
    wins = 0
    for name, X, Xt in density_sets(n):
        (forest, depth), t_f, _ = measure(lambda X=X: best_density_forest(X))
        kde, t_k, _ = measure(lambda X=X: GridSearchCV(KernelDensity(), {"bandwidth": np.logspace(-1.7, 0.3, 15)},
                                                        cv=5).fit(X).best_estimator_)
        gmm, t_g, _ = measure(lambda X=X: min((GaussianMixture(k, random_state=0).fit(X) for k in range(1, 13)),
                                              key=lambda g, X=X: g.bic(X)))
        ll = {"forest": forest.score(Xt), "KDE": kde.score(Xt) / len(Xt), "GMM": gmm.score(Xt)}
        best = max(ll, key=ll.get)
        wins += best == "forest"
        truth = f"{gaussian_mixture_log_density(Xt).mean():8.3f}" if name.startswith("mixture") else f"{'-':>8s}"
        print(f"{name:12s} {ll['forest']:9.3f} {depth:4d} {ll['KDE']:9.3f} {ll['GMM']:9.3f} {best:>7s} "
              f"{t_f:8.1f} {t_k:7.1f} {t_g:7.1f} {truth}")
    print(f"  forest best on {wins} of 4 sets; truth: the generating density's own held-out log-likelihood")
    # Eq. 5.11: reconstruction error against a known density, falling with T. Every other setting is fixed (the
    # monograph's leaves in their cells), so that T alone changes: "auto" would choose them again for every T.
    X = gaussian_mixture_data(n, 2, 0)
    g = np.linspace(-3.5, 3.5, 120)
    grid = np.c_[np.meshgrid(g, g)[0].ravel(), np.meshgrid(g, g)[1].ravel()]
    p_true = np.exp(gaussian_mixture_log_density(grid))
    errs = []
    for T in (1, 5, 20, 100):
        p = np.exp(DensityForest(n_trees=T, max_depth=5, variance_floor=1e-3, leaf_support="cell", mixture_steps=0,
                                 random_state=0).fit(X).score_samples(grid))
        errs.append(np.sum(np.abs(p - p_true)) * (g[1] - g[0]) ** 2)
    print("  reconstruction error (L1 on a grid, eq. 5.11) for T = 1, 5, 20, 100: "
          + ", ".join(f"{e:.3f}" for e in errs))


# ----------------------------------------------------------------------------------------------- manifold
def manifold_benchmark(sizes):
    print("manifold: trustworthiness (10 neighbours) and seconds; forest = Laplacian eigenmaps of W (eq. 6.7), "
          "geodesic = embedding='geodesic'")
    print(f"{'data':18s} {'forest':>7s} {'t':>6s} {'geodesic':>8s} {'t':>6s} {'spectral':>8s} {'t':>6s} "
          f"{'isomap':>7s} {'t':>6s} {'mem MiB':>8s} {'geo MiB':>8s} {'iso MiB':>8s}")
    for n in sizes:
        for name, maker in (("swiss_roll", make_swiss_roll), ("s_curve", make_s_curve)):
            X, _ = maker(n, noise=0.05, random_state=0)
            E, t_f, mem = measure(lambda X=X: ManifoldForest(2, n_trees=30, random_state=0).fit_transform(X))
            G, t_g, mem_g = measure(lambda X=X: ManifoldForest(2, embedding="geodesic", n_trees=30,
                                                               random_state=0).fit_transform(X))
            S, t_s, _ = measure(lambda X=X: SpectralEmbedding(2, random_state=0).fit_transform(X))
            I, t_i, mem_i = measure(lambda X=X: Isomap(n_components=2).fit_transform(X))
            # trustworthiness itself is O(n^2): score on a fixed subsample at the largest size
            sub = np.random.default_rng(0).choice(n, min(n, 4000), replace=False)
            tw = [trustworthiness(X[sub], Z[sub], n_neighbors=10) for Z in (E, G, S, I)]
            print(f"{name + '_' + str(n):18s} {tw[0]:7.4f} {t_f:6.1f} {tw[1]:8.4f} {t_g:6.1f} {tw[2]:8.4f} {t_s:6.1f} "
                  f"{tw[3]:7.4f} {t_i:6.1f} {mib(mem)} {mib(mem_g)} {mib(mem_i)}", flush=True)


# ----------------------------------------------------------------------------------------------- semi-supervised
def ssl_sets():
    X, y = make_moons(600, noise=0.1, random_state=0)
    Xt, yt = make_moons(1000, noise=0.1, random_state=1)
    yield "half_moons", X, y, Xt, yt
    X, y = spirals(150, 4, noise=0.03, seed=0)
    Xt, yt = spirals(250, 4, noise=0.03, seed=1)
    yield "four_spirals", X, y, Xt, yt
    rng = np.random.default_rng(0)
    centres = np.array([[-1.5, 0], [1.5, 0], [0, 1.5], [0, -1.5]])
    y = rng.integers(0, 4, 600)
    X = centres[y] + rng.normal(0, 0.5, (600, 2))
    yt = rng.integers(0, 4, 1000)
    yield "four_gaussians", X, y, centres[yt] + rng.normal(0, 0.5, (1000, 2)), yt


def ssl_benchmark():
    print("semi-supervised: held-out accuracy, mean over 5 draws of the labelled points")
    print(f"{'data':16s} {'labels/class':>12s} {'forest':>7s} {'LabelSpreading':>14s} {'SelfTraining':>12s}")
    for name, X, y, Xt, yt in ssl_sets():
        for per_class in (2, 5, 10):
            acc = {"forest": [], "ls": [], "st": []}
            for seed in range(5):
                rng = np.random.default_rng(seed)
                lab = np.concatenate([rng.choice(np.flatnonzero(y == c), per_class, replace=False)
                                      for c in np.unique(y)])
                partial = np.full(y.size, -1)
                partial[lab] = y[lab]
                forest = SemiSupervisedForest(n_trees=50, random_state=0).fit(X, partial)
                acc["forest"].append(forest.score(Xt, yt))
                ls = max((LabelSpreading(kernel=k, **kw).fit(X, partial) for k, kw in
                          (("rbf", {"gamma": 20}), ("rbf", {"gamma": 5}), ("knn", {"n_neighbors": 7}))),
                         key=lambda m: m.score(X[lab], y[lab]) + np.mean(np.isfinite(m.label_distributions_)))
                acc["ls"].append(ls.score(Xt, yt))
                st = SelfTrainingClassifier(RandomForestClassifier(100, random_state=0)).fit(X, partial)
                acc["st"].append(st.score(Xt, yt))
            print(f"{name:16s} {per_class:12d} {np.mean(acc['forest']):7.3f} {np.mean(acc['ls']):14.3f} "
                  f"{np.mean(acc['st']):12.3f}", flush=True)
    print("  (LabelSpreading: best of rbf gamma 20 / 5 and knn 7 on its own labelled points, an optimistic peer)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller data; n = 2,000 only for manifolds")
    parser.add_argument("--only", default="density,manifold,semi-supervised",
                        help="comma-separated parts to run (density, manifold, semi-supervised)")
    args = parser.parse_args()
    parts = args.only.split(",")
    import warnings

    warnings.filterwarnings("ignore", category=RuntimeWarning)  # LabelSpreading's divide-by-zero on knn graphs
    if "density" in parts:
        density_benchmark(1000 if args.quick else 2000)
    if "manifold" in parts:
        manifold_benchmark((2000,) if args.quick else (2000, 20000))
    if "semi-supervised" in parts:
        ssl_benchmark()


if __name__ == "__main__":
    main()
