"""Rendered bodies and a small body model trained on them, shared by the body-parts tests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image as PILImage


def write_renders(rb, folder: Path, n: int, seed: int, width: int = 320, height: int = 240) -> Path:
    """n renders of `data_scripts/render_bodies.py` (the module `rb`) in the layout it writes."""
    folder.mkdir(parents=True, exist_ok=True)
    for k in range(n):
        depth, parts, doc = rb.render(np.random.default_rng([seed, k]), width, height)
        PILImage.fromarray(depth).save(folder / f"body_{k:05d}_depth.png")
        PILImage.fromarray(parts).save(folder / f"body_{k:05d}_parts.png")
        (folder / f"body_{k:05d}_joints.json").write_text(json.dumps(doc))
    return folder


@pytest.fixture(scope="session")
def renders(render_bodies, tmp_path_factory) -> Path:
    """40 training renders (seed 11)."""
    return write_renders(render_bodies, tmp_path_factory.mktemp("renders"), 40, 11)


@pytest.fixture(scope="session")
def held_out(render_bodies, tmp_path_factory) -> Path:
    """6 renders never trained on (seed 12)."""
    return write_renders(render_bodies, tmp_path_factory.mktemp("held_out"), 6, 12)


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
def make_renders(render_bodies):
    """make_renders(folder, n, seed, width, height) -> folder."""
    return lambda *args: write_renders(render_bodies, *args)
