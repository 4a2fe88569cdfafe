"""Block-Gaussian regression objective (one 6-D block per organ, NaN blocks missing): the lifted, node-major
split search must score splits exactly as the per-candidate search does."""

import numpy as np

from imageforest.forest.objectives import GAUSSIAN, Objective, lift_rows
from imageforest.forest.split_search import binned_gain_table, lifted_gain_table, partition_configs


def _problem(seed=0, n=400, rho=5, k=6, n_blocks=3, q=6):
    rng = np.random.default_rng(seed)
    targets = rng.normal(size=(n, n_blocks * q)) * 20
    targets[rng.random(n) < 0.3, 0:q] = np.nan  # block 0 missing for 30% of points
    targets[:, q:2 * q] += np.where(rng.random(n) < 0.5, 40.0, 0.0)[:, None]
    seg_end = np.array([150, 400], dtype=np.int64)
    seg_start = np.array([0, 150], dtype=np.int64)
    resp = rng.normal(size=(rho, n)).astype(np.float32)
    samples = rng.permutation(n).astype(np.int32)
    wts = rng.integers(1, 3, n).astype(np.float64)
    thr = np.sort(rng.normal(size=(2, rho, k)).astype(np.float32), axis=2)
    return targets, seg_start, seg_end, resp, samples, wts, thr, n_blocks, q


def test_lifted_search_matches_per_candidate_search():
    targets, seg_start, seg_end, resp, samples, wts, thr, n_blocks, q = _problem()
    obj = Objective.regression(targets, "gaussian", block_size=q, variance_floor=4.0)
    assert obj.lifted is not None and obj.lifted.shape == (targets.shape[0], obj.n_stats)
    configs = partition_configs(thr.shape[2], False)
    plain = binned_gain_table(resp, seg_start, seg_end, samples, wts, thr, configs, GAUSSIAN, obj.labels,
                              obj.targets, n_blocks, q, obj.n_stats, obj.reg, 5)
    lifted = lifted_gain_table(resp, seg_start, seg_end, samples, wts, thr, configs, GAUSSIAN, obj.lifted,
                               n_blocks, q, obj.n_stats, obj.reg, 5)
    assert np.array_equal(np.isfinite(plain), np.isfinite(lifted))
    np.testing.assert_allclose(lifted[np.isfinite(lifted)], plain[np.isfinite(plain)], rtol=1e-7, atol=1e-9)
    assert np.isfinite(plain).any()


def test_lifted_rows_leave_missing_blocks_out():
    y = np.array([[1.0, 2.0, np.nan, np.nan], [3.0, 4.0, 5.0, 6.0]])
    rows = lift_rows(y, 2, 2)
    stride = 1 + 2 + 4
    assert rows[0, stride] == 0 and np.all(rows[0, stride:] == 0)  # the missing block adds nothing
    np.testing.assert_array_equal(rows[1, stride:], [1, 5, 6, 25, 30, 30, 36])
    np.testing.assert_array_equal(rows[0, :stride], [1, 1, 2, 1, 2, 2, 4])


def test_absolute_variance_floor():
    y = np.random.default_rng(0).normal(size=(50, 12))
    assert np.all(Objective.regression(y, "gaussian", block_size=6, variance_floor=16.0).reg == 16.0)
