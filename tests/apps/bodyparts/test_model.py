"""The body-parts forest: it learns parts from renders, proposes joints near the truth, keeps its answers through a
model file, scales its probes to another camera, and refuses models of other tasks."""

from __future__ import annotations

import numpy as np
import pytest

from imageforest.apps.bodyparts import BodyPartsForest, Camera, load_body_model, open_dataset
from imageforest.apps.bodyparts.datasets import BODY_JOINT_PARTS
from imageforest.exceptions import InvalidInputError, ModelFormatError


def test_parts_and_joints_on_held_out_renders(body_model_path, held_out):
    model = load_body_model(body_model_path)
    data = open_dataset(held_out)
    assert data.layout == "rendered" and len(data.part_names) == 31
    assert set(model.joint_parts_) == set(BODY_JOINT_PARTS)
    right = total = near = joints = 0
    for s in data.samples:
        depth, labels = data.load(s)
        result = model.parse(depth, data.camera(s, depth.shape))
        assert result.labels.shape == depth.shape and np.array_equal(result.labels > 0, depth > 0)
        right += int(np.sum((result.labels == labels) & (labels > 0)))
        total += int(np.sum(labels > 0))
        truth = data.joints(s)
        for joint in ("head", "neck"):
            if truth[joint]["visible"] and result.joints[joint]:
                joints += 1
                near += np.linalg.norm(np.subtract(result.joints[joint][0].position_mm,
                                                   truth[joint]["camera_mm"])) < 150
    # 31 parts: chance is about 0.03; a tiny forest on 40 renders gets a third of the body pixels right
    assert right / total > 0.3
    assert joints >= 8 and near / joints > 0.6  # the head and neck proposals land near the true joints


def test_model_file_round_trip_and_card(body_model_path, held_out, tmp_path):
    model = load_body_model(body_model_path)
    depth, _ = open_dataset(held_out).load(open_dataset(held_out).samples[0])
    a = model.parse(depth, probabilities=True)
    model.save(tmp_path / "again.npz")
    again = BodyPartsForest.load(tmp_path / "again.npz")
    b = again.parse(depth, probabilities=True)
    assert np.array_equal(a.labels, b.labels) and np.array_equal(a.probabilities, b.probabilities)
    assert again.model_card_["name"] == "test-bodies" and again.part_names_ == model.part_names_
    assert (tmp_path / "again.npz").read_bytes() == body_model_path.read_bytes()
    assert a.probabilities.shape == (*depth.shape, 31)
    assert np.allclose(a.probabilities[depth > 0].sum(axis=1), 1.0, atol=1e-4)


def test_split_thresholds_are_drawn_among_the_probe_responses(body_model_path):
    """A probe off the body reads 1e6 mm, so responses are body differences (a few metres at most) or about +-1e6;
    thresholds drawn from the responses never fall in the gap between, where uniform draws over [min, max] would
    put most of them."""
    forest = load_body_model(body_model_path).forest_
    thr = np.abs(forest.thr_hi[forest.child >= 0])
    assert thr.size > 100
    assert np.mean(thr < 1e4) > 0.2  # splits between body depths
    assert not np.any((thr > 1e4) & (thr < 9e5))


def test_probes_scale_with_the_focal_length(body_model_path, make_renders, tmp_path):
    """The same body seen by a camera with twice the resolution and focal length gets the same parts."""
    small = open_dataset(make_renders(tmp_path / "s", 2, 21, 320, 240))
    large = open_dataset(make_renders(tmp_path / "l", 2, 21, 640, 480))
    model = load_body_model(body_model_path)
    for s, l in zip(small.samples, large.samples, strict=True):
        ds, _ = small.load(s)
        dl, _ = large.load(l)
        ls = model.parse(ds, Camera.kinect(320, 240), joints=False).labels
        ll = model.parse(dl, Camera.kinect(640, 480), joints=False).labels[::2, ::2]
        both = (ls > 0) & (ll > 0)
        assert np.mean(ls[both] == ll[both]) > 0.6
        unscaled = model.parse(dl, Camera(285.0, 285.0, 320.0, 240.0), joints=False).labels[::2, ::2]
        assert np.mean(ls[both] == unscaled[both]) < np.mean(ls[both] == ll[both])


def test_refuses_bad_input_and_other_models(body_model_path, tmp_path):
    model = load_body_model(body_model_path)
    with pytest.raises(InvalidInputError, match="every pixel is 0"):
        model.parse(np.zeros((240, 320)))
    with pytest.raises(InvalidInputError, match="colour"):
        model.parse(np.ones((240, 320, 3)))
    from imageforest import ClassificationForest

    other = ClassificationForest(n_trees=2, random_state=0).fit(np.random.default_rng(0).random((40, 3)),
                                                               np.arange(40) % 2)
    other.save(tmp_path / "other.npz")
    with pytest.raises(ModelFormatError, match="not a BodyPartsForest"):
        load_body_model(tmp_path / "other.npz")
    with pytest.raises(ModelFormatError, match="no such model file"):
        load_body_model(tmp_path / "missing.npz")
    from imageforest.apps.bodyparts.training import train_bodyparts

    with pytest.raises(InvalidInputError, match="threshold_sampling"):
        train_bodyparts(tmp_path, threshold_sampling="mid")  # refused before any map is read


def test_a_seed_fixes_the_model_bytes_whatever_the_thread_count(renders, tmp_path):
    from imageforest.apps.bodyparts import train_bodyparts

    files = []
    for threads in (1, 2):
        model, _ = train_bodyparts(renders, n_trees=2, max_depth=8, n_images=10, pixels_per_image=200,
                                   n_candidates=20, random_state=4, n_jobs=threads)
        model.save(tmp_path / f"m{threads}.npz")
        files.append((tmp_path / f"m{threads}.npz").read_bytes())
    assert files[0] == files[1]


def test_a_stack_of_cut_maps_is_held_once_and_grows_the_forest_the_maps_grow(renders):
    from imageforest.apps.bodyparts import stack_depths
    from imageforest.imaging.features import cropped_depth_stack, reading_box

    data = open_dataset(renders)
    depths, points, labels = [], [], []
    for k, sample in enumerate(data.samples[:6]):
        depth, lab = data.load(sample)
        y0, y1, x0, x1 = reading_box(depth, np.argwhere(lab > 0))
        depth, lab = depth[y0:y1, x0:x1].copy(), lab[y0:y1, x0:x1]
        yx = np.argwhere(lab > 0)[::7]
        depths.append(depth)
        points.append(np.c_[np.full(len(yx), k), yx])
        labels.append(lab[yx[:, 0], yx[:, 1]])
    points, labels = np.concatenate(points), np.concatenate(labels)
    stack = stack_depths(depths)
    # maps cut to their readings already: training reads the stack itself, not a second copy
    cut, moved = cropped_depth_stack(stack, np.c_[points[:, :1], np.zeros((len(points), 1), int), points[:, 1:]])
    assert cut is stack and np.array_equal(moved[:, 2:], points[:, 1:])

    def fit(maps):
        model = BodyPartsForest(n_trees=2, max_depth=8, n_candidates=20, random_state=1)
        return model.fit_parts(maps, points, labels, data.part_names, 285.0)

    from_list, from_stack = fit(depths), fit(stack)
    for name, array in from_list.forest_.to_arrays().items():
        assert np.array_equal(array, from_stack.forest_.to_arrays()[name]), name
    stack.table[3] = np.nan
    with pytest.raises(InvalidInputError, match="NaN"):
        fit(stack)
