"""`imageforest.testing.check_estimator` on every estimator: the engine's, the imaging layer's (image forests and the
entangled forest) and the seven forests of the applications (detector, body parts, segmentation, the localizer's
three stages and the contourer)."""

from __future__ import annotations

import numpy as np
import pytest

from imageforest import (
    ClassificationForest,
    DensityForest,
    ManifoldForest,
    RegressionForest,
    SemiSupervisedForest,
)
from imageforest.imaging import BoxFeatures, Image, ImageClassificationForest, ImageRegressionForest
from imageforest.testing import check_estimator

SMALL = {"n_trees": 3, "max_depth": 4, "random_state": 0}


@pytest.mark.parametrize("cls", [ClassificationForest, RegressionForest, DensityForest, ManifoldForest,
                                 SemiSupervisedForest], ids=lambda c: c.__name__)
def test_engine_estimators(cls):
    check_estimator(cls(**SMALL))


def _picture_points():
    img = np.zeros((30, 30), np.float32)
    img[10:20, 10:20] = 100.0
    pts = np.array([[0, y, x] for y in range(0, 30, 3) for x in range(0, 30, 3)], dtype=np.int32)
    return img, pts


def test_image_forests():
    img, pts = _picture_points()
    labels = (img[pts[:, 1], pts[:, 2]] > 0).astype(int)
    boxes = BoxFeatures(max_offset_mm=5, box_size_mm=(1, 3))
    check_estimator(ImageClassificationForest(boxes, **SMALL), lambda e: e.fit([img], pts, labels))
    check_estimator(ImageRegressionForest(boxes, **SMALL), lambda e: e.fit([img], pts, pts[:, 1:].astype(float)))


def test_entangled_forest():
    from imageforest.imaging.entangled import EntangledForest

    img, pts = _picture_points()
    labels = (img[pts[:, 1], pts[:, 2]] > 0).astype(int)
    forest = EntangledForest(n_trees=2, max_depth=4, entangled_depths=(2,), n_candidates=8, max_offset_mm=5,
                             box_size_mm=(1, 3), min_samples_leaf=2, random_state=0)
    check_estimator(forest, lambda e: e.fit([img], pts, labels))


def test_organ_contourer():
    from imageforest.apps.contour.model import OrganContourer
    from imageforest.apps.localize.phantom import ORGANS, head_neck_phantom
    from imageforest.imaging.ct_organs import OrganSlices

    ct, lab = head_neck_phantom(0, size=(40, 40, 32), spacing=(9.0, 9.0, 7.0))
    boxes = OrganSlices.from_labels(lab, list(range(1, 8))).boxes()
    model = OrganContourer(ORGANS, n_trees=2, max_depth=4, entangled_depths=(2,), n_candidates=8, organ_points=20,
                           background_points=150, random_state=0)
    check_estimator(model, lambda e: e.fit_scans([ct], [np.asarray(lab.array)], [boxes]))


def test_segmentation_forest():
    from imageforest.apps.segment.features import prepare
    from imageforest.apps.segment.model import SegmentationForest
    from imageforest.apps.segment.synthetic import disc_picture

    picture, truth = disc_picture()
    prepared = prepare(picture)
    index = np.flatnonzero(np.ones(truth.size, bool))[::7]
    labels = truth.ravel()[index].astype(int) + 1
    check_estimator(SegmentationForest(**SMALL), lambda e: e.fit_pixels(prepared, index, labels))


def test_body_parts_forest():
    from imageforest.apps.bodyparts.model import BodyPartsForest

    rng = np.random.default_rng(0)
    depth = np.zeros((40, 40), np.float32)
    depth[5:35, 10:30] = 2000.0
    depths = [depth, depth + 100.0 * (depth > 0)]
    yx = np.argwhere(depth > 0)[::5]
    points = np.c_[rng.integers(0, 2, len(yx)), yx]
    labels = np.where(points[:, 1] < 20, 1, 2)
    check_estimator(BodyPartsForest(**SMALL),
                    lambda e: e.fit_parts(depths, points, labels, ["upper", "lower"], focal_px=285.0))


def test_hough_detector():
    from imageforest.apps.detect.model import HoughForestDetector

    rng = np.random.default_rng(0)
    images, boxes = [], []
    for k in range(3):
        img = rng.uniform(0, 0.2, (96, 96, 3))
        img[30 + k:70 + k, 20:76] = [0.9, 0.5, 0.1]
        images.append(img)
        boxes.append(np.array([[20, 30 + k, 76, 70 + k]], float))
    check_estimator(HoughForestDetector(n_trees=2, max_depth=4, n_candidates=8, patches_per_image=40,
                                        min_samples_leaf=5, random_state=0),
                    lambda e: e.fit(images, boxes))


@pytest.fixture(scope="module")
def phantoms():
    from imageforest.apps.localize.phantom import ORGANS, head_neck_phantom
    from imageforest.imaging.ct_organs import OrganSlices

    cases = [head_neck_phantom(seed, size=(48, 48, 40), spacing=(8.0, 8.0, 6.0)) for seed in range(2)]
    truths = [OrganSlices.from_labels(labels, list(range(1, len(ORGANS) + 1))) for _, labels in cases]
    return [ct for ct, _ in cases], truths, list(ORGANS)


def test_organ_localizer(phantoms):
    from imageforest.apps.localize.model import OrganLocalizer

    scans, truths, organs = phantoms
    model = OrganLocalizer(organs, n_trees=2, max_depth=4, n_candidates=8, min_samples_leaf=5, points_per_scan=200,
                           crops_per_scan=0, refine_spacing_mm=0.0, random_state=0)
    check_estimator(model, lambda e: e.fit(scans, truths))


@pytest.mark.parametrize("kind", ["WallRefiner", "SliceWallRefiner"])
def test_localizer_fine_stages(kind):
    from imageforest.apps.localize.refine import WallRefiner
    from imageforest.apps.localize.slices import SliceWallRefiner

    cls = {"WallRefiner": WallRefiner, "SliceWallRefiner": SliceWallRefiner}[kind]
    rng = np.random.default_rng(0)
    volume = rng.normal(0, 50, (16, 16, 16)).astype(np.float32)
    volume[4:12, 4:12, 4:12] += 400
    region = Image(volume, np.array([2.0, 2.0, 2.0]), np.zeros(3), np.eye(3))
    points = np.c_[np.zeros(150, int), rng.integers(0, 16, (150, 3))]
    targets = rng.normal(0, 5, (150, cls.n_walls))
    check_estimator(cls(2.0, n_trees=2, max_depth=4, n_candidates=8, min_samples_leaf=5, random_state=0),
                    lambda e: e.fit([region], points, targets))
