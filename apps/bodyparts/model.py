"""BodyPartsForest: per-pixel body-part classification from depth with joint proposals (Shotton et al., CVPR 2011).

An `ImageClassificationForest` over depth-difference probes (Criminisi et al. 2012, eq. 3.2) whose model file also
records what the parts are called, the focal length of the training images (probes are rescaled for a camera with
another focal length, so that a probe reaches as far in millimetres) and how joints are proposed from the parts.

References
----------
J. Shotton, A. Fitzgibbon, M. Cook, T. Sharp, M. Finocchio, R. Moore, A. Kipman, A. Blake, "Real-time human pose
recognition in parts from single depth images", CVPR 2011.
A. Criminisi, J. Shotton, E. Konukoglu, "Decision forests: a unified framework for classification, regression,
density estimation, manifold learning and semi-supervised learning", 2012, sec. 3.6.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from imageforest.apps.bodyparts.depth import Camera, check_depth
from imageforest.apps.bodyparts.joints import JointProposal, propose_joints, smooth_posteriors
from imageforest.estimators.base import numba_threads
from imageforest.estimators.params import Options, Real, Rule
from imageforest.exceptions import InvalidInputError, ModelFormatError
from imageforest.imaging.features import DepthProbes, ImageStack
from imageforest.imaging.forests import ImageClassificationForest, all_points

MAX_PARTS = 64
THRESHOLD_SAMPLINGS = ("data", "range")  # how a candidate probe's thresholds are drawn (BodyPartsForest)


@dataclass
class BodyParts:
    """What one depth map gives.

    Attributes
    ----------
    labels : (height, width) uint8, part number (1..K as in `part_names`), 0 = background
    probabilities : (height, width, K) float32 part posteriors (0 on background), or None when not asked for
    joints : joint name -> proposals, most confident first
    camera : the intrinsics used for the 3-D positions
    timing_s : seconds per step
    """

    labels: np.ndarray
    probabilities: np.ndarray | None
    joints: dict[str, list[JointProposal]]
    camera: Camera
    timing_s: dict[str, float] = field(default_factory=dict)


def stack_depths(depths: list[np.ndarray]) -> ImageStack:
    """Depth maps (height, width) mm, each checked (`check_depth`), in one float32 `ImageStack` for training.

    Raises
    ------
    InvalidInputError
        A map that is not a depth map, or none given.
    """
    return DepthProbes().prepare([check_depth(d, f"depth map {k}") for k, d in enumerate(depths)])


class BodyPartsForest(ImageClassificationForest):
    """Body (or hand) parts from a depth map, every pixel, with joint proposals.

    The defaults are the settings of the shipped body model (`recipe.py`), its seed aside.

    Parameters
    ----------
    features : DepthProbes
        The probe family (offsets in pixels x mm; default reaches 0.6 m at the training focal length).
    n_trees, max_depth, n_candidates, class_weight, min_samples_leaf, random_state, n_jobs
        As for `ImageClassificationForest` (T, D, rho, ...).
    max_samples : int, float or None
        Pixels each tree grows on, drawn without replacement (a count or a share of the training pixels; None: all).
        Shotton et al. train every tree on its own random images: at the same fit time per tree, the trees see
        more bodies between them.
    threshold_sampling : {"data", "range"}
        How a candidate probe's 16 thresholds are drawn: "data", the responses of 16 random pixels of the node;
        "range", uniform over the node's [min, max]. A probe off the body reads the background (1e6 mm), so a
        node's responses span about 2e6 mm while differences between body pixels span a few hundred: uniform draws
        mostly fall in the gap between them. "data" gives the rendered bodies +0.04 mean per-part accuracy; the
        hands of hand-depth-parts do better with "range".
    bandwidth_mm : float
        Width of the mean-shift kernel over 3-D body points for joint proposals.
    vote_threshold : float
        Least part probability with which a pixel votes for a joint.
    smoothing_mm : float
        Half-width, on the body, of the window over which part posteriors are averaged before the argmax (a square
        of about this many mm at the body's median depth; 0 keeps every pixel's own posterior). Neighbouring
        pixels' trees read other probes, so their average is a better estimate than one pixel's.

    Attributes (after `fit_parts`)
    ----------
    part_names_ : list of K names, part k + 1 first; focal_px_ : focal length of the training maps (px);
    joint_parts_ : joint name -> part numbers; push_mm_ : joint name -> depth from surface mode to joint (mm);
    model_card_ : what the model is (name, training data, measured accuracy), saved with it
    """

    task = "body-parts"
    parameter_constraints: ClassVar[dict[str, Rule]] = {**ImageClassificationForest.parameter_constraints,
                                                         "bandwidth_mm": Real(1.0, 1000.0),
                                                         "vote_threshold": Real(0.0, 1.0),
                                                         "smoothing_mm": Real(0.0, 1e4),
                                                         "threshold_sampling": Options(choices=THRESHOLD_SAMPLINGS)}

    def __init__(self, features: DepthProbes | None = None, *, n_trees: int = 3, max_depth: int | None = 20,
                 n_candidates=400, class_weight="balanced", min_samples_leaf: int = 24, max_samples=1 / 3,
                 bandwidth_mm: float = 65.0, vote_threshold: float = 0.14, smoothing_mm: float = 30.0,
                 threshold_sampling: str = "data", random_state=None, n_jobs: int | None = None) -> None:
        super().__init__(features, n_trees=n_trees, max_depth=max_depth, n_candidates=n_candidates,
                         class_weight=class_weight, min_samples_leaf=min_samples_leaf, max_samples=max_samples,
                         random_state=random_state, n_jobs=n_jobs)
        self.bandwidth_mm = bandwidth_mm
        self.vote_threshold = vote_threshold
        self.smoothing_mm = smoothing_mm
        self.threshold_sampling = threshold_sampling

    def feature_family(self) -> DepthProbes:
        return self.features if self.features is not None else DepthProbes(max_offset=0.6 * 1000 * 285.0)

    def fit_parts(self, depths: list[np.ndarray] | ImageStack, points: np.ndarray, labels: np.ndarray,
                  part_names: list[str], focal_px: float, joint_parts: dict[str, list[int]] | None = None,
                  push_mm: dict[str, float] | None = None) -> BodyPartsForest:
        """Grow on labelled pixels of depth maps.

        Parameters
        ----------
        depths : depth maps (height, width) mm, 0 = background; or their `ImageStack` (`stack_depths`), which
            holds every map once however many are trained on
        points : (n, 3) int (map index, y, x) of the training pixels
        labels : (n,) part numbers 1..K
        part_names : K names (part k + 1 first)
        focal_px : focal length (px) of the training maps
        joint_parts : joint name -> part numbers (default: every part is its own joint, at its centre)
        push_mm : joint name -> depth from a surface mode to the joint (mm; default 0)
        """
        labels = np.asarray(labels)
        if not 2 <= len(part_names) <= MAX_PARTS:
            raise InvalidInputError(f"between 2 and {MAX_PARTS} parts, got {len(part_names)}")
        if labels.size and (labels.min() < 1 or labels.max() > len(part_names)):
            raise InvalidInputError(f"part numbers must be 1..{len(part_names)}")
        if not (np.isfinite(focal_px) and focal_px > 0):
            raise InvalidInputError(f"the focal length must be positive, got {focal_px}")
        if not isinstance(depths, ImageStack):
            depths = stack_depths(depths)
        elif not (np.all(np.isfinite(depths.table)) and np.all(depths.table >= 0)):
            raise InvalidInputError("depth holds NaN, infinite or negative values; use 0 for missing pixels")
        self.fit(depths, points, labels)
        self.part_names_ = list(part_names)
        self.focal_px_ = float(focal_px)
        self.joint_parts_ = (dict(joint_parts) if joint_parts is not None
                             else {name: [k + 1] for k, name in enumerate(part_names)})
        self.push_mm_ = {j: float((push_mm or {}).get(j, 0.0)) for j in self.joint_parts_}
        self.model_card_: dict = {}
        self._check_parts()
        return self

    # -- applying ------------------------------------------------------------------------------------------
    def _scaled_family(self, camera: Camera) -> DepthProbes:
        family = self.family_
        scale = camera.fx / self.focal_px_
        if scale == 1.0:
            return family
        cached = getattr(self, "_scaled", None)
        if cached is None or cached[0] is not family or cached[1].offset_scale != scale:
            scaled = copy.copy(family)  # kept: a camera's frames come one after another with one focal length
            scaled.offset_scale = scale
            self._scaled = cached = (family, scaled)
        return cached[1]

    def _raw_posteriors(self, depth: np.ndarray, camera: Camera) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each body pixel's own posterior (n, K) float32, its (n, 2) (y, x) and depth (n,) mm, of a checked map."""
        pts = all_points(0, depth.shape, depth > 0)
        stack = ImageStack.from_images([depth], integral=False)
        with numba_threads(self.n_jobs):
            leaves = self._scaled_family(camera).apply((stack, pts), self.forest_)
        post = self.posterior_from_leaves(leaves)
        if post.shape[1] != len(self.part_names_):  # parts never seen in training keep 0
            full = np.zeros((post.shape[0], len(self.part_names_)), dtype=np.float32)
            full[:, self.classes_.astype(np.int64) - 1] = post
            post = full
        yx = pts[:, 2:4]
        return post.astype(np.float32, copy=False), yx, depth[yx[:, 0], yx[:, 1]]

    def _averaged(self, post: np.ndarray, yx: np.ndarray, z: np.ndarray, camera: Camera) -> np.ndarray:
        """The posteriors averaged over `smoothing_mm` of body: a window of that half-width at the median depth."""
        if self.smoothing_mm <= 0 or z.size == 0:
            return post
        radius = min(round(float(self.smoothing_mm) * camera.fx / float(np.median(z))), 64)
        return smooth_posteriors(post, yx, radius) if radius > 0 else post

    def _prepared(self, depth, camera: Camera | None) -> tuple[np.ndarray, Camera]:
        self.check_fitted()
        depth = check_depth(depth)
        return depth, (camera or Camera.kinect(depth.shape[1], depth.shape[0])).checked(depth.shape)

    def body_posteriors(self, depth: np.ndarray, camera: Camera | None = None, *,
                        smooth: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Part posteriors of the body pixels only, averaged over `smoothing_mm` unless `smooth` is False:
        (n, K) float32 (column k = part k + 1) and (n, 2) (y, x)."""
        depth, camera = self._prepared(depth, camera)
        post, yx, z = self._raw_posteriors(depth, camera)
        return (self._averaged(post, yx, z, camera) if smooth else post), yx

    def _on_grid(self, post: np.ndarray, yx: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
        out = np.zeros((*shape, len(self.part_names_)), dtype=np.float32)
        out[yx[:, 0], yx[:, 1]] = post
        return out

    def part_probabilities(self, depth: np.ndarray, camera: Camera | None = None) -> np.ndarray:
        """(height, width, K) float32 part posteriors of every pixel (0 on background)."""
        depth, camera = self._prepared(depth, camera)
        post, yx, z = self._raw_posteriors(depth, camera)
        return self._on_grid(self._averaged(post, yx, z, camera), yx, depth.shape)

    def parse(self, depth, camera: Camera | None = None, *, probabilities: bool = False,
              joints: bool = True) -> BodyParts:
        """Parts of every body pixel of one depth map, and joint proposals.

        Parameters
        ----------
        depth : (height, width) mm, 0 = background
        camera : intrinsics (default: Kinect-like for the map's size)
        probabilities : keep the (height, width, K) posteriors in the result
        joints : propose joints (mean shift; skipped when False)
        """
        t0 = time.perf_counter()
        depth, camera = self._prepared(depth, camera)
        raw, yx, z = self._raw_posteriors(depth, camera)
        post = self._averaged(raw, yx, z, camera)
        labels = np.zeros(depth.shape, dtype=np.uint8)
        labels[yx[:, 0], yx[:, 1]] = np.argmax(post, axis=1) + 1
        t1 = time.perf_counter()
        found = {}
        if joints:  # from each pixel's own posterior: averaging blurs the small parts that joints need
            found = propose_joints(raw, yx, z, camera, self.joint_parts_, self.push_mm_,
                                   bandwidth_mm=float(self.bandwidth_mm), threshold=float(self.vote_threshold))
        t2 = time.perf_counter()
        full = self._on_grid(post, yx, depth.shape) if probabilities else None
        return BodyParts(labels, full, found, camera, {"parts": t1 - t0, "joints": t2 - t1})

    # -- model files ---------------------------------------------------------------------------------------
    def _check_parts(self) -> None:
        k = len(self.part_names_)
        if self.classes_.dtype.kind not in "iu" or self.classes_.min() < 1 or self.classes_.max() > k:
            raise ModelFormatError(f"part numbers must be 1..{k}")
        for joint, parts in self.joint_parts_.items():
            if not parts or any(not isinstance(p, int) or not 1 <= p <= k for p in parts):
                raise ModelFormatError(f"joint {joint!r} votes with parts {parts}, not parts 1..{k}")
        if any(not np.isfinite(v) or abs(v) > 500.0 for v in self.push_mm_.values()):
            raise ModelFormatError("a joint's push from the surface must be finite and under 500 mm")

    def extra_metadata(self) -> dict:
        return {**super().extra_metadata(), "part_names": self.part_names_, "focal_px": self.focal_px_,
                "joint_parts": self.joint_parts_, "push_mm": self.push_mm_,
                "model_card": getattr(self, "model_card_", {})}

    def restore_leaves(self, meta: dict, arrays: dict[str, np.ndarray]) -> None:
        super().restore_leaves(meta, arrays)
        names, focal = meta.get("part_names"), meta.get("focal_px")
        joints, push = meta.get("joint_parts"), meta.get("push_mm")
        if (not isinstance(names, list) or not 2 <= len(names) <= MAX_PARTS
                or not all(isinstance(n, str) for n in names)):
            raise ModelFormatError("the model does not name its parts (part_names)")
        if not isinstance(focal, (int, float)) or not 1.0 <= focal <= 1e5:
            raise ModelFormatError("the model's training focal length (focal_px) is missing or implausible")
        if not isinstance(joints, dict) or not isinstance(push, dict) or set(push) != set(joints):
            raise ModelFormatError("the model's joint definitions (joint_parts, push_mm) are missing or disagree")
        if not isinstance(self.family_, DepthProbes):
            raise ModelFormatError("a body-parts model reads depth probes")
        card = meta.get("model_card", {})
        if not isinstance(card, dict):
            raise ModelFormatError("the model card is not a mapping")
        self.part_names_, self.focal_px_, self.model_card_ = names, float(focal), card
        self.joint_parts_ = {str(j): list(p) if isinstance(p, list) else p for j, p in joints.items()}
        self.push_mm_ = {str(j): float(v) if isinstance(v, (int, float)) else np.nan for j, v in push.items()}
        self._check_parts()
