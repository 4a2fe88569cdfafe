"""HoughForestDetector: finds the object in scenes it never saw, is deterministic, and refuses bad input."""

from __future__ import annotations

import numpy as np
import pytest

from imageforest.apps.detect.model import HoughForestDetector
from imageforest.exceptions import InvalidInputError, ModelFormatError, NotFittedError
from imageforest.voting.hough import box_iou

from .conftest import SMALL, scene


def training_set(n: int = 24, seed: int = 21):
    pairs = [scene(np.random.default_rng([seed, k])) for k in range(n)]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def test_detects_held_out_objects_and_scores_background_low(detector_path):
    model = HoughForestDetector.load(detector_path)
    best_background = max(d.score for k in range(4)
                          for d in model.detect(scene(np.random.default_rng([24, k]), False)[0]).detections)
    for k in range(6):
        img, truth = scene(np.random.default_rng([22, k]))
        found = model.detect(img).detections
        assert box_iou(found[0].box_xyxy, truth)[0, 0] >= 0.5
        assert found[0].score > 3 * best_background


def test_boxes_follow_the_image_size(detector_path):
    from skimage.transform import rescale

    model = HoughForestDetector.load(detector_path)
    img, truth = scene(np.random.default_rng([22, 0]))
    big = (rescale(img / 255.0, 2.0, order=1, channel_axis=-1) * 255).round().astype(np.uint8)
    found = model.detect(big).detections[0]
    assert box_iou(found.box_xyxy, truth * 2)[0, 0] >= 0.5
    assert found.scale == pytest.approx(model.detect(img).detections[0].scale / 2, rel=1e-6)


def test_seed_fixes_the_model_bytes_whatever_the_threads(tmp_path):
    images, boxes = training_set(8)
    paths = []
    for k, jobs in enumerate((1, 2)):
        m = HoughForestDetector(**{**SMALL, "n_trees": 2}, random_state=5, n_jobs=jobs).fit(images, boxes)
        paths.append(tmp_path / f"m{k}.npz")
        m.save(paths[-1])
    assert paths[0].read_bytes() == paths[1].read_bytes()
    loaded = HoughForestDetector.load(paths[0])
    img = scene(np.random.default_rng([22, 1]))[0]
    assert [d.to_json() for d in loaded.detect(img).detections] == [d.to_json() for d in m.detect(img).detections]


def test_alternating_variant_reweights_and_still_detects():
    images, boxes = training_set(16)
    plain = HoughForestDetector(**SMALL, random_state=0).fit(images, boxes)
    alt = HoughForestDetector(**SMALL, variant="adhf", loss="tangent", random_state=0).fit(images, boxes)
    assert not np.array_equal(plain.forest_.params, alt.forest_.params)
    img, truth = scene(np.random.default_rng([22, 2]))
    assert box_iou(alt.detect(img).detections[0].box_xyxy, truth)[0, 0] >= 0.5


def test_classification_only_forest_still_stores_offsets():
    images, boxes = training_set(8)
    m = HoughForestDetector(**SMALL, offset_share=0.0, random_state=0).fit(images, boxes)
    assert m.votes_.shape[0] > 0
    fg = m.foreground_probability(images[0], 1.0)
    assert fg.shape == images[0].shape[:2] and 0 <= fg.min() <= fg.max() <= 1


def test_bad_training_input_is_refused():
    images, boxes = training_set(3)
    with pytest.raises(InvalidInputError, match="no boxes"):
        HoughForestDetector(**SMALL).fit(images, [boxes[0], np.zeros((0, 4)), boxes[2]])
    with pytest.raises(InvalidInputError, match="outside"):
        HoughForestDetector(**SMALL).fit(images, [boxes[0], boxes[1], np.array([[10, 10, 500, 50]])])
    with pytest.raises(InvalidInputError, match="grey"):
        HoughForestDetector(**SMALL).fit([images[0][..., 0], *images[1:]], boxes)
    with pytest.raises(InvalidInputError, match="box lists"):
        HoughForestDetector(**SMALL).fit(images, boxes[:2])
    with pytest.raises(InvalidInputError, match="variant"):
        HoughForestDetector(**SMALL, variant="boosted").fit(images, boxes)


def test_bad_detection_input_is_refused(detector_path):
    with pytest.raises(NotFittedError):
        HoughForestDetector().detect(np.zeros((20, 20, 3)))
    model = HoughForestDetector.load(detector_path)
    with pytest.raises(InvalidInputError, match="grey"):
        model.detect(np.zeros((50, 60), np.uint8))
    with pytest.raises(InvalidInputError, match="NaN"):
        model.detect(np.full((50, 60, 3), np.nan))
    with pytest.raises(InvalidInputError, match="scales"):
        model.detect(np.zeros((50, 60, 3)), scales=[0.5, -1])


def test_a_tampered_model_is_refused(detector_path, tmp_path):
    from imageforest.forest.serialization import load_model, save_model

    meta, arrays = load_model(detector_path)
    votes = arrays["votes"].copy()
    votes[0, 2] = -1.0
    bad = tmp_path / "bad.npz"
    save_model(bad, meta, {**arrays, "votes": votes})
    with pytest.raises(ModelFormatError, match="votes"):
        HoughForestDetector.load(bad)
    start = arrays["vote_start"].copy()
    start[-1] += 5
    save_model(bad, meta, {**arrays, "vote_start": start})
    with pytest.raises(ModelFormatError):
        HoughForestDetector.load(bad)


def test_a_refit_detector_votes_with_its_new_leaves():
    images, boxes = training_set(8)
    other_images, other_boxes = training_set(8, seed=25)
    img = scene(np.random.default_rng([22, 3]))[0]
    reused = HoughForestDetector(**SMALL, random_state=0).fit(images, boxes)
    reused.detect(img)
    reused.fit(other_images, other_boxes)
    fresh = HoughForestDetector(**SMALL, random_state=0).fit(other_images, other_boxes)
    assert [d.to_json() for d in reused.detect(img).detections] == [d.to_json() for d in fresh.detect(img).detections]
