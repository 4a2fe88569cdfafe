"""The sorted split search (running sums, O(1) per boundary) chooses exactly what the generic one chooses."""

import numpy as np
import pytest

from imageforest.forest.objectives import ENTROPY, GINI, SQUARED_ERROR
from imageforest.forest.split_search import (
    RADIX_BITS,
    RADIX_MIN,
    _sorted_keys,
    exhaustive_best,
    exhaustive_best_sorted,
    sorted_search_applies,
)


@pytest.mark.parametrize("criterion", [ENTROPY, GINI, SQUARED_ERROR])
def test_sorted_search_matches_the_generic_search(criterion):
    rng = np.random.default_rng(criterion)
    sizes = np.r_[rng.integers(1, 150, 40), 2500]  # the last node is sorted by radix, the others by comparison
    seg_end = np.cumsum(sizes)
    seg_start = np.r_[0, seg_end[:-1]]
    m = int(seg_end[-1])
    # responses on a coarse grid (many ties) with negative values and zeros of both signs
    resp = np.round(rng.normal(size=(4, m)), 1).astype(np.float32)
    resp[0, ::7] = -0.0
    rows = rng.permutation(m).astype(np.int32)  # statistics read through an index, as for ungathered targets
    weights = rng.integers(0, 3, m).astype(np.float64)  # bootstrap counts, zeros included
    labels = rng.integers(0, 5, m).astype(np.int32)  # the trainer's dtypes: its compiled kernels serve the test
    targets = rng.normal(size=(m, 1))
    targets[::13] = np.nan  # missing targets count for the node's weight, not its statistics
    regression = criterion == SQUARED_ERROR
    n_stats = 3 if regression else 5
    labels = labels[:0] if regression else labels
    assert sorted_search_applies(criterion, 1, 1)
    g1, t1 = exhaustive_best(resp, seg_start, seg_end, rows, weights, criterion, labels, targets, 1, 1, n_stats,
                             np.zeros(2), 3)
    g2, t2 = exhaustive_best_sorted(resp, seg_start, seg_end, rows, weights, criterion, labels, targets, n_stats, 3)
    assert np.array_equal(np.isfinite(g1), np.isfinite(g2)) and np.isfinite(g1).sum() > 50
    finite = np.isfinite(g1)
    np.testing.assert_allclose(g2[finite], g1[finite], rtol=1e-9, atol=1e-12)
    # the same boundary, but where two boundaries tie to the last bits (the gains above agree either way)
    assert np.mean(t1[finite] == t2[finite]) > 0.97


def test_sorted_search_is_for_running_sum_objectives_only():
    assert not sorted_search_applies(SQUARED_ERROR, 1, 2)
    assert not sorted_search_applies(SQUARED_ERROR, 2, 1)


@pytest.mark.parametrize("whole", [True, False])
def test_entropy_from_the_x_log_x_table_gives_the_same_bits(whole, monkeypatch):
    """Whole-number weights read x log x from a table (`_xlogx_table`), other weights compute it: either way the
    gains and thresholds are those of the computed logarithms, bit for bit."""
    from imageforest.forest import split_search

    rng = np.random.default_rng(7)
    sizes = np.r_[rng.integers(2, 120, 30), 1500]
    seg_end = np.cumsum(sizes)
    seg_start = np.r_[0, seg_end[:-1]]
    m = int(seg_end[-1])
    resp = rng.normal(size=(3, m)).astype(np.float32)
    rows = rng.permutation(m).astype(np.int32)
    weights = rng.integers(0, 4, m).astype(np.float64) if whole else rng.uniform(0.2, 2.0, m)
    labels = rng.integers(0, 7, m).astype(np.int32)
    args = (resp, seg_start, seg_end, rows, weights, ENTROPY, labels, np.zeros((0, 0)), 7, 2)
    assert (split_search._heaviest_whole_segment(weights, seg_start, seg_end) >= 0) is whole
    g1, t1 = exhaustive_best_sorted(*args)
    monkeypatch.setattr(split_search, "XLOGX_TABLE_MAX", -1.0)  # no table: every x log x computed
    g2, t2 = exhaustive_best_sorted(*args)
    assert np.isfinite(g1).sum() > 20
    assert np.array_equal(g1, g2) and np.array_equal(t1, t2)


@pytest.mark.parametrize("kind", ["whole numbers", "coarse grid", "continuous", "wide exponents"])
def test_sorted_keys_sort_values_then_positions_whatever_the_sort(kind):
    """Insertion, comparison and radix sorts (8- or 11-bit digits, digits every key shares skipped) all leave the
    keys as one full sort of (value, position) does."""
    rng = np.random.default_rng(7)
    spare = np.empty(6000, dtype=np.uint64)
    counts = np.empty(1 << RADIX_BITS, dtype=np.int64)
    for n in (5, 17, 30, RADIX_MIN, 200, 1100, 5000):
        if kind == "whole numbers":
            v = rng.integers(0, 16, n)
        elif kind == "coarse grid":
            v = np.round(rng.normal(size=n), 1)
            v[::5] = -0.0
        elif kind == "continuous":
            v = rng.random(n)
        else:
            v = rng.normal(size=n) * 10.0 ** rng.integers(-30, 30, n)
        v = v.astype(np.float32)
        keys = np.empty(n, dtype=np.uint64)
        assert _sorted_keys(v.view(np.uint32), 0, n, keys, spare, counts)
        bits = v.view(np.uint32).astype(np.uint64)
        flipped = np.where(bits >> np.uint64(31), bits ^ np.uint64(0xFFFFFFFF), bits | np.uint64(0x80000000))
        assert np.array_equal(keys, np.sort((flipped << np.uint64(32)) | np.arange(n, dtype=np.uint64)))
        assert np.all(np.diff(v[(keys & np.uint64(0xFFFFFFFF)).astype(np.int64)]) >= 0)
    same = np.full(300, 2.5, dtype=np.float32)
    assert not _sorted_keys(same.view(np.uint32), 0, 300, np.empty(300, dtype=np.uint64), spare, counts)
