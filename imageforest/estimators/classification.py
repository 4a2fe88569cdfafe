"""ClassificationForest: Criminisi et al. 2012, ch. 3 on the shared engine."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from imageforest.estimators.base import BaseForest, numba_threads
from imageforest.estimators.params import GROWTH, ClassWeight, Integer, Options, Rule, check_params
from imageforest.exceptions import InvalidInputError, ModelFormatError
from imageforest.forest.leaf_models import class_histograms, product_posterior, tree_average
from imageforest.forest.losses import LOSSES
from imageforest.forest.objectives import CRITERIA, Objective
from imageforest.validation import check_labels

PRODUCT_FLOOR = 1e-6


class ClassificationForest(BaseForest):
    """A classification forest (Criminisi et al. 2012, ch. 3): leaves hold class histograms, trees are averaged or
    multiplied.

    Parameters
    ----------
    n_trees : int
        T, the number of trees.
    max_depth : int or None
        D, the largest depth (root at 0); None grows until leaves are pure or too small.
    weak_learner : {"axis", "oblique", "conic"}
        Weak-learner model (sec. 2.3.3).
    n_candidates : int, float, "sqrt", "log2" or "all"
        rho, candidate parameter rows tried per node (randomized node optimisation); a float is a fraction of
        the features. ``n_candidates=1`` with ``n_thresholds=1`` gives extremely randomized trees in the
        monograph's sense (sec. 8.x).
    n_thresholds : int or None
        K random thresholds per candidate within the node's response range; None searches every threshold.
    criterion : {"entropy", "gini"}
        Split objective (information gain with Shannon entropy, or Gini impurity).
    class_weight : None, "balanced" or dict
        "balanced" re-weights points by inverse class priors (sec. 3.2); a dict maps class to weight.
    posterior : {"average", "product"}
        Ensemble model: eq. 2.12 (average) or eq. 2.13 (normalised product).
    bootstrap : bool
        Bagging: each tree sees a bootstrap sample (otherwise all points: randomness from node optimisation).
    max_samples : int, float or None
        Points drawn per tree (a float is a fraction).
    min_samples_split, min_samples_leaf : int
    min_gain : float
        A node splits only if its best information gain reaches this.
    structure : {"tree", "fern"}
        "fern": one test per tree level shared by all nodes of that level (random ferns).
    two_sided : bool
        Search two-sided tests tau2 < f <= tau1 (eq. 2.5) rather than one threshold.
    growth : {"independent", "alternating"}
        "alternating": an alternating decision forest (Schulter et al., "Alternating decision forests", CVPR 2013):
        all trees grow one depth at a time, and after each depth every training point is weighted by the gradient
        of the global `loss` at the forest's margin on it, so the next depth's weighted entropy concentrates on
        the points the forest still gets wrong. Leaf histograms use the points' own weights. Not with bootstrap.
        A fit takes 1.1-2x an independent forest's (the margins of every point at every depth cost most where
        classes are many and candidates few).
    loss : {"logit", "exponential", "savage", "tangent", "hinge"}
        The global loss of alternating growth.
    online_min_samples : int
        `partial_fit` only: points a leaf must see before it may split (Saffari et al.'s alpha; at least
        min_samples_split). ``bootstrap`` is online bagging (Poisson(1) copies per tree).
    online_memory : int
        `partial_fit` only: points each growing leaf keeps (every point is stored once for all trees, as float32
        inputs and statistics). A leaf chooses its test from its kept points as a batch tree would (rho
        dimensions, ``n_thresholds`` each), hands them on to its children, and is completed by a small batch tree
        on them when the forest is exported; keep it at least `online_min_samples`. 0: Saffari et al.'s
        counting leaves, each holding (rho + 4) x n_classes float32 counts, with candidate thresholds at the
        values of its first four points.
    random_state : int, numpy Generator or None
        Fixes the model bytes whatever the thread count.
    n_jobs : int or None
        Threads for training and prediction (None: all cores).

    Attributes
    ----------
    classes_ : (n_classes,) array
    n_features_in_ : int
    feature_importances_ : (n_features,) array
    """

    task = "classification"
    _estimator_kind = "classifier"
    parameter_constraints: ClassVar[dict[str, Rule]] = {
        **GROWTH, "criterion": Options(choices=("entropy", "gini")), "class_weight": ClassWeight(),
        "posterior": Options(choices=("average", "product")),
        "growth": Options(choices=("independent", "alternating")), "loss": Options(choices=LOSSES),
        "online_min_samples": Integer(1), "online_memory": Integer(0)}

    def __init__(self, n_trees: int = 100, *, max_depth: int | None = None, weak_learner: str = "axis",
                 n_candidates="sqrt", n_thresholds: int | None = 16, criterion: str = "entropy",
                 class_weight=None, posterior: str = "average", bootstrap: bool = False, max_samples=None,
                 min_samples_split: int = 2, min_samples_leaf: int = 1, min_gain: float = 0.0,
                 structure: str = "tree", two_sided: bool = False, growth: str = "independent",
                 loss: str = "tangent", online_min_samples: int = 32, online_memory: int = 64, random_state=None,
                 n_jobs: int | None = None) -> None:
        self.n_trees = n_trees
        self.max_depth = max_depth
        self.weak_learner = weak_learner
        self.n_candidates = n_candidates
        self.n_thresholds = n_thresholds
        self.criterion = criterion
        self.class_weight = class_weight
        self.posterior = posterior
        self.bootstrap = bootstrap
        self.max_samples = max_samples
        self.min_samples_split = min_samples_split
        self.min_samples_leaf = min_samples_leaf
        self.min_gain = min_gain
        self.structure = structure
        self.two_sided = two_sided
        self.growth = growth
        self.loss = loss
        self.online_min_samples = online_min_samples
        self.online_memory = online_memory
        self.random_state = random_state
        self.n_jobs = n_jobs

    def global_loss(self) -> str | None:
        if getattr(self, "growth", "independent") != "alternating":
            return None
        if self.bootstrap:
            raise InvalidInputError(f"{type(self).__name__}: growth='alternating' re-weights the points themselves; "
                                    "it cannot be combined with bootstrap=True")
        return self.loss

    def fit(self, X, y, sample_weight=None) -> ClassificationForest:
        """Grow the forest on X (n_samples, n_features) with class labels y (n_samples,)."""
        X, sw = self._prepare_fit(X, sample_weight, self._reads_features_only())
        objective, sw = self._label_objective(y, X.shape[0], sw)
        self._fit_leaves(self._grow(X, objective, sw), objective)
        self._prepare_apply()
        return self

    def partial_fit(self, X, y, classes=None, sample_weight=None) -> ClassificationForest:
        """Grow the forest online with one more batch of points (Saffari et al., "On-line random forests", 2009).

        New points update the statistics of the leaves they reach (and are kept by them, up to `online_memory`);
        a leaf that has seen `online_min_samples` points splits on its best test (see `imageforest.forest.online`).
        After each call the forest predicts, saves and loads like a batch-grown one; its trees are exported, and
        their leaves completed, when it is first read after the call.

        Parameters
        ----------
        X : (n_samples, n_features) array
        y : (n_samples,) class labels, all among `classes`
        classes : every class the stream will hold; required at the first call (scikit-learn's convention), and
            at later calls, if given, the same
        sample_weight : (n_samples,) array or None
        """
        X, sw, first = self._online_input(X, sample_weight)
        name = type(self).__name__
        if first:
            if classes is None:
                raise InvalidInputError(f"{name}.partial_fit: the first call needs classes= (every class the "
                                        "stream will hold)")
            if self.growth != "independent" or self.class_weight == "balanced":
                raise InvalidInputError(f"{name}.partial_fit needs growth='independent' and a class_weight that "
                                        "does not depend on the whole data set (None or a dict)")
            known = np.unique(np.asarray(classes))
            if known.size < 2:
                raise InvalidInputError(f"{name}.partial_fit: classes must hold at least two classes")
        else:
            known = self.classes_
            if classes is not None and not np.array_equal(np.unique(np.asarray(classes)), known):
                raise InvalidInputError(f"{name}.partial_fit: classes differ from the first call's {known.tolist()}")
        y = np.asarray(y)
        if y.shape != (X.shape[0],):
            raise InvalidInputError(f"y must have shape ({X.shape[0]},), got {y.shape}")
        try:
            idx = np.clip(np.searchsorted(known, y), 0, known.size - 1)
            unknown = known[idx] != y
        except TypeError:
            raise InvalidInputError(f"{name}.partial_fit: y's labels are not of the classes' type") from None
        if np.any(unknown):
            raise InvalidInputError(f"{name}.partial_fit: y holds classes not given to the first call: "
                                    f"{sorted(map(str, np.unique(y[unknown])))[:5]}")
        weights = sw * self._class_weights(known, idx, sw)[idx]
        rows = np.zeros((X.shape[0], known.size))
        rows[np.arange(X.shape[0]), idx] = weights
        self.classes_ = known
        self._online_step(X, rows, CRITERIA[self.criterion])
        return self

    _online_exports: ClassVar[tuple[str, ...]] = ("forest_", "leaf_posterior_")

    def _online_leaves(self, stats: np.ndarray) -> None:
        total = stats.sum(axis=1, keepdims=True)
        prior = self._online_totals / max(self._online_totals.sum(), 1e-300)
        self.leaf_posterior_ = np.where(total > 0, stats / np.maximum(total, 1e-300), prior).astype(np.float32)

    def _label_objective(self, y, n_points: int, sw: np.ndarray) -> tuple[Objective, np.ndarray]:
        """Validate labels and settings; returns the objective and class-re-weighted sample weights."""
        classes, encoded = check_labels(y, n_points)
        check_params(self)
        sw = sw * self._class_weights(classes, encoded, sw)[encoded]
        self.classes_ = classes
        return Objective.classification(encoded, classes.size, self.criterion), sw

    def _fit_leaves(self, grown, objective: Objective) -> None:
        with numba_threads(self.n_jobs):
            self.leaf_posterior_ = class_histograms(grown.order, grown.position_weights, objective.labels,
                                                    grown.leaf_start, grown.leaf_end, objective.n_classes)

    def _class_weights(self, classes: np.ndarray, encoded: np.ndarray, sw: np.ndarray) -> np.ndarray:
        cw = self.class_weight
        if cw is None:
            return np.ones(classes.size)
        if cw == "balanced":
            prior = np.bincount(encoded, weights=sw, minlength=classes.size)
            return prior.sum() / (classes.size * np.maximum(prior, 1e-300))
        if isinstance(cw, dict):
            unknown = set(cw) - set(classes.tolist())
            if unknown:
                raise InvalidInputError(f"class_weight names classes not in y: {sorted(map(str, unknown))}")
            return np.array([float(cw.get(c, 1.0)) for c in classes.tolist()])
        raise InvalidInputError(f"class_weight must be None, 'balanced' or a dict, got {cw!r}")

    # -- prediction ---------------------------------------------------------------------------------------
    def posterior_from_leaves(self, leaf_ids: np.ndarray) -> np.ndarray:
        """The class posterior (n, n_classes) float64 of points that reached the leaves `leaf_ids` (n, T), pooled
        as `posterior` says: what `predict_proba` computes after `apply`, for callers that apply themselves."""
        with numba_threads(self.n_jobs):
            if self.posterior == "product":
                return product_posterior(leaf_ids, self.leaf_posterior_, PRODUCT_FLOOR)
            return tree_average(leaf_ids, self.leaf_posterior_)

    def predict_proba(self, X) -> np.ndarray:
        """Forest posterior p(c | v), shape (n_samples, n_classes), columns in the order of `classes_`."""
        return self._posterior_of_checked(self._checked_input(X))

    def _posterior_of_checked(self, X: np.ndarray) -> np.ndarray:
        """`predict_proba` of inputs already checked: float32, C-contiguous, finite, (n, n_features_in_) (a caller
        that built them, e.g. from an image it checked, spares a pass over a matrix of hundreds of MB)."""
        if self.posterior == "average":
            with numba_threads(self.n_jobs):
                return self.family_.leaf_average(X, self.forest_, self.leaf_posterior_)
        return self.posterior_from_leaves(self._apply_checked(X))

    def predict(self, X) -> np.ndarray:
        """Most probable class per sample, shape (n_samples,)."""
        self.check_fitted()
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]

    def predict_entropy(self, X) -> np.ndarray:
        """Shannon entropy (nats) of the forest posterior per sample: the prediction's uncertainty."""
        p = self.predict_proba(X)
        with np.errstate(divide="ignore", invalid="ignore"):
            return -np.sum(np.where(p > 0, p * np.log(p), 0.0), axis=1)

    def score(self, X, y, sample_weight=None) -> float:
        """Mean (weighted) accuracy on X, y."""
        pred = self.predict(X)
        y = np.asarray(y)
        if y.shape != pred.shape:
            raise InvalidInputError(f"y must have shape {pred.shape}, got {y.shape}")
        return float(np.average(pred == y, weights=sample_weight))

    # -- model files --------------------------------------------------------------------------------------
    def leaf_arrays(self) -> dict[str, np.ndarray]:
        classes = self.classes_
        if classes.dtype.kind not in "biufU":
            classes = classes.astype(str)
        return {"leaf.posterior": self.leaf_posterior_, "classes": classes}

    def extra_metadata(self) -> dict:
        return {"classes": [c.item() if hasattr(c, "item") else c for c in self.classes_]}

    def restore_leaves(self, meta: dict, arrays: dict[str, np.ndarray]) -> None:
        post = np.ascontiguousarray(arrays["leaf.posterior"], dtype=np.float32)
        classes = arrays["classes"]
        if post.shape != (self.forest_.n_leaves, classes.size) or classes.size < 2:
            raise ModelFormatError("leaf posteriors do not match the forest's leaves and classes")
        if (not np.all(np.isfinite(post)) or np.any(post < 0) or np.any(post > 1)
                or np.any(np.abs(post.sum(axis=1) - 1.0) > 1e-3)):
            raise ModelFormatError("leaf posteriors are not probability distributions")
        self.leaf_posterior_ = post
        self.classes_ = classes
