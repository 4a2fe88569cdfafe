"""Flat forest storage: forests grown apart joined into one."""

import numpy as np
import pytest

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


@pytest.mark.parametrize("compiled", [False, True])
def test_depth_first_walk_refuses_malformed_structures(compiled, monkeypatch):
    """Children stored before their parent (a cycle), shared children and roots outside the forest end in a
    ModelFormatError before any walk (numpy or compiled), never in a read outside the arrays."""
    from imageforest.exceptions import ModelFormatError
    from imageforest.forest import storage
    from imageforest.forest.storage import _preorder

    monkeypatch.setattr(storage, "COMPILED_WALK_MIN", 0 if compiled else 10**9)

    good = np.array([1, -1, 3, -2, -3], dtype=np.int32)  # root 0 -> (1, 2); 2 -> (3, 4)
    pos, leaves = _preorder(good, np.array([0], dtype=np.int32))
    assert pos.tolist() == [0, 1, 2, 3, 4] and leaves.tolist() == [1, 3, 4]
    for child, roots in (
        (np.array([1, -1, 0, -2, -3], dtype=np.int32), [0]),  # node 2's children are 0 and 1: backwards
        (np.array([1, 1, -1, -2], dtype=np.int32), [0]),  # node 1 is its own child
        (np.array([1, -1, 1, -2, -3], dtype=np.int32), [0]),  # backwards, shared
        (good, [7]),
        (good, [-1]),
        (np.array([1, -1, -2, -3], dtype=np.int32), [0]),  # node 3 has no parent and is no root
    ):
        with pytest.raises(ModelFormatError):
            _preorder(child, np.array(roots, dtype=np.int32))


def test_compiled_and_numpy_depth_first_walks_agree(monkeypatch):
    """Large forests take the compiled walk, small ones the numpy one: the same layout either way."""
    from imageforest.forest import storage

    rng = np.random.default_rng(4)
    X = rng.normal(size=(2000, 5))
    y = (X[:, 0] * X[:, 1] > 0).astype(int)
    arrays = ClassificationForest(n_trees=7, random_state=3).fit(X, y).forest_
    monkeypatch.setattr(storage, "COMPILED_WALK_MIN", 10**9)
    numpy_walk = storage._preorder(arrays.child, arrays.tree_root)
    monkeypatch.setattr(storage, "COMPILED_WALK_MIN", 0)
    compiled_walk = storage._preorder(arrays.child, arrays.tree_root)
    for a, b in zip(numpy_walk, compiled_walk, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)
