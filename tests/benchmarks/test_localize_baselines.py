"""The localizer's peers (benchmarks/localize/baselines.py), on phantoms: the body-relative mean box and the
ExtraTrees regression-voting prototype (multi-atlas registration is exercised by the real-data benchmark only:
tens of seconds per scan)."""

import numpy as np
import pytest

from benchmarks.localize.baselines import BodyRelativeMeanBox, ExtraTreesVoting
from imageforest.apps.localize.evaluate import OrganScores
from imageforest.apps.localize.phantom import ORGANS, head_neck_phantom
from imageforest.imaging.ct_organs import OrganSlices

pytest.importorskip("sklearn", reason="the ExtraTrees prototype is scikit-learn's (a dev dependency)")


@pytest.fixture(scope="module")
def data():
    pairs = [head_neck_phantom(seed, size=(96, 96, 80), spacing=(5.2, 5.2, 3.5)) for seed in range(6)]
    return [ct for ct, _ in pairs], [OrganSlices.from_labels(lab, list(range(1, 8))).boxes() for _, lab in pairs]


def _score(method, scan, truth) -> float:
    scores = OrganScores(list(ORGANS))
    boxes, present = method.predict(scan)
    scores.add(boxes, present, truth)
    return scores.mean_wall_error()


def test_extra_trees_prototype_votes_boxes_closer_than_the_body_box(data):
    scans, boxes = data
    trees = ExtraTreesVoting(n_features=60, points_per_scan=300, n_trees=8, vote_points=1500, seed=0)
    trees.fit(scans[:5], boxes[:5])
    body = BodyRelativeMeanBox().fit(scans[:5], boxes[:5])
    out, present = trees.predict(scans[5])
    assert out.shape == (len(ORGANS), 6) and present.all()
    assert np.all(out[:, 1::2] > out[:, 0::2])
    err = _score(trees, scans[5], boxes[5])
    assert err < _score(body, scans[5], boxes[5]) and err < 8.0
    # a seed fixes the prototype (its features and its trees)
    again = ExtraTreesVoting(n_features=60, points_per_scan=300, n_trees=8, vote_points=1500, seed=0)
    assert np.array_equal(again.fit(scans[:5], boxes[:5]).predict(scans[5])[0], out)


def test_extra_trees_prototype_leaves_organs_no_training_scan_had(data):
    scans, boxes = data
    cut = [b.copy() for b in boxes[:5]]
    for b in cut:
        b[ORGANS.index("Larynx")] = np.nan
    out, present = ExtraTreesVoting(n_features=40, points_per_scan=200, n_trees=4, seed=1).fit(scans[:5], cut) \
        .predict(scans[5])
    k = ORGANS.index("Larynx")
    assert np.isnan(out[k]).all() and not present[k] and present[np.arange(len(ORGANS)) != k].all()
