"""Depth probes on depth data nobody here made (skips without ../shared/data)."""

import sys
from pathlib import Path

import numpy as np
import pytest

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
pytestmark = pytest.mark.skipif(not (DATA / "hand-depth-parts").is_dir(),
                                reason=f"shared data not found at {DATA} (real hand depth maps)")


def test_hand_parts_on_held_out_images():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    from depth_parts import load_hand

    from imageforest.imaging import DepthProbes, ImageClassificationForest

    files = sorted((DATA / "hand-depth-parts" / "train").glob("*_depth.png"))
    rng = np.random.default_rng(0)
    images, pts, labels = [], [], []
    for k, f in enumerate(files[:40]):
        depth, lab = load_hand(f)
        yy, xx = np.nonzero(lab > 0)
        sel = rng.choice(yy.size, 800, replace=False)
        images.append(depth)
        pts.append(np.c_[np.full(sel.size, k), yy[sel], xx[sel]])
        labels.append(lab[yy[sel], xx[sel]])
    forest = ImageClassificationForest(DepthProbes(max_offset=60 * 13_000.0), n_trees=3, max_depth=16,
                                       n_candidates=100, random_state=0)
    forest.fit(images, np.concatenate(pts), np.concatenate(labels))
    correct = total = 0
    for f in files[-10:]:
        depth, lab = load_hand(f)
        pred = forest.classes_[forest.predict_image(depth, mask=lab > 0).array]
        correct += int((pred[lab > 0] == lab[lab > 0]).sum())
        total += int((lab > 0).sum())
    assert correct / total > 0.75
