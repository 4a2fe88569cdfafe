"""Training a Hough-forest detector from a folder of images with boxes (`imageforest train-detector`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from imageforest.apps.detect.datasets import list_images, open_box_folder, read_rgb
from imageforest.apps.detect.model import HoughForestDetector, resize
from imageforest.apps.detect.recipe import RECIPE
from imageforest.exceptions import InvalidInputError

MAX_SIDE = 640  # images are read at most this large (longer side): the detector works at about 64-pixel objects


def _bounded(rgb: np.ndarray, boxes: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
    scale = MAX_SIDE / max(rgb.shape[:2])
    if scale >= 1.0:
        return rgb, boxes
    return resize(rgb, scale), None if boxes is None else boxes * scale


def train_detector(data_dir: str | Path, *, negatives_dir: str | Path | None = None,
                   n_trees: int = RECIPE["n_trees"], max_depth: int = RECIPE["max_depth"],
                   n_candidates: int = RECIPE["n_candidates"], patches_per_image: int = RECIPE["patches_per_image"],
                   variant: str = RECIPE["variant"], loss: str = RECIPE["loss"],
                   n_images: int | None = None, random_state: int = RECIPE["random_state"],
                   n_jobs: int | None = None, progress: Callable[[str], None] | None = None
                   ) -> tuple[HoughForestDetector, dict]:
    """Train on the images of a box folder (see `open_box_folder`), optionally with background images.

    Returns
    -------
    the fitted detector, and a summary (images, patches, seconds)
    """
    say = progress or (lambda _msg: None)
    data = open_box_folder(data_dir)
    names = data.names if n_images is None else data.names[:n_images]
    if n_images is not None and n_images < 1:
        raise InvalidInputError("--images must be at least 1")
    t0 = time.perf_counter()
    images, boxes = [], []
    for name in names:
        rgb, b = _bounded(*data.load(name))
        images.append(rgb)
        boxes.append(b)
    negatives = []
    if negatives_dir is not None:
        paths = list_images(negatives_dir)
        if not paths:
            raise InvalidInputError(f"{negatives_dir}: no background images (.jpg, .png, ...)")
        negatives = [_bounded(read_rgb(p), None)[0] for p in paths]
    say(f"read {len(images)} images and {len(negatives)} background images in {time.perf_counter() - t0:.1f} s")
    model = HoughForestDetector(n_trees, max_depth=max_depth, n_candidates=n_candidates,
                                patches_per_image=patches_per_image, variant=variant, loss=loss,
                                random_state=random_state, n_jobs=n_jobs)
    model.progress = progress  # a line per level of growth
    t1 = time.perf_counter()
    model.fit(images, boxes, negatives)
    model.progress = None
    seconds = time.perf_counter() - t1
    say(f"grew {n_trees} trees in {seconds:.1f} s")
    summary = {"images": len(images), "background_images": len(negatives), **model.n_training_,
               "fit_seconds": round(seconds, 1), "variant": variant}
    return model, summary
