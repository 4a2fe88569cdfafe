"""RegressionForest: probabilistic regression, Criminisi et al. 2012, ch. 4 and App. A, on the shared engine."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from imageforest.estimators.base import BaseForest, numba_threads
from imageforest.estimators.mixture import ForestGaussianMixture
from imageforest.estimators.params import GROWTH, Integer, Options, Rule, check_params
from imageforest.exceptions import InvalidInputError, ModelFormatError
from imageforest.forest.consistent import ConsistentSettings, grow_consistent
from imageforest.forest.leaf_models import (
    gaussian_leaves,
    linear_components,
    linear_leaves,
    shrunk_noise,
)
from imageforest.forest.objectives import SQUARED_ERROR, Objective
from imageforest.forest.trainer import GrownForest
from imageforest.forest.weak_learners import VectorFeatures
from imageforest.validation import check_targets

LEAF_MODELS = ("constant", "gaussian", "linear")
VARIANTS = ("breiman", "denil", "biau08", "biau12")
# The data split each variant's paper uses when the user leaves it to the variant.
PAPER_DATA_SPLIT = {"breiman": None, "denil": "tree", "biau08": None, "biau12": "forest"}
LINEAR_RIDGE = 1e-6
VAR_FLOOR = 1e-9  # relative to each output's variance: keeps leaf Gaussians proper


class RegressionForest(BaseForest):
    """A probabilistic regression forest (Criminisi et al. 2012, ch. 4).

    Parameters
    ----------
    n_trees, max_depth, weak_learner, n_candidates, n_thresholds, bootstrap, max_samples, min_samples_split,
    min_samples_leaf, min_gain, structure, two_sided, random_state, n_jobs
        As for `ClassificationForest` (T, D, weak learner, rho, K, ...). ``n_candidates`` defaults to all
        features, as regression forests usually do.
    criterion : {"gaussian", "squared_error"}
        "gaussian": information gain of the Gaussian differential entropy, log det of the covariance of the
        (multivariate) targets (eq. 4.6, App. A); "squared_error": CART variance reduction.
    leaf_model : {"constant", "gaussian", "linear"}
        "constant": leaf mean only; "gaussian" (probabilistic-constant): mean and covariance;
        "linear" (probabilistic-linear, App. A): a weighted least-squares hyperplane in x with parameter
        covariance, so the predictive variance grows with distance from the leaf's data.
    variant : {"breiman", "denil", "biau08", "biau12"}
        How trees split. "breiman": the engine's search above (the default). The consistent forests of Denil,
        Matheson & de Freitas, "Narrowing the Gap: Random Forests In Theory and In Practice" (2014): "denil", their
        algorithm (1 + Poisson(n_candidates - 1) candidate dimensions per node, split points searched inside the
        range of `range_points` random structure points, no child with fewer than `min_samples_leaf` estimation
        points); "biau12" (Biau 2012: cell midpoints, the best of n_candidates dimensions drawn with replacement,
        grown breadth first) and "biau08" (Biau, Devroye & Lugosi 2008: random leaf, random dimension, random rank),
        both grown to n_samples / min_samples_leaf leaves. These variants use axis-aligned tests and squared error,
        never bootstrap, and ignore n_thresholds, min_samples_split, min_gain and criterion.
    data_split : {"tree", "forest", None, "auto"}
        For the consistent variants: points are structure (they shape the tree) or estimation (they fit the leaves)
        at random, drawn per tree ("tree"), once for the forest ("forest"), or not at all (None: every point plays
        both roles). "auto": each paper's choice (denil "tree", biau12 "forest", biau08 None). "breiman" takes
        only None or "auto".
    range_points : int
        m of Denil et al.: structure points drawn per node to bound the split search (variant "denil").
    online_min_samples, online_memory : int
        `partial_fit` only: points a leaf must see before it may split, and points each growing leaf keeps (as
        for `ClassificationForest`); online trees score splits by squared error.

    Attributes
    ----------
    n_outputs_ : int
    n_features_in_ : int
    feature_importances_ : (n_features,) array
    """

    task = "regression"
    _estimator_kind = "regressor"
    parameter_constraints: ClassVar[dict[str, Rule]] = {
        **GROWTH, "criterion": Options(choices=("gaussian", "squared_error")),
        "leaf_model": Options(choices=LEAF_MODELS), "variant": Options(choices=VARIANTS),
        "data_split": Options(choices=("tree", "forest", "auto"), allow_none=True), "range_points": Integer(1),
        "online_min_samples": Integer(1), "online_memory": Integer(0)}

    def __init__(self, n_trees: int = 100, *, max_depth: int | None = None, weak_learner: str = "axis",
                 n_candidates=1.0, n_thresholds: int | None = 16, criterion: str = "gaussian",
                 leaf_model: str = "gaussian", bootstrap: bool = False, max_samples=None,
                 min_samples_split: int = 2, min_samples_leaf: int = 1, min_gain: float = 0.0,
                 structure: str = "tree", two_sided: bool = False, variant: str = "breiman",
                 data_split: str | None = "auto", range_points: int = 1000, online_min_samples: int = 32,
                 online_memory: int = 64, random_state=None, n_jobs: int | None = None) -> None:
        self.n_trees = n_trees
        self.max_depth = max_depth
        self.weak_learner = weak_learner
        self.n_candidates = n_candidates
        self.n_thresholds = n_thresholds
        self.criterion = criterion
        self.leaf_model = leaf_model
        self.bootstrap = bootstrap
        self.max_samples = max_samples
        self.min_samples_split = min_samples_split
        self.min_samples_leaf = min_samples_leaf
        self.min_gain = min_gain
        self.structure = structure
        self.two_sided = two_sided
        self.variant = variant
        self.data_split = data_split
        self.range_points = range_points
        self.online_min_samples = online_min_samples
        self.online_memory = online_memory
        self.random_state = random_state
        self.n_jobs = n_jobs

    def fit(self, X, y, sample_weight=None) -> RegressionForest:
        """Grow the forest on X (n_samples, n_features) with targets y (n_samples,) or (n_samples, n_outputs)."""
        # consistent variants and linear leaves read X by rows
        rows_read = self.variant != "breiman" or self.leaf_model == "linear"
        X, sw = self._prepare_fit(X, sample_weight, self._reads_features_only() and not rows_read)
        Y = check_targets(y, X.shape[0])
        check_params(self)
        if self.variant == "breiman":
            if self.data_split not in ("auto", None):
                raise InvalidInputError("RegressionForest: data_split needs variant 'denil', 'biau08' or 'biau12' "
                                        "(Breiman's forest uses every point for both structure and leaves)")
            grown = self._grow(X, Objective.regression(Y, self.criterion), sw)
        else:
            grown = self._grow_consistent(X, Y, sw)
        self._fit_leaves(grown, Y, X, np.ndim(y) == 1)
        del grown
        self._prepare_apply()
        return self

    def partial_fit(self, X, y, classes=None, sample_weight=None) -> RegressionForest:
        """Grow the forest online with one more batch of points (Saffari et al. 2009; see
        `ClassificationForest.partial_fit`): leaves keep the weight, sums and cross-products of their targets.

        Parameters
        ----------
        X : (n_samples, n_features) array
        y : (n_samples,) or (n_samples, n_outputs), the same number of outputs at every call
        classes : must be None (scikit-learn's signature; regression has no classes)
        sample_weight : (n_samples,) array or None
        """
        name = type(self).__name__
        if classes is not None:
            raise InvalidInputError(f"{name}.partial_fit takes no classes")
        X, sw, first = self._online_input(X, sample_weight)
        Y = check_targets(y, X.shape[0])
        if first:
            if self.variant != "breiman" or self.leaf_model == "linear":
                raise InvalidInputError(f"{name}.partial_fit needs variant='breiman' and a 'constant' or "
                                        "'gaussian' leaf model")
            self._online_shift = Y.mean(axis=0)  # sums of centred targets keep float32 candidate counts exact
        elif Y.shape[1] != self.n_outputs_:
            raise InvalidInputError(f"{name}.partial_fit: y has {Y.shape[1]} outputs, the first call had "
                                    f"{self.n_outputs_}")
        q = Y.shape[1]
        Yc = Y - self._online_shift
        rows = np.concatenate([sw[:, None], sw[:, None] * Yc,
                               (sw[:, None, None] * Yc[:, :, None] * Yc[:, None, :]).reshape(-1, q * q)], axis=1)
        self.n_outputs_ = q
        self._y_1d = np.ndim(y) == 1
        self._online_step(X, rows, SQUARED_ERROR)
        return self

    _online_exports: ClassVar[tuple[str, ...]] = ("forest_", "leaf_mean_", "leaf_cov_")

    def _online_leaves(self, stats: np.ndarray) -> None:
        q = self.n_outputs_
        totals = self._online_totals
        overall = totals[1:1 + q] / max(totals[0], 1e-300)
        overall_cov = totals[1 + q:].reshape(q, q) / max(totals[0], 1e-300) - np.outer(overall, overall)
        w = stats[:, :1]
        seen = w[:, 0] > 0
        safe = np.maximum(w, 1e-300)
        mean = np.where(seen[:, None], stats[:, 1:1 + q] / safe, overall)
        second = stats[:, 1 + q:].reshape(-1, q, q) / safe[:, :, None]
        cov = np.where(seen[:, None, None], second - mean[:, :, None] * mean[:, None, :], overall_cov)
        var = np.diag(overall_cov)
        cov = cov + np.diag(VAR_FLOOR * np.where(var > 0, var, 1.0))
        self.leaf_mean_ = mean + self._online_shift
        if self.leaf_model == "gaussian":
            self.leaf_cov_ = cov

    def _grow_consistent(self, X: np.ndarray, Y: np.ndarray, sample_weight: np.ndarray) -> GrownForest:
        """Grow the trees of a consistent variant (`imageforest.forest.consistent`) on X (n, d)."""
        name = type(self).__name__
        for bad, why in ((self.weak_learner != "axis", "weak_learner='axis'"), (self.bootstrap, "bootstrap=False"),
                         (self.max_samples is not None, "max_samples=None"), (self.structure != "tree",
                                                                               "structure='tree'"),
                         (self.two_sided, "two_sided=False")):
            if bad:
                raise InvalidInputError(f"{name}: variant={self.variant!r} needs {why}")
        split = PAPER_DATA_SPLIT[self.variant] if self.data_split == "auto" else self.data_split
        n_live = int(np.count_nonzero(sample_weight > 0))
        if split is not None and n_live < 4 * self.min_samples_leaf:
            raise InvalidInputError(
                f"{name}: data_split={split!r} halves the {n_live} points into structure and estimation points; "
                f"each tree needs at least {4 * self.min_samples_leaf} (4 x min_samples_leaf) for a split")
        settings = ConsistentSettings(
            variant=self.variant, data_split=split, n_trees=int(self.n_trees),
            n_candidates=self._resolve_candidates(X.shape[1]), range_points=int(self.range_points),
            min_samples_leaf=int(self.min_samples_leaf), max_depth=self.max_depth)
        family = VectorFeatures.for_data("axis", X)
        with numba_threads(self.n_jobs):
            grown = grow_consistent(family.training_data(X), Y, sample_weight, settings,
                                    np.random.default_rng(self.random_state))
        self.family_ = family
        self.forest_ = grown.forest
        self.n_features_in_ = X.shape[1]
        return grown

    def _fit_leaves(self, grown, Y: np.ndarray, X: np.ndarray | None, y_1d: bool) -> None:
        """Leaf models from each leaf's training points: Gaussians of Y, or (with X) probabilistic-linear fits."""
        var = Y.var(axis=0)
        floor = VAR_FLOOR * np.where(var > 0, var, 1.0)
        with numba_threads(self.n_jobs):
            if self.leaf_model == "linear":
                self.leaf_x_mean_, self.leaf_coef_, self.leaf_a_inv_, ssr, dof = linear_leaves(
                    grown.order, grown.wts, X, Y, grown.leaf_start, grown.leaf_end, LINEAR_RIDGE)
                self.leaf_noise_ = shrunk_noise(ssr, dof, X.shape[1] + 2.0, floor)
            else:
                self.leaf_mean_, self.leaf_cov_ = gaussian_leaves(grown.order, grown.position_weights, Y,
                                                                  grown.leaf_start, grown.leaf_end, floor)
        self.n_outputs_ = Y.shape[1]
        self._y_1d = y_1d

    def _components(self, X: np.ndarray, with_cov: bool) -> tuple[np.ndarray, np.ndarray]:
        leaves = self._apply_checked(X)
        with numba_threads(self.n_jobs):
            if self.leaf_model == "linear":
                return linear_components(leaves, X, self.leaf_x_mean_, self.leaf_coef_, self.leaf_a_inv_,
                                         self.leaf_noise_, with_cov)
        return self.leaf_mean_[leaves], (self.leaf_cov_[leaves] if with_cov else None)

    def predict(self, X) -> np.ndarray:
        """E[y | x]: shape (n_samples,) for 1-D training targets, else (n_samples, n_outputs)."""
        X = self._checked_input(X)
        if self.leaf_model == "linear":
            mean = self._components(X, with_cov=False)[0].mean(axis=1)
        else:
            with numba_threads(self.n_jobs):
                mean = self.family_.leaf_average(X, self.forest_, self.leaf_mean_)
        return mean[:, 0] if self._y_1d else mean

    def predict_distribution(self, X) -> ForestGaussianMixture:
        """The forest's full conditional p(y | x): a mixture of one Gaussian per tree.

        Its `mean`, `std`, `mode`, `quantile` and `pdf` give the posterior summaries of Fig. 4.6-4.9.
        """
        if self.leaf_model == "constant":
            raise InvalidInputError("leaf_model='constant' keeps no variance; fit with 'gaussian' or 'linear' "
                                    "to get p(y|x)")
        X = self._checked_input(X)
        means, covs = self._components(X, with_cov=True)
        return ForestGaussianMixture(np.ascontiguousarray(means), np.ascontiguousarray(covs))

    def score(self, X, y, sample_weight=None) -> float:
        """Coefficient of determination R^2 (averaged over outputs)."""
        pred = self.predict(X).reshape(len(X), -1)
        Y = check_targets(y, pred.shape[0])
        w = np.ones(pred.shape[0]) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        ss_res = np.sum(w[:, None] * (Y - pred) ** 2, axis=0)
        ss_tot = np.sum(w[:, None] * (Y - np.average(Y, axis=0, weights=w)) ** 2, axis=0)
        r2 = np.where(ss_tot > 0, 1.0 - ss_res / np.where(ss_tot > 0, ss_tot, 1.0), 0.0)
        return float(r2.mean())

    # -- model files --------------------------------------------------------------------------------------
    def leaf_arrays(self) -> dict[str, np.ndarray]:
        if self.leaf_model == "linear":
            return {"leaf.x_mean": self.leaf_x_mean_, "leaf.coef": self.leaf_coef_,
                    "leaf.a_inv": self.leaf_a_inv_, "leaf.noise": self.leaf_noise_}
        arrays = {"leaf.mean": self.leaf_mean_}
        if self.leaf_model == "gaussian":
            arrays["leaf.cov"] = self.leaf_cov_
        return arrays

    def extra_metadata(self) -> dict:
        return {"n_outputs": int(self.n_outputs_), "y_1d": bool(self._y_1d)}

    def restore_leaves(self, meta: dict, arrays: dict[str, np.ndarray]) -> None:
        n_leaves = self.forest_.n_leaves
        d = int(meta["n_outputs"])
        p = self.n_features_in_
        if self.leaf_model == "linear":
            shapes = {"leaf.x_mean": (n_leaves, p), "leaf.coef": (n_leaves, p + 1, d),
                      "leaf.a_inv": (n_leaves, p + 1, p + 1), "leaf.noise": (n_leaves, d, d)}
        else:
            shapes = {"leaf.mean": (n_leaves, d)}
            if self.leaf_model == "gaussian":
                shapes["leaf.cov"] = (n_leaves, d, d)
        for key, shape in shapes.items():
            if key not in arrays or arrays[key].shape != shape:
                raise ModelFormatError(f"leaf array '{key}' is missing or has the wrong shape")
            if arrays[key].dtype.kind != "f" or not np.all(np.isfinite(arrays[key])):
                raise ModelFormatError(f"leaf array '{key}' must hold finite floating-point numbers")
            setattr(self, key.replace("leaf.", "leaf_") + "_", np.ascontiguousarray(arrays[key], np.float64))
        for key in ("leaf.cov", "leaf.noise"):
            if key in shapes and np.any(np.diagonal(arrays[key], axis1=1, axis2=2) < 0):
                raise ModelFormatError(f"leaf array '{key}' holds negative variances")
        self.n_outputs_ = d
        self._y_1d = bool(meta["y_1d"])
