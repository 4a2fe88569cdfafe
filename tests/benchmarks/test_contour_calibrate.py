"""The contour posteriors' calibration fit: Platt's scaling on the logit recovers a known map."""

import numpy as np

from benchmarks.contour.calibrate import fit_pair, reliability


def test_fit_pair_recovers_the_map_that_made_the_labels():
    rng = np.random.default_rng(0)
    s = rng.uniform(0.01, 0.99, 200_000)
    a, b = 0.7, -0.9  # an over-confident share: the truth is sigmoid(a logit(s) + b)
    p = 1 / (1 + np.exp(-(a * np.log(s / (1 - s)) + b)))
    t = (rng.random(s.size) < p).astype(float)
    fa, fb = fit_pair(s, t, np.ones_like(s))
    assert abs(fa - a) < 0.03 and abs(fb - b) < 0.03
    before, _ = reliability(s, t)
    after, bins = reliability(1 / (1 + np.exp(-(fa * np.log(s / (1 - s)) + fb))), t)
    assert after < before / 5 and after < 0.01
    assert all(abs(mean - hit) < 0.03 for mean, hit, n in bins if n > 1000)


def test_weights_stand_for_the_voxels_left_out():
    rng = np.random.default_rng(1)
    s = rng.uniform(0.01, 0.99, 100_000)
    t = (rng.random(s.size) < s).astype(float)  # already calibrated
    keep = (s > 0.3) | (rng.random(s.size) < 0.1)  # low shares sampled one in ten, weighed ten
    a, b = fit_pair(s[keep], t[keep], np.where(s[keep] > 0.3, 1.0, 10.0))
    assert abs(a - 1) < 0.05 and abs(b) < 0.05
