"""Hough voting, peaks, overlaps and non-maximum suppression."""

from __future__ import annotations

import numpy as np

from imageforest.voting.hough import box_iou, cast_votes, hough_peaks, non_maximum_suppression


def test_votes_land_at_pixel_plus_offset_with_their_weights_and_sizes():
    # leaf 0: two votes; leaf 1: none; leaf 2: one vote
    vote_start = np.array([0, 2, 2, 3], dtype=np.int64)
    votes = np.array([[2, 1, 10, 20], [-1, 0, 30, 40], [0, 0, 5, 5]], dtype=np.float32)
    weight = np.array([0.25, 1.0, 2.0], dtype=np.float32)
    leaves = np.array([[0, 2], [1, 1], [0, 0]], dtype=np.int32)
    ys, xs = np.array([3, 0, 9]), np.array([4, 0, 9])
    acc = cast_votes(leaves, ys, xs, vote_start, votes, weight, (10, 10))
    expected = np.zeros((10, 10))
    expected[4, 6] += 0.25
    expected[3, 3] += 0.25
    expected[3, 4] += 2.0
    # pixel (9, 9) votes at (10, 11) and (9, 8) twice (both trees): the first falls outside
    expected[9, 8] += 0.5
    assert np.allclose(acc[0], expected)
    assert acc[1, 3, 4] == 2.0 * 5 and acc[2, 4, 6] == 0.25 * 20 and acc[1, 9, 8] == 0.5 * 30


def test_peaks_are_local_maxima_strongest_first():
    h = np.zeros((20, 20), np.float32)
    h[5, 5], h[5, 7], h[15, 15] = 3.0, 2.0, 1.0
    assert hough_peaks(h, 3, 0.0, 10).tolist() == [[5, 5], [15, 15]]
    assert hough_peaks(h, 1, 1.5, 10).tolist() == [[5, 5], [5, 7]]


def test_iou_and_suppression():
    a = np.array([[0, 0, 10, 10], [5, 0, 15, 10], [20, 20, 30, 30]])
    assert box_iou(a[0], a[1])[0, 0] == 50 / 150
    assert box_iou(a[0], a[2])[0, 0] == 0
    assert non_maximum_suppression(a, np.array([1.0, 2.0, 0.5]), 0.3).tolist() == [1, 2]
    assert non_maximum_suppression(a, np.array([1.0, 2.0, 0.5]), 0.5).tolist() == [1, 0, 2]


def test_boxes_inside_a_stronger_box_can_be_suppressed():
    big, part = np.array([0, 0, 100, 80]), np.array([10, 10, 40, 40])
    boxes, scores = np.stack([big, part]), np.array([2.0, 1.0])
    assert non_maximum_suppression(boxes, scores, 0.3).tolist() == [0, 1]
    assert non_maximum_suppression(boxes, scores, 0.3, inside=0.6).tolist() == [0]
