"""Forests over images: train on images plus labelled points, apply to every pixel or voxel of a new image.

The same engine as `ClassificationForest` (trainer, storage, `apply`, leaf models); only the feature family
differs, and features are computed lazily from the images inside training and prediction.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from imageforest.estimators.base import numba_threads
from imageforest.estimators.classification import ClassificationForest
from imageforest.estimators.mixture import ForestGaussianMixture
from imageforest.estimators.params import Anything, Options, Rule, check_params
from imageforest.estimators.regression import RegressionForest
from imageforest.exceptions import InvalidInputError
from imageforest.forest.features import FeatureFamily
from imageforest.forest.objectives import Objective
from imageforest.imaging.features import BoxFeatures, check_points
from imageforest.imaging.io import Image
from imageforest.validation import check_sample_weight, check_targets


def all_points(image_index: int, shape: tuple[int, ...], mask: np.ndarray | None = None) -> np.ndarray:
    """Every voxel (or every voxel where `mask`) of an image as (n, 4) int32 points (image, z, y, x)."""
    shape3 = (1, *shape) if len(shape) == 2 else tuple(shape)
    if mask is None:
        zz, yy, xx = np.unravel_index(np.arange(int(np.prod(shape3))), shape3)
    else:
        m = np.asarray(mask, dtype=bool).reshape(shape3)
        zz, yy, xx = np.nonzero(m)
    return np.ascontiguousarray(np.c_[np.full(zz.size, image_index), zz, yy, xx], dtype=np.int32)


def per_voxel_image(image, mask, width: int, predict, note: str) -> Image:
    """`predict(image, points)` (n, width) for every pixel or voxel (or those in `mask`; others get 0), as an image
    with the input's geometry: array (y, x, width) or (z, y, x, width), float32."""
    img = image if isinstance(image, Image) else Image(np.asarray(image), np.ones(np.ndim(image)),
                                                      np.zeros(np.ndim(image)), np.eye(np.ndim(image)))
    shape = img.array.shape[: img.ndim]
    if mask is not None and np.shape(mask) != shape:
        raise InvalidInputError(f"mask shape {np.shape(mask)} differs from the image's {shape}")
    pts = all_points(0, shape, mask)
    out = np.zeros((int(np.prod(shape)), width), dtype=np.float32)
    if pts.shape[0]:
        flat = np.ravel_multi_index(tuple(pts[:, k] for k in (1, 2, 3)), (1, *shape) if len(shape) == 2 else shape)
        out[flat] = predict(img, pts)
    return Image(out.reshape(*shape, width), img.spacing.copy(), img.origin.copy(), img.direction.copy(),
                 source=img.source, notes=[*img.notes, note])


class _ImageInputs:
    """What both image forests share: a feature family as their first parameter (saved as the model's family
    spec, not as a hyper-parameter) and inputs given as images plus voxel points."""

    features: FeatureFamily | None

    def saved_hyper_parameters(self) -> dict:
        params = super().saved_hyper_parameters()
        params.pop("features", None)  # stored as the family spec
        return params

    @classmethod
    def from_hyper_parameters(cls, hyper: dict, meta: dict):
        return cls(**{k: v for k, v in hyper.items() if k != "features"})

    def restore_leaves(self, meta: dict, arrays: dict) -> None:
        super().restore_leaves(meta, arrays)
        # the family the file describes is the `features` this model was given: a clone of a loaded model then
        # grows on the same features, not on the default boxes
        self.features = self.family_

    def feature_family(self) -> FeatureFamily:
        """Hook, called by `fit`: the feature family to grow on, `features` or, when None, the forest's default
        (box features here; an application's forest may choose another)."""
        return self.features if self.features is not None else BoxFeatures()

    def _data(self, family: FeatureFamily, images, points) -> tuple[tuple, int]:
        stack = family.prepare(images)
        pts = check_points(points, stack)
        return (stack, pts), pts.shape[0]

    def apply(self, images, points) -> np.ndarray:  # type: ignore[override]
        """Leaf ids (n_points, n_trees) of the given points."""
        self.check_fitted()
        data, _ = self._data(self.family_, images, points)
        with numba_threads(self.n_jobs):
            return self.family_.apply(data, self.forest_)


class ImageClassificationForest(_ImageInputs, ClassificationForest):
    """Per-pixel / per-voxel classification with lazily evaluated image features (Criminisi et al. 2012, sec. 3.6).

    Parameters
    ----------
    features : FeatureFamily
        `BoxFeatures` (displaced boxes or box differences in mm) or `DepthProbes` (eq. 3.2).
    other parameters
        As for `ClassificationForest`; `n_candidates` (rho) defaults to 100 feature draws per node.

    Examples
    --------
    >>> forest = ImageClassificationForest(DepthProbes(max_offset=1e6), n_trees=3, max_depth=20)
    >>> forest.fit(depth_maps, points, labels)          # points: (n, 3) = (image, y, x)
    >>> posterior = forest.predict_proba_image(new_depth_map)   # Image (y, x, n_classes)
    """

    task = "image-classification"
    parameter_constraints: ClassVar[dict[str, Rule]] = {**ClassificationForest.parameter_constraints,
                                                         "features": Anything()}

    def __init__(self, features: FeatureFamily | None = None, *, n_trees: int = 20, max_depth: int | None = 20,
                 n_candidates=100, n_thresholds: int | None = 16, criterion: str = "entropy", class_weight=None,
                 posterior: str = "average", bootstrap: bool = False, max_samples=None, min_samples_split: int = 2,
                 min_samples_leaf: int = 1, min_gain: float = 0.0, structure: str = "tree",
                 two_sided: bool = False, random_state=None, n_jobs: int | None = None) -> None:
        super().__init__(n_trees=n_trees, max_depth=max_depth, weak_learner="axis", n_candidates=n_candidates,
                         n_thresholds=n_thresholds, criterion=criterion, class_weight=class_weight,
                         posterior=posterior, bootstrap=bootstrap, max_samples=max_samples,
                         min_samples_split=min_samples_split, min_samples_leaf=min_samples_leaf, min_gain=min_gain,
                         structure=structure, two_sided=two_sided, random_state=random_state, n_jobs=n_jobs)
        self.features = features

    def fit(self, images, points, labels, sample_weight=None) -> ImageClassificationForest:
        """Grow the forest on labelled points of images.

        Parameters
        ----------
        images : Image, array, or a list of them (2-D (y, x) or 3-D (z, y, x), scalar)
        points : (n, 4) int (image, z, y, x) or (n, 3) int (image, y, x) voxel indices
        labels : (n,) class labels
        """
        family = self.feature_family()
        data, n = self._data(family, images, points)
        sw = check_sample_weight(sample_weight, n)
        objective, sw = self._label_objective(labels, n, sw)
        self._fit_leaves(self.grow(family, data, n, objective, sw), objective)
        return self

    def predict_proba(self, images, points) -> np.ndarray:  # type: ignore[override]
        """Posterior p(c | point), (n_points, n_classes)."""
        return self.posterior_from_leaves(self.apply(images, points))

    def predict(self, images, points) -> np.ndarray:  # type: ignore[override]
        return self.classes_[np.argmax(self.predict_proba(images, points), axis=1)]

    def predict_proba_image(self, image, mask=None) -> Image:
        """Posterior of every pixel or voxel (or those in `mask`; others get 0) as an image with the input's
        geometry: array (y, x, n_classes) or (z, y, x, n_classes), float32."""
        return per_voxel_image(image, mask, self.classes_.size, self.predict_proba, "class posteriors")

    def predict_image(self, image, mask=None) -> Image:
        """Most probable class index (into `classes_`) per pixel or voxel, as a uint8/uint16 label image."""
        post = self.predict_proba_image(image, mask)
        labels = np.argmax(post.array, axis=-1).astype(np.uint8 if self.classes_.size < 256 else np.uint16)
        return Image(labels, post.spacing, post.origin, post.direction, source=post.source)


class ImageRegressionForest(_ImageInputs, RegressionForest):
    """Per-pixel / per-voxel probabilistic regression with lazily evaluated image features (Criminisi et al.
    2012, ch. 4): leaves hold Gaussians of the targets (offsets to a landmark, a depth, a joint, ...).

    Parameters
    ----------
    features : FeatureFamily
        `BoxFeatures` or `DepthProbes`.
    leaf_model : {"constant", "gaussian"}
        Leaf mean, or mean and covariance (probabilistic-linear leaves need feature vectors, which image features
        are not).
    other parameters
        As for `RegressionForest`; `n_candidates` (rho) defaults to 100 feature draws per node.

    Examples
    --------
    >>> forest = ImageRegressionForest(BoxFeatures(max_offset_mm=60, box_size_mm=(3, 30)), n_trees=10)
    >>> forest.fit([ct], points, offsets_mm)            # points (n, 4) = (image, z, y, x); offsets (n, q)
    >>> forest.predict_distribution([ct], points).std() # the forest's Gaussian mixture p(y | point)
    """

    task = "image-regression"
    parameter_constraints: ClassVar[dict[str, Rule]] = {
        **RegressionForest.parameter_constraints, "features": Anything(),
        "leaf_model": Options(choices=("constant", "gaussian"))}

    def __init__(self, features: FeatureFamily | None = None, *, n_trees: int = 20, max_depth: int | None = 20,
                 n_candidates=100, n_thresholds: int | None = 16, criterion: str = "gaussian",
                 leaf_model: str = "gaussian", bootstrap: bool = False, max_samples=None, min_samples_split: int = 2,
                 min_samples_leaf: int = 1, min_gain: float = 0.0, structure: str = "tree",
                 two_sided: bool = False, random_state=None, n_jobs: int | None = None) -> None:
        super().__init__(n_trees=n_trees, max_depth=max_depth, weak_learner="axis", n_candidates=n_candidates,
                         n_thresholds=n_thresholds, criterion=criterion, leaf_model=leaf_model, bootstrap=bootstrap,
                         max_samples=max_samples, min_samples_split=min_samples_split,
                         min_samples_leaf=min_samples_leaf, min_gain=min_gain, structure=structure,
                         two_sided=two_sided, random_state=random_state, n_jobs=n_jobs)
        self.features = features

    def fit(self, images, points, targets, sample_weight=None) -> ImageRegressionForest:
        """Grow the forest on points of images with targets (n,) or (n, q).

        Parameters
        ----------
        images : Image, array, or a list of them
        points : (n, 4) int (image, z, y, x) or (n, 3) int (image, y, x) voxel indices
        targets : (n,) or (n, q) float
        """
        family = self.feature_family()
        data, n = self._data(family, images, points)
        sw = check_sample_weight(sample_weight, n)
        Y = check_targets(targets, n)
        check_params(self)
        objective = Objective.regression(Y, self.criterion)
        self._fit_leaves(self.grow(family, data, n, objective, sw), Y, None, np.ndim(targets) == 1)
        return self

    def predict(self, images, points) -> np.ndarray:  # type: ignore[override]
        """E[y | point]: (n,) for 1-D training targets, else (n, q)."""
        leaves = self.apply(images, points)
        mean = self.leaf_mean_[leaves].mean(axis=1)
        return mean[:, 0] if self._y_1d else mean

    def predict_distribution(self, images, points) -> ForestGaussianMixture:  # type: ignore[override]
        """The forest's p(y | point): a mixture of one Gaussian per tree."""
        if self.leaf_model == "constant":
            raise InvalidInputError("leaf_model='constant' keeps no variance; fit with 'gaussian' to get p(y|x)")
        leaves = self.apply(images, points)
        return ForestGaussianMixture(np.ascontiguousarray(self.leaf_mean_[leaves]),
                                     np.ascontiguousarray(self.leaf_cov_[leaves]))

    def predict_image(self, image, mask=None) -> Image:
        """E[y] of every pixel or voxel (or those in `mask`; others 0) with the input's geometry: array
        (y, x, q) or (z, y, x, q), float32."""
        self.check_fitted()

        def mean(img, pts):
            return self.leaf_mean_[self.apply(img, pts)].mean(axis=1)

        return per_voxel_image(image, mask, self.n_outputs_, mean, "regression means")

    def score(self, images, points, targets) -> float:  # type: ignore[override]
        """Coefficient of determination R^2 (averaged over outputs)."""
        pred = self.predict(images, points).reshape(len(points), -1)
        Y = check_targets(targets, pred.shape[0])
        ss_res = np.sum((Y - pred) ** 2, axis=0)
        ss_tot = np.sum((Y - Y.mean(axis=0)) ** 2, axis=0)
        return float(np.mean(np.where(ss_tot > 0, 1.0 - ss_res / np.where(ss_tot > 0, ss_tot, 1.0), 0.0)))
