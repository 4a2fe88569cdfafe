"""Synthetic scenes (a striped orange object on textured green ground) and a small detector trained on them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image as PILImage
from scipy import ndimage


def scene(rng: np.random.Generator, with_object: bool = True, size: tuple[int, int] = (120, 160)
          ) -> tuple[np.ndarray, np.ndarray]:
    """(h, w, 3) uint8 image and its (k, 4) boxes: one object 40-70 px wide (aspect 1.4) or none."""
    h, w = size
    noise = ndimage.gaussian_filter(rng.normal(size=(h, w)), 3)
    noise = (noise - noise.min()) / (np.ptp(noise) + 1e-9)
    img = np.stack([60 + 60 * noise, 110 + 80 * noise, 40 + 40 * noise], axis=-1)
    boxes = np.zeros((0, 4))
    if with_object:
        ow = int(rng.integers(40, 71))
        oh = round(ow / 1.4)
        x0 = int(rng.integers(0, w - ow))
        y0 = int(rng.integers(0, h - oh))
        yy, xx = np.mgrid[0:oh, 0:ow]
        inside = ((yy - oh / 2 + 0.5) / (oh / 2)) ** 2 + ((xx - ow / 2 + 0.5) / (ow / 2)) ** 2 <= 1.0
        stripes = (xx * 6 // ow) % 2 == 0
        colour = np.where(stripes[..., None], [235, 130, 30], [120, 40, 20])
        patch = img[y0:y0 + oh, x0:x0 + ow]
        patch[inside] = colour[inside]
        ys, xs = np.nonzero(inside)
        boxes = np.array([[x0 + xs.min(), y0 + ys.min(), x0 + xs.max() + 1, y0 + ys.max() + 1]], dtype=np.float64)
    return np.clip(img, 0, 255).astype(np.uint8), boxes


def write_scenes(folder: Path, n: int, seed: int) -> Path:
    """n object scenes as JPEG files beside boxes.json (name -> list of boxes)."""
    folder.mkdir(parents=True, exist_ok=True)
    boxes = {}
    for k in range(n):
        img, b = scene(np.random.default_rng([seed, k]))
        PILImage.fromarray(img).save(folder / f"scene{k:03d}.png")
        boxes[f"scene{k:03d}.png"] = b.tolist()
    (folder / "boxes.json").write_text(json.dumps(boxes))
    return folder


@pytest.fixture(scope="session")
def scenes(tmp_path_factory) -> Path:
    """24 training scenes (seed 21)."""
    return write_scenes(tmp_path_factory.mktemp("scenes"), 24, 21)


@pytest.fixture(scope="session")
def held_scenes(tmp_path_factory) -> Path:
    """6 scenes never trained on (seed 22)."""
    return write_scenes(tmp_path_factory.mktemp("held_scenes"), 6, 22)


@pytest.fixture(scope="session")
def backgrounds(tmp_path_factory) -> Path:
    """4 scenes without the object."""
    folder = tmp_path_factory.mktemp("backgrounds")
    for k in range(4):
        PILImage.fromarray(scene(np.random.default_rng([23, k]), with_object=False)[0]).save(folder / f"bg{k}.png")
    return folder


SMALL = {"n_trees": 4, "max_depth": 10, "n_candidates": 40, "patches_per_image": 200, "object_size": 40.0}


@pytest.fixture(scope="session")
def detector_path(scenes, backgrounds, tmp_path_factory) -> Path:
    from imageforest.apps.detect.datasets import list_images, open_box_folder, read_rgb
    from imageforest.apps.detect.model import HoughForestDetector

    data = open_box_folder(scenes)
    pairs = [data.load(n) for n in data.names]
    negatives = [read_rgb(p) for p in list_images(backgrounds)]
    model = HoughForestDetector(**SMALL, random_state=0).fit([p[0] for p in pairs], [p[1] for p in pairs],
                                                             negatives)
    model.model_card_ = {"name": "test-scenes"}
    path = tmp_path_factory.mktemp("detector") / "scenes.npz"
    model.save(path)
    return path
