"""The depth-body renderer: deterministic per seed, depth and parts agree, joints project into the image."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest


@pytest.fixture(scope="module")
def rb(render_bodies):
    return render_bodies


def test_renders_are_deterministic_and_consistent(rb):
    a = rb.render(np.random.default_rng([7, 0]))
    b = rb.render(np.random.default_rng([7, 0]))
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) and a[2] == b[2]
    seen = set()
    for k in range(12):
        depth, parts, doc = rb.render(np.random.default_rng([7, k]))
        assert depth.dtype == np.uint16 and parts.dtype == np.uint8 and depth.shape == parts.shape == (240, 320)
        assert np.array_equal(depth > 0, parts > 0)  # a labelled pixel has a depth and the reverse
        body = depth[depth > 0]
        assert body.size > 300 and 1000 < np.median(body) < 4500  # mm, the camera 1.5-4 m away
        seen |= set(np.unique(parts[parts > 0]).tolist())
        centres = {f"{p}_{s}" for p in ("hand", "foot") for s in ("left", "right")}
        assert set(doc["joints"]) == set(rb.JOINTS) | centres and len(doc["parts"]) == 31
        for joint in doc["joints"].values():
            u, v = joint["pixel"]
            if joint["visible"]:
                assert 0 <= u < 320 and 0 <= v < 240 and depth[int(v), int(u)] > 0
    assert seen <= set(range(1, 32)) and len(seen) >= 25  # the paper's 31 parts, nearly all within a dozen bodies


def test_command_writes_the_three_files_per_body(rb, tmp_path: Path):
    rb.main(["-n", "3", "-o", str(tmp_path / "out"), "--seed", "1", "--sheet", str(tmp_path / "sheet.png")])
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == [f"body_{k:05d}_{kind}" for k in range(3) for kind in ("depth.png", "joints.json", "parts.png")]
    doc = json.loads((tmp_path / "out" / "body_00000_joints.json").read_text())
    assert doc["camera"]["fx"] == 285.0 and (tmp_path / "sheet.png").is_file()
