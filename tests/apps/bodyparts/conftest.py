"""Rendered bodies and a small body model trained on them, shared by the body-parts tests."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image as PILImage

RENDERER = Path(__file__).resolve().parents[3] / "data_scripts" / "render_bodies.py"


def renderer():
    # imported by name from its folder (not from a file spec): numba's cache finds its kernels again that way
    sys.path.insert(0, str(RENDERER.parent))
    try:
        return importlib.import_module("render_bodies")
    finally:
        sys.path.remove(str(RENDERER.parent))


def write_renders(folder: Path, n: int, seed: int, width: int = 320, height: int = 240) -> Path:
    rb = renderer()
    folder.mkdir(parents=True, exist_ok=True)
    for k in range(n):
        depth, parts, doc = rb.render(np.random.default_rng([seed, k]), width, height)
        PILImage.fromarray(depth).save(folder / f"body_{k:05d}_depth.png")
        PILImage.fromarray(parts).save(folder / f"body_{k:05d}_parts.png")
        (folder / f"body_{k:05d}_joints.json").write_text(json.dumps(doc))
    return folder


@pytest.fixture(scope="session")
def renders(tmp_path_factory) -> Path:
    """40 training renders (seed 11)."""
    return write_renders(tmp_path_factory.mktemp("renders"), 40, 11)


@pytest.fixture(scope="session")
def held_out(tmp_path_factory) -> Path:
    """6 renders never trained on (seed 12)."""
    return write_renders(tmp_path_factory.mktemp("held_out"), 6, 12)


@pytest.fixture(scope="session")
def body_model_path(renders, tmp_path_factory) -> Path:
    from imageforest.apps.bodyparts.training import train_bodyparts

    model, _ = train_bodyparts(renders, n_trees=3, max_depth=12, pixels_per_image=400, n_candidates=40,
                               class_weight="balanced", random_state=0)
    path = tmp_path_factory.mktemp("model") / "bodies.npz"
    model.model_card_ = {"name": "test-bodies"}
    model.save(path)
    return path


@pytest.fixture(scope="session")
def make_renders():
    """write_renders(folder, n, seed, width, height) -> folder."""
    return write_renders
