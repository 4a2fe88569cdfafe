"""Training a body-parts forest from a folder of labelled depth maps (`imageforest train-bodyparts`).

Pixels are drawn uniformly among each map's labelled pixels (Shotton et al. draw 2,000 per image); probes reach
`reach_m` metres at the training focal length; posteriors are averaged over a twentieth of that reach before
the argmax. For rendered bodies, each joint's push from the surface mode to the
joint is learnt from the training maps' true parts and joints (the median over maps where the joint is visible).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from imageforest.apps.bodyparts.datasets import DataSet, open_dataset
from imageforest.apps.bodyparts.joints import propose_joints, true_part_posteriors
from imageforest.apps.bodyparts.model import BodyPartsForest, stack_depths
from imageforest.apps.bodyparts.recipe import RECIPE
from imageforest.exceptions import InvalidInputError
from imageforest.imaging.features import DepthProbes, reading_box


def sample_pixels(labels: np.ndarray, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Up to n labelled pixels of one map drawn without replacement: (m, 2) (y, x) and their parts."""
    yy, xx = np.nonzero(labels > 0)
    pick = rng.choice(yy.size, min(n, yy.size), replace=False) if yy.size > n else np.arange(yy.size)
    pick.sort()
    return np.c_[yy[pick], xx[pick]], labels[yy[pick], xx[pick]]


def learn_push(data: DataSet, samples, joint_parts: dict[str, list[int]], bandwidth_mm: float,
               n_parts: int) -> dict[str, float]:
    """Per joint, the median depth from the strongest surface mode of its true parts to the true joint (mm)."""
    gaps: dict[str, list[float]] = {j: [] for j in joint_parts}
    for sample in samples:
        depth, labels = data.load(sample)
        truth = data.joints(sample)
        if truth is None:
            continue
        onehot, yx = true_part_posteriors(labels, n_parts)
        found = propose_joints(onehot, yx, depth[yx[:, 0], yx[:, 1]], data.camera(sample, depth.shape),
                               joint_parts, {}, bandwidth_mm=bandwidth_mm, threshold=0.5, max_proposals=1)
        for joint, props in found.items():
            t = truth.get(joint)
            if props and t is not None and t["visible"]:
                true_mm = np.asarray(t["camera_mm"], dtype=np.float64)
                mode = np.asarray(props[0].position_mm)
                if np.linalg.norm(true_mm[:2] - mode[:2]) < 150.0:  # the right cluster, not a stray one
                    gaps[joint].append(float(true_mm[2] - mode[2]))
    return {j: (float(np.median(v)) if v else 0.0) for j, v in gaps.items()}


def train_bodyparts(data_dir: str | Path, *, n_trees: int = RECIPE["n_trees"], max_depth: int = RECIPE["max_depth"],
                    n_images: int | None = None, pixels_per_image: int = RECIPE["pixels_per_image"],
                    n_candidates: int = RECIPE["n_candidates"], reach_m: float = RECIPE["reach_m"],
                    min_samples_leaf: int = RECIPE["min_samples_leaf"],
                    class_weight: str | None = RECIPE["class_weight"],
                    max_samples: int | float | None = RECIPE["max_samples"],
                    threshold_sampling: str = RECIPE["threshold_sampling"],
                    random_state: int = RECIPE["random_state"], n_jobs: int | None = None,
                    progress: Callable[[str], None] | None = None) -> tuple[BodyPartsForest, dict]:
    """Train on the first `n_images` maps of a folder (all by default); each tree on `max_samples` of the pixels
    (a count or a share; None: all of them); `threshold_sampling` as `BodyPartsForest` takes it. The defaults are
    the shipped model's recipe (`recipe.py`).

    Returns
    -------
    the fitted forest, and a summary (layout, maps, pixels, seconds)
    """
    rule = BodyPartsForest.parameter_constraints["threshold_sampling"]  # checked before any map is read
    if not rule.accepts(threshold_sampling):
        raise InvalidInputError(f"threshold_sampling must be {rule.describe()}, got {threshold_sampling!r}")
    say = progress or (lambda _msg: None)
    data = open_dataset(data_dir)
    samples = data.samples if n_images is None else data.samples[:n_images]
    if n_images is not None and n_images < 1:
        raise InvalidInputError("--images must be at least 1")
    if pixels_per_image < 1:
        raise InvalidInputError("--pixels-per-image must be at least 1")
    if not 0.01 <= reach_m <= 5.0:
        raise InvalidInputError(f"the probes' reach must be 0.01-5 m, got {reach_m}")
    rng = np.random.default_rng(random_state)
    t0 = time.perf_counter()
    depths, points, labels = [], [], []
    focal = None
    for k, sample in enumerate(samples):
        depth, lab = data.load(sample)
        cam = data.camera(sample, depth.shape)
        if focal is None:
            focal = cam.fx
        elif abs(cam.fx - focal) > 1e-3 * focal:
            raise InvalidInputError(f"{sample.depth}: focal length {cam.fx:.1f} px differs from the first map's "
                                    f"{focal:.1f}; train on maps of one camera")
        yx, parts = sample_pixels(lab, pixels_per_image, rng)
        # Kept cut to the body (the probes read the same): a frame is mostly background, and thousands are held.
        y0, y1, x0, x1 = reading_box(depth, yx)
        depths.append(np.ascontiguousarray(depth[y0:y1, x0:x1]))
        points.append(np.c_[np.full(len(parts), k), yx - (y0, x0)])
        labels.append(parts)
    pts, labs = np.concatenate(points), np.concatenate(labels)
    if np.unique(labs).size < 2:
        raise InvalidInputError(f"{data_dir}: the training maps show fewer than two parts")
    t_load = time.perf_counter() - t0
    say(f"{len(samples)} maps, {len(labs)} pixels ({data.layout} layout) read in {t_load:.1f} s; growing "
        f"{n_trees} trees of depth {max_depth}")
    forest = BodyPartsForest(DepthProbes(max_offset=reach_m * 1000.0 * focal), n_trees=n_trees, max_depth=max_depth,
                             n_candidates=n_candidates, min_samples_leaf=min_samples_leaf, class_weight=class_weight,
                             max_samples=max_samples, threshold_sampling=threshold_sampling,
                             smoothing_mm=0.05 * reach_m * 1000.0, random_state=random_state, n_jobs=n_jobs)
    joint_parts = data.joint_parts()
    t1 = time.perf_counter()
    stack = stack_depths(depths)
    del depths  # the stack holds every map once from here on
    forest.progress = progress  # a line per level of growth
    forest.fit_parts(stack, pts, labs, data.part_names, focal, joint_parts)
    forest.progress = None
    t_fit = time.perf_counter() - t1
    if joint_parts is not None and data.layout == "rendered":
        forest.push_mm_ = learn_push(data, samples[:200], joint_parts, float(forest.bandwidth_mm),
                                     len(data.part_names))
    summary = {"layout": data.layout, "maps": len(samples), "pixels": len(labs), "read_s": round(t_load, 1),
               "fit_s": round(t_fit, 1), "focal_px": focal}
    return forest, summary
