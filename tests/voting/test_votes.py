"""Vote aggregation: grouping by leaf, ranking leaves by certainty, medians of the most certain leaves' votes."""

from __future__ import annotations

import numpy as np
import pytest

from imageforest.voting import Votes, median_and_spread, ranked_medians, ranked_order


@pytest.mark.parametrize("n_axes, n_outputs", [(3, 6), (2, 2), (3, 1)])
def test_ranked_medians_match_a_plain_reading_of_the_rule(n_axes: int, n_outputs: int):
    """Per output: reached leaves by increasing variance (ties by leaf id), taken whole until they hold `keep`
    votes; the estimate is the median of their votes (position along the output's axis + leaf mean), the spread
    1.4826 x MAD. Box walls are 6 outputs on 3 axes; an object centre in a picture 2 outputs on 2 axes."""
    rng = np.random.default_rng(3)
    axis = rng.integers(0, n_axes, n_outputs)
    for _ in range(8):
        n_leaves, n, n_trees = 300, int(rng.integers(20, 400)), int(rng.integers(1, 6))
        leaves = rng.integers(0, n_leaves, (n, n_trees))
        var = np.round(rng.random((n_leaves, n_outputs)), 1)  # ties
        var[rng.random(n_leaves) < 0.2] = np.inf  # leaves that must not vote
        mean = rng.normal(0, 10, (n_leaves, n_outputs))
        pos = rng.normal(0, 50, (n, n_axes))
        votes = Votes.group(leaves)
        valid = np.isfinite(var[leaves, 0])
        keeps = (max(1, int(0.05 * valid.sum())), max(1, int(0.4 * valid.sum())))
        medians, spreads = ranked_medians(ranked_order(var), mean, votes, votes.slots(n_leaves), pos, axis, keeps)
        assert medians.shape == spreads.shape == (2, n_outputs)
        # float16 variances (as model files hold them) are ordered by their bit patterns: same order
        var16 = var.astype(np.float16)
        assert np.array_equal(ranked_order(var16), ranked_order(var16.astype(np.float64)))
        for k in range(n_outputs):
            ids = np.unique(leaves)
            ids = ids[np.lexsort((ids, var[ids, k]))]
            for s, keep in enumerate(keeps):
                held = np.cumsum([np.sum(leaves == i) for i in ids])
                chosen = ids[:np.searchsorted(held, keep) + 1]
                rows, cols = np.nonzero(np.isin(leaves, chosen))
                v = pos[rows, axis[k]] + mean[leaves[rows, cols], k]
                assert medians[s, k] == np.median(v)  # exactly: the kernel's selection gives numpy's median
                assert spreads[s, k] == 1.4826 * np.median(np.abs(v - np.median(v)))


def test_votes_group_by_leaf_in_vote_order():
    leaves = np.array([[4, 1], [1, 4], [2, 1]])
    votes = Votes.group(leaves)
    assert votes.uniq.tolist() == [1, 2, 4] and votes.counts.tolist() == [3, 1, 2]
    assert votes.point[votes.start[0]:votes.start[1]].tolist() == [0, 1, 2]  # leaf 1's voters, in order
    assert votes.slots(6).tolist() == [-1, 0, 1, -1, 2, -1]


def test_median_and_spread_is_numpys():
    a = np.random.default_rng(0).normal(size=101)
    m, s = median_and_spread(a.copy(), a.size)
    assert m == np.median(a) and s == 1.4826 * np.median(np.abs(a - np.median(a)))
