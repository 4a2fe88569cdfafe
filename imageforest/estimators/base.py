"""What every forest estimator shares: hyper-parameters, growth, `apply`, importances and model files.

scikit-learn conventions: hyper-parameters are stored as given in ``__init__``; learned state carries a trailing
underscore; `get_params`/`set_params` read the ``__init__`` signature.

The extension contract: an estimator (the engine's own, or an application's forest) subclasses `BaseForest`,
declares `task` and `parameter_constraints`, grows its trees with `grow` inside its ``fit``, and implements the
two abstract hooks that put its leaf models in a model file and take them back (`leaf_arrays`, `restore_leaves`).
The other hooks have working defaults and are overridden only where an estimator differs: `extra_metadata`,
`from_hyper_parameters`, `saved_hyper_parameters`, `check_loaded_parameters`, `check_fitted`, `global_loss`, and
the class attributes `default_candidates` and `threshold_sampling`. `imageforest.testing.check_estimator` checks
that an estimator keeps the conventions.
"""

from __future__ import annotations

import inspect
import math
import os
from abc import ABC, abstractmethod
from contextlib import contextmanager
from typing import Any, ClassVar

import numba
import numpy as np

from imageforest import __version__
from imageforest.estimators.params import GROWTH, Rule, check_params
from imageforest.exceptions import InvalidInputError, ModelFormatError, NotFittedError
from imageforest.forest.features import FeatureFamily
from imageforest.forest.objectives import Objective
from imageforest.forest.online import OnlineGrowth, OnlineSettings
from imageforest.forest.serialization import load_model, save_model
from imageforest.forest.storage import ForestArrays
from imageforest.forest.trainer import GrownForest, GrowthSettings, fused_search_applies, grow_forest
from imageforest.forest.weak_learners import KINDS, VectorFeatures
from imageforest.validation import check_matrix, check_sample_weight


@contextmanager
def numba_threads(n_jobs: int | None):
    """Run numba kernels on `n_jobs` threads (None or -1: all), restoring the previous count after."""
    previous = numba.get_num_threads()
    limit = numba.config.NUMBA_NUM_THREADS
    wanted = limit if n_jobs is None or n_jobs < 0 else max(1, min(int(n_jobs), limit))
    numba.set_num_threads(wanted)
    try:
        yield
    finally:
        numba.set_num_threads(previous)


# Arriving points whose values give a new leaf's candidate thresholds in online growth: 16 did no better than 4
# on Letter (91.6% both) and costs four times the memory per leaf.
ONLINE_SOURCES = 4


class BaseForest(ABC):
    """Shared machinery; subclasses define ``__init__`` (hyper-parameters), `fit` and the leaf models.

    Class attributes a subclass sets
    --------------------------------
    task : the model files' task name ("classification", "hough-detection", ...); a file of another task is refused
    parameter_constraints : hyper-parameter name -> `imageforest.estimators.params.Rule`, one for every ``__init__``
        parameter (`check_params` checks them at fit and at load)
    default_candidates : rho when ``n_candidates`` is left to its default ("sqrt", a count or a fraction)
    threshold_sampling : how the K candidate thresholds of a node are drawn, "range" (uniform over the node's
        responses) or "data" (among them); a hyper-parameter of that name overrides it

    The growth settings (T, D, rho, K, leaf size, bagging, ...) have class-level defaults below, so that an
    estimator's ``__init__`` declares only those its users may set; an ``__init__`` parameter overrides its
    default.
    """

    task: ClassVar[str] = ""
    parameter_constraints: ClassVar[dict[str, Rule]] = GROWTH
    default_candidates: ClassVar[Any] = "sqrt"
    threshold_sampling: ClassVar[str] = "range"

    # Growth settings an estimator does not take as hyper-parameters (the engine's estimators take them all).
    max_depth: int | None = None
    weak_learner: str = "axis"
    n_candidates: Any = "sqrt"
    n_thresholds: int | None = 16
    bootstrap: bool = False
    max_samples: Any = None
    min_samples_split: int = 2
    min_samples_leaf: int = 1
    min_gain: float = 0.0
    structure: str = "tree"
    two_sided: bool = False
    random_state: Any = None
    n_jobs: int | None = None
    # Not a hyper-parameter: a callable(str) a long fit tells after every level how far it has come (the trainers
    # of the applications set it; None says nothing).
    progress: Any = None

    # -- hyper-parameters ---------------------------------------------------------------------------------
    @classmethod
    def param_names(cls) -> list[str]:
        """The hyper-parameters' names: those ``__init__`` takes."""
        sig = inspect.signature(cls.__init__)
        return [p for p in sig.parameters if p != "self"]

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Hyper-parameters as given to ``__init__``."""
        return {name: getattr(self, name) for name in self.param_names()}

    def set_params(self, **params: Any) -> BaseForest:
        """Set hyper-parameters by name; unknown names raise ValueError."""
        valid = set(self.param_names())
        for key, value in params.items():
            if key not in valid:
                raise ValueError(f"{type(self).__name__} has no parameter {key!r}")
            setattr(self, key, value)
        return self

    _estimator_kind: ClassVar[str | None] = None  # scikit-learn's estimator type: "classifier", "regressor", ...

    def __sklearn_tags__(self):
        """scikit-learn's tags (asked for by its model selection tools, which are then installed): the estimator
        type and whether fit needs y."""
        from sklearn.base import BaseEstimator
        from sklearn.utils import ClassifierTags, RegressorTags

        tags = BaseEstimator.__sklearn_tags__(self)
        tags.estimator_type = self._estimator_kind
        tags.target_tags.required = self._estimator_kind in ("classifier", "regressor")
        if self._estimator_kind == "classifier":
            tags.classifier_tags = ClassifierTags()
        elif self._estimator_kind == "regressor":
            tags.regressor_tags = RegressorTags()
        return tags

    def __repr__(self) -> str:
        defaults = {p.name: p.default for p in inspect.signature(type(self).__init__).parameters.values()}
        shown = [f"{k}={v!r}" for k, v in self.get_params().items() if defaults.get(k) != v]
        return f"{type(self).__name__}({', '.join(shown)})"

    def _settings(self, n_features: int) -> GrowthSettings:
        """Validate hyper-parameters (`check_params` against the class's declared rules) and turn them into
        trainer settings."""
        check_params(self)
        rho = self._resolve_candidates(n_features)
        if self.n_thresholds is None and (self.structure == "fern" or self.two_sided):
            raise InvalidInputError("ferns and two-sided tests need n_thresholds (K random thresholds), not None")
        return GrowthSettings(
            n_trees=int(self.n_trees), max_depth=self.max_depth, n_candidates=rho,
            n_thresholds=self.n_thresholds, min_samples_split=int(self.min_samples_split),
            min_samples_leaf=int(self.min_samples_leaf), min_gain=float(self.min_gain),
            bootstrap=bool(self.bootstrap), max_samples=None, structure=self.structure,
            two_sided=bool(self.two_sided), threshold_sampling=self.threshold_sampling, loss=self.global_loss(),
            progress=self.progress)

    def _reads_features_only(self) -> bool:
        """Whether growth reads X only one feature at a time: axis-aligned tests outside the fused search (see
        `fused_search_applies`: every threshold, ferns, or thresholds drawn from the data). Such a fit converts X to
        feature-major float32 at once, and the trainer's feature-major copy is a view of it: one copy of the data
        instead of two."""
        return self.weak_learner == "axis" and not fused_search_applies(self.n_thresholds, self.structure,
                                                                        self.threshold_sampling)

    def global_loss(self) -> str | None:
        """Hook, called when growth starts: the global loss whose gradients re-weight the points level by level
        (alternating decision forests), or None (the default) for the usual locally grown forest."""
        return None

    def _resolve_candidates(self, n_features: int) -> int:
        """rho, the number of candidate weak-learner parameter rows tried per node."""
        value = self.n_candidates
        if isinstance(value, str):
            table = {"sqrt": math.sqrt(n_features), "log2": math.log2(max(n_features, 1)), "all": n_features}
            if value not in table:
                raise InvalidInputError(f"n_candidates must be an int, a fraction, 'sqrt', 'log2' or 'all', "
                                        f"got {value!r}")
            return max(1, round(table[value]))
        if isinstance(value, (float, np.floating)) and not isinstance(value, bool):
            if not 0.0 < value <= 1.0:
                raise InvalidInputError(f"a fractional n_candidates must lie in (0, 1], got {value}")
            return max(1, round(value * n_features))
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= 1:
            return int(value)
        raise InvalidInputError(f"n_candidates must be a positive int, a fraction, 'sqrt' or 'log2', got {value!r}")

    def _max_samples(self, n_samples: int) -> int | None:
        value = self.max_samples
        if value is None:
            return None
        if isinstance(value, (float, np.floating)):
            if not 0.0 < value <= 1.0:
                raise InvalidInputError(f"a fractional max_samples must lie in (0, 1], got {value}")
            return max(1, round(value * n_samples))
        if isinstance(value, (int, np.integer)) and 1 <= value:
            if not self.bootstrap and value > n_samples:
                raise InvalidInputError(f"max_samples={value} exceeds the {n_samples} samples (without bootstrap)")
            return int(value)
        raise InvalidInputError(f"max_samples must be a positive int or a fraction, got {value!r}")

    # -- growth -------------------------------------------------------------------------------------------
    def _grow(self, X: np.ndarray, objective: Objective, sample_weight: np.ndarray) -> GrownForest:
        """Grow on feature vectors X (n, d) with the weak learner named by `weak_learner`."""
        if self.weak_learner not in KINDS:
            raise InvalidInputError(f"weak_learner must be one of {sorted(KINDS)}, got {self.weak_learner!r}")
        family = VectorFeatures.for_data(self.weak_learner, X)
        return self.grow(family, X, X.shape[0], objective, sample_weight)

    def grow(self, family: FeatureFamily, data: Any, n_points: int, objective: Objective,
             sample_weight: np.ndarray | None = None) -> GrownForest:
        """Grow this estimator's trees on any feature family with any objective: the way applications build on
        the engine.

        The estimator's hyper-parameters (T, depth, rho, K, leaf size, bagging, structure, seed, threads) set the
        growth; the family samples weak-learner parameters and computes responses from `data`; the objective
        scores splits. Sets ``family_``, ``forest_`` and ``n_features_in_``; the caller fits its leaf models
        from the returned `GrownForest` (e.g. `GrownForest.leaf_moments`).

        Parameters
        ----------
        family : FeatureFamily
            Vectors (`VectorFeatures`), image boxes (`BoxFeatures`), depth probes, ... or an application's own.
        data : what `family.responses` reads (an array, or e.g. (image stack, points) for image families)
        n_points : number of training points in `data`
        objective : `Objective.classification`, `.regression` or `.semi_supervised` over the n_points, or
            `NodeObjectives` (several of them, one chosen per node: at random, or by depth)
        sample_weight : (n_points,) float64 or None (all ones)

        Returns
        -------
        GrownForest
            The forest's flat arrays plus each leaf's training points.
        """
        sample_weight = check_sample_weight(sample_weight, n_points)
        self.__dict__.pop("_online", None)  # a batch fit ends any online growth
        settings = self._settings(family.n_features)
        settings.max_samples = self._max_samples(n_points)
        rng = np.random.default_rng(self.random_state)
        with numba_threads(self.n_jobs):
            # `apply`'s traversal table is left to the caller (`_prepare_apply` once the working tables are freed)
            # or to the first apply
            grown = grow_forest(family, data, n_points, objective, sample_weight, settings, rng)
        self.family_ = family
        self.forest_ = grown.forest
        self.n_features_in_ = family.n_features
        return grown

    def _prepare_apply(self) -> None:
        """Build `apply`'s traversal table at the end of a fit, after the fit's working tables are freed: the fit's
        peak memory does not hold both, and a first predict pays nothing."""
        with numba_threads(self.n_jobs):
            self.family_.prepare_apply(self.forest_)

    def _prepare_fit(self, X, sample_weight, feature_major: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """X as float32 (feature-major when `feature_major`: see `_reads_features_only`) and the sample weights."""
        X = check_matrix(X, order="F" if feature_major else "C")
        self.__dict__.pop("_online", None)
        return X, check_sample_weight(sample_weight, X.shape[0])

    # -- online growth ------------------------------------------------------------------------------------
    # Attributes a `partial_fit` call leaves to be computed when first read: exporting the growing trees (and
    # completing their leaves) costs more than the update, and a stream is often read less often than it is fed.
    # An export is pending while online trees exist and `forest_` does not.
    _online_exports: ClassVar[tuple[str, ...]] = ("forest_",)

    def __getattr__(self, name: str) -> Any:
        state = self.__dict__
        if name in type(self)._online_exports and "_online" in state and "forest_" not in state:
            self._online_export()
            if name in state:
                return state[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _online_export(self) -> None:
        """Export the growing trees as this estimator's forest and leaf tables."""
        with numba_threads(self.n_jobs):
            forest, stats = self._online.export()
            self.family_.prepare_apply(forest)
        self._online_leaves(stats)
        self.forest_ = forest  # last: its presence says the export is done

    def _online_leaves(self, stats: np.ndarray) -> None:
        """Leaf tables from each leaf's statistics row (n_leaves, L); set by the subclasses that stream."""
        raise NotImplementedError

    def _online_input(self, X, sample_weight) -> tuple[np.ndarray, np.ndarray, bool]:
        """Checked inputs of a `partial_fit` call and whether it is the first (which starts the online trees)."""
        first = "_online" not in self.__dict__
        if first and hasattr(self, "forest_"):
            raise InvalidInputError(f"{type(self).__name__}.partial_fit continues a forest grown by partial_fit; "
                                    "this one was grown by fit or loaded from a file")
        X = check_matrix(X, n_features=None if first else self.n_features_in_)
        if first:
            check_params(self)
            for bad, why in ((self.weak_learner != "axis", "weak_learner='axis'"),
                             (self.structure != "tree", "structure='tree'"), (self.two_sided, "two_sided=False"),
                             (self.max_samples is not None, "max_samples=None")):
                if bad:
                    raise InvalidInputError(f"{type(self).__name__}.partial_fit needs {why}")
        return X, check_sample_weight(sample_weight, X.shape[0]), first

    def _online_step(self, X: np.ndarray, rows: np.ndarray, criterion: int) -> None:
        """Let the online trees (started at the first call) see X (n, d) with statistics rows (n, L); the forest
        and leaf tables are exported when next read."""
        state = self.__dict__.get("_online")
        if state is None:
            rho = self._resolve_candidates(X.shape[1])
            settings = OnlineSettings(
                n_trees=int(self.n_trees), n_candidates=rho, n_sources=ONLINE_SOURCES,
                min_points=max(int(self.online_min_samples), int(self.min_samples_split)),
                min_samples_leaf=int(self.min_samples_leaf), min_gain=float(self.min_gain), max_depth=self.max_depth,
                criterion=criterion, bagging=bool(self.bootstrap), memory=int(self.online_memory),
                n_thresholds=0 if self.n_thresholds is None else int(self.n_thresholds))
            state = OnlineGrowth(settings, X.shape[1], rows.shape[1], np.random.default_rng(self.random_state))
            self._online = state
            self._online_totals = np.zeros(rows.shape[1])
            self.family_ = VectorFeatures("axis", X.shape[1])
            self.n_features_in_ = X.shape[1]
        with numba_threads(self.n_jobs):
            state.update(X, rows)
        self._online_totals += rows.sum(axis=0)
        for name in type(self)._online_exports:
            self.__dict__.pop(name, None)

    # -- the one primitive --------------------------------------------------------------------------------
    def check_fitted(self) -> None:
        """Hook, called before any use of a fitted model (predict, apply, save): raise NotFittedError when the
        model is not fitted. The default looks for ``forest_``."""
        if not hasattr(self, "forest_"):
            raise NotFittedError(f"this {type(self).__name__} is not fitted yet; call fit (or load) first")

    def _checked_input(self, X) -> np.ndarray:
        self.check_fitted()
        return check_matrix(X, n_features=self.n_features_in_)

    def _apply_checked(self, X: np.ndarray) -> np.ndarray:
        with numba_threads(self.n_jobs):
            return self.family_.apply(X, self.forest_)

    def apply(self, X) -> np.ndarray:
        """Forest-wide leaf id reached by each sample in each tree.

        Parameters
        ----------
        X : (n_samples, n_features) array

        Returns
        -------
        (n_samples, n_trees) int32; ids index the leaf-model arrays (``leaf_tree_`` gives each leaf's tree).
        """
        return self._apply_checked(self._checked_input(X))

    @property
    def n_trees_(self) -> int:
        self.check_fitted()
        return self.forest_.n_trees

    @property
    def leaf_tree_(self) -> np.ndarray:
        self.check_fitted()
        return self.forest_.leaf_tree

    @property
    def feature_importances_(self) -> np.ndarray:
        """Gain-based importances: each split's information gain times the share of its tree's training weight
        that reached it, credited to the input dimensions its weak learner reads; normalised to sum to 1."""
        self.check_fitted()
        f = self.forest_
        split = np.flatnonzero(f.child >= 0)
        root_w = f.weight[f.tree_root]
        tree_of_node = f.node_tree()
        contrib = f.gain[split] * f.weight[split] / root_w[tree_of_node[split]]
        dims, share = self.family_.importance_dims(f.params[split])
        imp = np.zeros(self.family_.n_features)
        np.add.at(imp, dims.ravel(), (share * contrib[:, None]).ravel())
        total = imp.sum()
        return imp / total if total > 0 else imp

    # -- model files --------------------------------------------------------------------------------------
    @abstractmethod
    def leaf_arrays(self) -> dict[str, np.ndarray]:
        """Hook, called by `to_record` (and so `save`): the leaf models as named flat arrays (names without "/"),
        which `restore_leaves` reads back."""

    @abstractmethod
    def restore_leaves(self, meta: dict, arrays: dict[str, np.ndarray]) -> None:
        """Hook, called by `from_record` (and so `load`) after the forest, the feature family and the
        hyper-parameters are restored: check the leaf arrays `leaf_arrays` wrote (shapes, dtypes, finite values,
        ranges; raise ModelFormatError naming what is wrong) and set the fitted leaf attributes from them and from
        `extra_metadata`'s entries in `meta`."""

    def extra_metadata(self) -> dict:
        """Hook, called by `to_record`: JSON-able metadata entries beyond the engine's (classes, names, a model
        card); `restore_leaves` finds them in its `meta`. The default adds none."""
        return {}

    def save(self, path: str | os.PathLike) -> None:
        """Write the fitted model to `path` (.npz with JSON metadata; atomic)."""
        save_model(path, *self.to_record())

    def to_record(self) -> tuple[dict, dict[str, np.ndarray]]:
        """The fitted model as (metadata, arrays): what `save` writes, and one forest of a file of several
        (`imageforest.estimators.files.save_forests`)."""
        self.check_fitted()
        spec, fam_arrays = self.family_.to_spec()
        params = self.saved_hyper_parameters()
        meta = {
            "task": self.task,
            "estimator": type(self).__name__,
            "imageforest_version": __version__,
            "family": spec,
            "hyper_parameters": params,
            "n_features_in": int(self.n_features_in_),
            **self.extra_metadata(),
        }
        return meta, {**self.forest_.to_arrays(), **fam_arrays, **self.leaf_arrays()}

    @classmethod
    def from_hyper_parameters(cls, hyper: dict, meta: dict) -> BaseForest:
        """Hook, called by `from_record`: an unfitted estimator from the saved hyper-parameters `hyper` (those
        ``__init__`` takes) and the file's metadata. Override to turn JSON values back into what ``__init__``
        takes (lists into tuples, a spec into a feature family)."""
        return cls(**hyper)

    def saved_hyper_parameters(self) -> dict:
        """Hook, called by `to_record`: the hyper-parameters as JSON values for the metadata. n_jobs (how this
        machine ran) is left out so that the bytes depend on the seed alone; a Generator random_state is recorded as
        None."""
        params = {k: v for k, v in self.get_params().items() if k != "n_jobs"}
        if not isinstance(self.random_state, (int, type(None))):
            params["random_state"] = None
        return _jsonable(params)

    def check_loaded_parameters(self) -> None:
        """Hook, called by `from_record` before `restore_leaves`: hyper-parameters read from a file obey the same
        rules as a user's (a crafted file gets no further). The default runs `check_params`."""
        check_params(self)

    @classmethod
    def load(cls, path: str | os.PathLike) -> BaseForest:
        """Read a model written by `save`; a damaged, foreign or other-task file raises ModelFormatError."""
        meta, arrays = load_model(path)
        return cls.from_record(meta, arrays, str(path))

    @classmethod
    def from_record(cls, meta: dict, arrays: dict[str, np.ndarray], source: str = "model") -> BaseForest:
        """The model `to_record` gave (metadata, arrays), validated; `source` names it in error messages (a file,
        or a forest of a file of several). Anything inconsistent raises ModelFormatError."""
        if meta.get("task") != cls.task or meta.get("estimator") != cls.__name__:
            found = (f"a {meta['estimator']} model ({meta.get('task')})" if isinstance(meta.get("estimator"), str)
                     else "no model this library names")
            raise ModelFormatError(f"{source}: holds {found}, not a {cls.__name__}")
        if not isinstance(meta.get("hyper_parameters"), dict) or not isinstance(meta.get("family"), dict):
            raise ModelFormatError(f"{source}: its metadata's hyper_parameters and family must be mappings")
        try:
            hyper = {k: v for k, v in meta["hyper_parameters"].items() if k in cls.param_names()}
            est = cls.from_hyper_parameters(hyper, meta)
            forest = ForestArrays.from_arrays(arrays)
            family = family_from_spec(meta["family"], arrays)
            if not family.validate_params(forest.params):
                raise ModelFormatError(f"{source}: a node reads a feature the model does not have")
            est.forest_ = forest
            est.family_ = family
            est.n_features_in_ = int(meta["n_features_in"])
            est.check_loaded_parameters()
            est.restore_leaves(meta, arrays)
            with numba_threads(est.n_jobs):
                family.prepare_apply(forest)
        except ModelFormatError as exc:
            message = str(exc)
            raise ModelFormatError(message if message.startswith(source) else f"{source}: {message}") from None
        except (KeyError, TypeError, ValueError, AttributeError, InvalidInputError) as exc:
            raise ModelFormatError(f"{source}: inconsistent model file ({exc})") from None
        return est


def _jsonable(value: Any) -> Any:
    """Hyper-parameters as plain JSON values (numpy scalars to Python, dict keys to strings)."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def family_from_spec(spec: dict, arrays: dict[str, np.ndarray]) -> FeatureFamily:
    """Rebuild the feature family a model file names (vectors, image boxes, depth probes, pixel pairs)."""
    name = spec.get("name")
    if name == VectorFeatures.name:
        return VectorFeatures.from_spec(spec, arrays)
    from imageforest.imaging.features import BoxFeatures, DepthProbes  # imaging is optional for vector models
    from imageforest.imaging.pixel_pairs import PixelPairs

    for family in (BoxFeatures, DepthProbes, PixelPairs):
        if name == family.name:
            return family.from_spec(spec, arrays)
    raise ModelFormatError(f"unknown feature family {name!r}")


class UnsupervisedForestBase(BaseForest):
    """Shared by the density, manifold and semi-supervised forests: trees grown with the Gaussian gain over the
    inputs, one-sided tests (their cells must be boxes or half-spaces), and the leaves' input Gaussians."""

    structure = "tree"
    two_sided = False

    def _input_gaussians(self, grown: GrownForest, X64: np.ndarray, objective: Objective
                         ) -> tuple[np.ndarray, np.ndarray]:
        """Mean (n_leaves, d) and covariance (n_leaves, d, d) of the inputs in every leaf, with the gain's
        variance floor on the diagonal so that every leaf Gaussian is proper."""
        from imageforest.forest.leaf_models import gaussian_leaves

        with numba_threads(self.n_jobs):
            return gaussian_leaves(grown.order, grown.position_weights, X64, grown.leaf_start, grown.leaf_end,
                                   np.full(X64.shape[1], objective.reg[0]))
