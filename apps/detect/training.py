"""Training a Hough-forest detector from a folder of images with boxes or of cropped views with viewpoints
(`imageforest train-detector`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from imageforest.apps.detect.datasets import is_crop_folder, list_images, open_box_folder, open_crop_folder, read_rgb
from imageforest.apps.detect.model import HoughForestDetector, resize
from imageforest.apps.detect.recipe import CROPS_RECIPE, RECIPE
from imageforest.exceptions import InvalidInputError

MAX_SIDE = 640  # images are read at most this large (longer side): the detector works at about 64-pixel objects


def _bounded(rgb: np.ndarray, boxes: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
    scale = MAX_SIDE / max(rgb.shape[:2])
    if scale >= 1.0:
        return rgb, boxes
    return resize(rgb, scale), None if boxes is None else boxes * scale


def train_detector(data_dir: str | Path, *, negatives_dir: str | Path | None = None,
                   n_trees: int | None = None, max_depth: int | None = None, n_candidates: int | None = None,
                   patches_per_image: int | None = None, variant: str | None = None, loss: str | None = None,
                   viewpoint_bins: int | None = None, window_views: int | None = None, flip: bool | None = None,
                   object_sizes: tuple[float, float] | None = None, vote_stride: int | None = None,
                   require_viewpoints: bool = False,
                   n_images: int | None = None,
                   random_state: int | None = None, n_jobs: int | None = None,
                   progress: Callable[[str], None] | None = None) -> tuple[HoughForestDetector, dict]:
    """Train on a folder: photographs with boxes (see `open_box_folder`) or cropped views with viewpoints (see
    `open_crop_folder`; its `negatives/` are the background images unless `negatives_dir` is given).

    Settings left as None come from the recipe for the folder's kind (`RECIPE` or `CROPS_RECIPE`).
    `require_viewpoints`: InvalidInputError unless the data gives every object's azimuth.

    Returns
    -------
    the fitted detector, and a summary (images, patches, seconds, the settings used)
    """
    say = progress or (lambda _msg: None)
    if n_images is not None and n_images < 1:
        raise InvalidInputError("--images must be at least 1")
    crops = is_crop_folder(data_dir)
    given = {"n_trees": n_trees, "max_depth": max_depth, "n_candidates": n_candidates,
             "patches_per_image": patches_per_image, "variant": variant, "loss": loss,
             "viewpoint_bins": viewpoint_bins, "window_views": window_views, "flip": flip,
             "object_sizes": object_sizes, "vote_stride": vote_stride,
             "random_state": random_state}
    settings = {k: (v if v is not None else (CROPS_RECIPE if crops else RECIPE)[k]) for k, v in given.items()}
    t0 = time.perf_counter()
    images, boxes, views = [], [], []
    if crops:
        data = open_crop_folder(data_dir)
        for k in range(len(data.names) if n_images is None else min(n_images, len(data.names))):
            rgb, b = data.load(k)
            images.append(rgb)
            boxes.append(b)
            views.append(data.azimuth[k:k + 1])
        if negatives_dir is None:
            negatives_dir = data.negatives_dir
    else:
        data = open_box_folder(data_dir)
        for name in data.names if n_images is None else data.names[:n_images]:
            rgb, b = _bounded(*data.load(name))
            images.append(rgb)
            boxes.append(b)
            views.append(data.viewpoints(name))
    known = [v is not None for v in views]
    if any(known) and not all(known):
        raise InvalidInputError(f"{data_dir}: some images give their objects' azimuths and others do not")
    if require_viewpoints and not all(known):
        raise InvalidInputError(f"{data_dir}: viewpoint bins need viewpoints (azimuth_deg per box), and the data "
                                "has none")
    negatives = []
    if negatives_dir is not None:
        paths = list_images(negatives_dir)
        if not paths:
            raise InvalidInputError(f"{negatives_dir}: no background images (.jpg, .png, ...)")
        negatives = [_bounded(read_rgb(p), None)[0] for p in paths]
    say(f"read {len(images)} {'crops' if crops else 'images'} and {len(negatives)} background images in "
        f"{time.perf_counter() - t0:.1f} s")
    model = HoughForestDetector(settings["n_trees"], max_depth=settings["max_depth"],
                                n_candidates=settings["n_candidates"], patches_per_image=settings["patches_per_image"],
                                variant=settings["variant"], loss=settings["loss"],
                                viewpoint_bins=settings["viewpoint_bins"], window_views=settings["window_views"],
                                flip=settings["flip"],
                                object_sizes=settings["object_sizes"], vote_stride=settings["vote_stride"],
                                random_state=settings["random_state"],
                                n_jobs=n_jobs)
    model.progress = progress  # a line per level of growth
    t1 = time.perf_counter()
    model.fit(images, boxes, negatives, views if all(known) else None)
    model.progress = None
    seconds = time.perf_counter() - t1
    say(f"grew {settings['n_trees']} trees in {seconds:.1f} s")
    summary = {"images": len(images), "background_images": len(negatives), **model.n_training_,
               "fit_seconds": round(seconds, 1), "variant": settings["variant"], "viewpoints": all(known),
               "settings": {k: (list(v) if isinstance(v, tuple) else v) for k, v in settings.items()}}
    return model, summary
