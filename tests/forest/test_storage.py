"""Flat forest storage: forests grown apart joined into one."""

import numpy as np

from imageforest import ClassificationForest
from imageforest.forest.storage import ForestArrays


def test_concatenated_forests_route_every_point_as_their_parts_did():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 4))
    y = (X[:, 0] + X[:, 1] > 0).astype(int)
    a = ClassificationForest(n_trees=2, max_depth=5, random_state=1).fit(X, y)
    b = ClassificationForest(n_trees=3, max_depth=7, random_state=2).fit(X, y)
    joined = ForestArrays.concatenate([a.forest_, b.forest_])
    joined.validate()
    assert (joined.n_trees, joined.n_nodes, joined.n_leaves) == (5, a.forest_.n_nodes + b.forest_.n_nodes,
                                                                  a.forest_.n_leaves + b.forest_.n_leaves)
    a.family_.prepare_apply(joined)
    leaves = a.family_.apply(X, joined)
    assert np.array_equal(leaves, np.c_[a.apply(X), b.apply(X) + a.forest_.n_leaves])
