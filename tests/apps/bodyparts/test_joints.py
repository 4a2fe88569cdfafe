"""Joint proposals: mean shift finds every cluster, ranks by voting area, and pushes modes into the body."""

from __future__ import annotations

import numpy as np

from imageforest.apps.bodyparts.depth import Camera
from imageforest.apps.bodyparts.joints import (
    _mean_shift,
    joint_modes,
    propose_joints,
    smooth_posteriors,
    true_part_posteriors,
)


def test_modes_of_two_clusters_ranked_by_weight():
    rng = np.random.default_rng(0)
    a = rng.normal([0, 0, 2000], 15, (300, 3))
    b = rng.normal([400, 0, 2500], 15, (100, 3))
    modes, weights = joint_modes(np.r_[a, b], np.ones(400), 65.0, 5)
    assert len(modes) == 2
    assert np.linalg.norm(modes[0] - [0, 0, 2000]) < 10 and np.linalg.norm(modes[1] - [400, 0, 2500]) < 10
    assert weights[0] == 300 and weights[1] == 100
    assert len(joint_modes(np.zeros((0, 3)), np.zeros(0), 65.0, 5)[0]) == 0


def _brute_force_mean_shift(seeds, points, weights, bandwidth, max_iter):
    """Every point read at every step (the kernel cut at 3 bandwidths, as the library's)."""
    modes = seeds.copy()
    for s in range(len(seeds)):
        x = modes[s]
        for _ in range(max_iter):
            q = ((points - x) ** 2).sum(axis=1) / bandwidth**2
            k = np.where(q < 9.0, weights * np.exp(-q), 0.0)
            if k.sum() <= 0.0:
                break
            new = (k[:, None] * points).sum(axis=0) / k.sum()
            step = ((new - x) ** 2).sum()
            x = new
            if step < (1e-3 * bandwidth) ** 2:
                break
        modes[s] = x
    return modes


def test_mean_shift_reads_only_nearby_cells_and_finds_the_same_modes():
    # points spread over metres (a map whose background was not removed): the bucketed search must climb to
    # the modes that reading every point finds
    rng = np.random.default_rng(1)
    points = np.r_[rng.uniform([-1500, -1000, 1000], [1500, 1000, 4000], (3000, 3)),
                   rng.normal([200, -100, 2500], 40, (500, 3)), rng.normal([-900, 600, 1200], 30, (300, 3))]
    weights = rng.uniform(0.5, 2.0, len(points))
    seeds = points[rng.choice(len(points), 60, replace=False)]
    got = _mean_shift(seeds, points, weights, 65.0, 30)
    want = _brute_force_mean_shift(seeds, points, weights, 65.0, 30)
    assert np.allclose(got, want, rtol=0, atol=1e-6)
    # a seed out of every point's reach (outside the bucket grid too) stays where it is
    far = np.array([[5000.0, 5000.0, 9000.0], [200.0, -100.0, 2450.0]])
    got = _mean_shift(far, points, weights, 65.0, 30)
    assert np.array_equal(got[0], far[0]) and np.linalg.norm(got[1] - [200, -100, 2500]) < 15


def test_proposals_from_part_maps_are_pushed_along_the_ray():
    cam = Camera.kinect(320, 240)
    labels = np.zeros((240, 320), dtype=np.uint8)
    labels[100:120, 150:170] = 1  # a patch of part 1 facing the camera 2 m away
    labels[180:185, 40:45] = 2  # a smaller patch of part 2
    depth = np.where(labels > 0, 2000.0, 0.0)
    post, yx = true_part_posteriors(labels, 2)
    found = propose_joints(post, yx, depth[yx[:, 0], yx[:, 1]], cam, {"a": [1], "b": [2], "ab": [1, 2]},
                           {"a": 50.0}, bandwidth_mm=65.0)
    a = found["a"][0]
    assert abs(a.position_mm[2] - 2050.0) < 1e-6  # the mode on the surface, 50 mm deeper
    assert np.allclose(a.pixel, (160.0, 110.0), atol=0.6)  # the patch's centre, seen through the same ray
    area = 400 * (200.0 ** 2) / (cam.fx * cam.fy)  # 400 pixels at 2 m, cm^2
    assert abs(a.confidence - area) < 1e-6 * area
    assert len(found["ab"]) == 2 and found["ab"][0].confidence > found["ab"][1].confidence
    assert abs(found["b"][0].position_mm[2] - 2000.0) < 1e-6  # no push learnt for b


def test_smoothing_averages_each_pixel_over_its_body_window():
    rng = np.random.default_rng(4)
    mask = rng.random((23, 31)) < 0.6
    yy, xx = np.nonzero(mask)
    post = rng.random((yy.size, 5)).astype(np.float32)
    post /= post.sum(axis=1, keepdims=True)
    radius = 3
    got = smooth_posteriors(post, np.c_[yy, xx] + (40, 7), radius)  # anywhere in a frame
    grid = np.zeros((23, 31, 5))
    grid[yy, xx] = post
    for i in range(0, yy.size, 5):
        window = (np.abs(yy - yy[i]) <= radius) & (np.abs(xx - xx[i]) <= radius)
        want = post[window].astype(np.float64).mean(axis=0)
        assert np.allclose(got[i], want, atol=1e-5)
    assert np.allclose(got.sum(axis=1), 1.0, atol=1e-5)
