"""SegmentationForest: the per-pixel forest of interactive segmentation, and what applying it to an image gives.

A `ClassificationForest` (axis-aligned weak learners over the features of `imageforest.apps.segment.features`)
whose model file also records the image kind, channel count and filter scales it was trained on, so that it is
applied only to images that give the same features.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from imageforest.apps.segment.features import (
    KINDS,
    PLANAR_SCALES,
    VOLUME_SCALES_MM,
    PreparedImage,
    n_features,
    prepare,
)
from imageforest.apps.segment.regularize import graph_cut
from imageforest.estimators.classification import ClassificationForest
from imageforest.estimators.params import Real, Rule
from imageforest.exceptions import InvalidInputError, ModelFormatError


@dataclass
class Segmentation:
    """One segmentation of an image.

    Attributes
    ----------
    labels : spatial shape, the scribble number each pixel was assigned (uint8, or uint16 past 255)
    probabilities : spatial shape + (K,) float32, per-class posterior, classes in `classes` order
    uncertainty : spatial shape float32, entropy of the posterior (nats; log K at most)
    classes : (K,) the scribble numbers
    timing_s : seconds per step
    """

    labels: np.ndarray
    probabilities: np.ndarray
    uncertainty: np.ndarray
    classes: np.ndarray
    timing_s: dict[str, float] = field(default_factory=dict)


def entropy(p: np.ndarray) -> np.ndarray:
    """Shannon entropy (nats) over the last axis, float32."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.sum(np.where(p > 0, p * np.log(p), 0.0), axis=-1).astype(np.float32)


def label_dtype(classes: np.ndarray) -> type:
    return np.uint8 if int(np.max(classes)) < 256 else np.uint16


# Largest graph-cut boundary weight (200 times the pictures' default): far beyond it the cut's capacities swamp the
# posterior's terms in floating point (1e300 gave NaN capacities and an all-background mask).
MAX_SMOOTHNESS = 1e4


class SegmentationForest(ClassificationForest):
    """Per-pixel classification forest for segmentation from scribbles.

    Parameters
    ----------
    n_trees, max_depth, n_candidates, min_samples_leaf, class_weight, random_state, n_jobs
        As for `ClassificationForest` (T, D, rho, leaf size, None or "balanced", seed, threads).
    smoothness : float
        Weight of the graph cut's contrast-sensitive boundary term when the forest is applied to a new image
        (`imageforest.apps.segment.regularize`); 0 gives the forest's argmax.

    Attributes
    ----------
    classes_ : (K,) the scribble numbers; image_kind_ : "grey", "rgb" or "volume"; n_channels_ : guide channels
    """

    task = "interactive-segmentation"
    parameter_constraints: ClassVar[dict[str, Rule]] = {**ClassificationForest.parameter_constraints,
                                                         "smoothness": Real(0.0, MAX_SMOOTHNESS)}
    default_candidates = "sqrt"
    weak_learner = "axis"
    n_thresholds = 16
    criterion = "entropy"
    posterior = "average"
    bootstrap = False
    max_samples = None
    min_samples_split = 2
    min_gain = 0.0
    structure = "tree"
    two_sided = False

    def __init__(self, n_trees: int = 20, *, max_depth: int | None = 12, n_candidates="sqrt",
                 min_samples_leaf: int = 3, class_weight=None, smoothness: float = 50.0, random_state=0,
                 n_jobs: int | None = None) -> None:
        self.n_trees = n_trees
        self.class_weight = class_weight
        self.max_depth = max_depth
        self.n_candidates = n_candidates
        self.min_samples_leaf = min_samples_leaf
        self.smoothness = smoothness
        self.random_state = random_state
        self.n_jobs = n_jobs

    @classmethod
    def for_kind(cls, volume: bool, **overrides) -> SegmentationForest:
        """The forest a segmentation of a picture or a volume starts from (`recipe.py`), any setting in
        `overrides` replacing the recipe's (None leaves it)."""
        from imageforest.apps.segment.recipe import PICTURE, VOLUME

        kind = VOLUME if volume else PICTURE
        settings = {name: kind[name] for name in ("max_depth", "min_samples_leaf", "class_weight")}
        settings.update({k: v for k, v in overrides.items() if v is not None and k != "n_trees"})
        n_trees = overrides.get("n_trees")
        return cls(kind["n_trees"] if n_trees is None else n_trees, **settings)

    def fit_pixels(self, prepared: PreparedImage, index: np.ndarray, labels: np.ndarray,
                   sample_weight: np.ndarray | None = None) -> SegmentationForest:
        """Grow on the pixels `index` (flat, into `prepared.features`) with scribble numbers `labels`."""
        self.fit(prepared.features[index], labels, sample_weight=sample_weight)
        self.image_kind_ = prepared.kind
        self.n_channels_ = prepared.n_channels
        return self

    def check_image(self, prepared: PreparedImage) -> None:
        """Refuse an image whose features differ from the training image's (kind, channels)."""
        self.check_fitted()
        if prepared.kind != self.image_kind_ or prepared.n_channels != self.n_channels_:
            raise InvalidInputError(f"this model was trained on {self.image_kind_} images with {self.n_channels_} "
                                    f"channel(s), not on a {prepared.kind} image with {prepared.n_channels}")

    def pixel_posterior(self, prepared: PreparedImage) -> np.ndarray:
        """(n_voxels, K) forest posterior of every voxel."""
        self.check_image(prepared)
        return self.predict_proba(prepared.features)

    def segment(self, image, spacing=None, rgb: bool | None = None) -> Segmentation:
        """Segment a new image (no scribbles): the forest's posterior, regularised by the graph cut."""
        self.check_fitted()
        prepared = image if isinstance(image, PreparedImage) else prepare(image, spacing, rgb)
        p = self.pixel_posterior(prepared).astype(np.float32)  # checks the image fits the model
        grid = p.reshape(*prepared.guide.shape[:3], -1)
        idx = graph_cut(grid, prepared.guide, prepared.spacing, float(self.smoothness))
        shape = prepared.shape
        return Segmentation(self.classes_[idx].reshape(shape).astype(label_dtype(self.classes_)),
                            p.reshape(*shape, -1), entropy(p).reshape(shape), self.classes_.copy())

    def segment_frames(self, frames, rgb: bool | None = None) -> np.ndarray:
        """Labels of every frame of a stack of pictures (or slice of a volume) segmented one by one with a model
        of pictures: frames (n, y, x) grey or (n, y, x, 3|4) colour; returns (n, y, x)."""
        self.check_fitted()
        if self.image_kind_ == "volume":
            raise InvalidInputError("this model segments volumes; give it the whole volume, not its slices")
        stack = np.asarray(frames)
        if stack.ndim not in (3, 4):
            raise InvalidInputError(f"a stack of pictures has 3 or 4 axes, got shape {stack.shape}")
        return np.stack([self.segment(frame, rgb=rgb if frame.ndim == 3 else None).labels for frame in stack])

    # -- model files --------------------------------------------------------------------------------------
    def extra_metadata(self) -> dict:
        return {**super().extra_metadata(), "image_kind": self.image_kind_, "n_channels": int(self.n_channels_)}

    def restore_leaves(self, meta: dict, arrays: dict[str, np.ndarray]) -> None:
        super().restore_leaves(meta, arrays)
        kind, channels = meta.get("image_kind"), meta.get("n_channels")
        if kind not in KINDS or not isinstance(channels, int) or not 1 <= channels <= 4:
            raise ModelFormatError("the model does not say which images it segments (image_kind, n_channels)")
        scales = VOLUME_SCALES_MM if kind == "volume" else PLANAR_SCALES
        if self.n_features_in_ != n_features(kind, channels, len(scales)):
            raise ModelFormatError(f"the model reads {self.n_features_in_} features; {kind} images with "
                                   f"{channels} channel(s) give {n_features(kind, channels, len(scales))}")
        if self.classes_.dtype.kind not in "iu" or self.classes_.min() < 1:
            raise ModelFormatError("segmentation classes must be positive scribble numbers")
        self.image_kind_, self.n_channels_ = kind, channels
