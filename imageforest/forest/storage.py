"""All trees of a forest in one set of flat arrays.

Nodes of every tree live in the same arrays, appended level by level as the trainer grows the forest. The two
children of a split node are always stored side by side, so one `child` array encodes the whole structure:

- ``child[j] >= 0``: node j is a split node; its left child is ``child[j]``, its right child ``child[j] + 1``.
- ``child[j] < 0``: node j is a leaf with forest-wide leaf id ``-child[j] - 1``.

A point goes left when ``thr_lo[j] < f <= thr_hi[j]`` (the two-sided test tau2 < f <= tau1 of eq. 2.5; a one-sided
test has ``thr_lo = -inf``). Responses and thresholds are compared in float32 at training and at test time alike.
Leaf models live in separate arrays indexed by leaf id.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from imageforest.exceptions import ModelFormatError


@dataclass
class ForestArrays:
    """Flat storage of T trees.

    Attributes
    ----------
    params : (n_nodes, param_width) float64
        Weak-learner parameter row of each node (meaning fixed by the feature family; zeros for leaves).
    thr_lo, thr_hi : (n_nodes,) float32
        Thresholds of the two-sided test; +-inf for an open side.
    child : (n_nodes,) int32
        Left child index for split nodes, ``-leaf_id - 1`` for leaves.
    depth : (n_nodes,) int32
        Depth of each node (roots at 0).
    gain : (n_nodes,) float32
        Information gain of the chosen split (0 at leaves), for feature importances.
    weight : (n_nodes,) float64
        Total training weight that reached the node.
    tree_root : (T,) int32
        Node index of each tree's root.
    leaf_node : (n_leaves,) int32
        Node index of each leaf.
    leaf_tree : (n_leaves,) int32
        Tree of each leaf.
    """

    params: np.ndarray
    thr_lo: np.ndarray
    thr_hi: np.ndarray
    child: np.ndarray
    depth: np.ndarray
    gain: np.ndarray
    weight: np.ndarray
    tree_root: np.ndarray
    leaf_node: np.ndarray
    leaf_tree: np.ndarray

    @property
    def n_nodes(self) -> int:
        return int(self.child.shape[0])

    @property
    def n_trees(self) -> int:
        return int(self.tree_root.shape[0])

    @property
    def n_leaves(self) -> int:
        return int(self.leaf_node.shape[0])

    @property
    def max_depth(self) -> int:
        return int(self.depth.max()) if self.depth.size else 0

    def to_arrays(self, prefix: str = "forest.") -> dict[str, np.ndarray]:
        """Arrays for an `.npz` file, keyed ``prefix + field``."""
        return {prefix + f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], prefix: str = "forest.") -> ForestArrays:
        """Rebuild from `to_arrays` output, validating dtypes, shapes and every index.

        Raises
        ------
        ModelFormatError
            When an array is missing or the structure is inconsistent (a traversal could leave the arrays).
        """
        dtypes = {
            "params": np.float64, "thr_lo": np.float32, "thr_hi": np.float32, "child": np.int32,
            "depth": np.int32, "gain": np.float32, "weight": np.float64, "tree_root": np.int32,
            "leaf_node": np.int32, "leaf_tree": np.int32,
        }
        values = {}
        for name, dtype in dtypes.items():
            key = prefix + name
            if key not in arrays:
                raise ModelFormatError(f"model file lacks the array '{key}'")
            values[name] = np.ascontiguousarray(arrays[key], dtype=dtype)
        forest = cls(**values)
        forest.validate()
        return forest

    def validate(self) -> None:
        """Check that every traversal stays inside the arrays and ends at a leaf."""
        n = self.n_nodes
        if self.params.ndim != 2 or self.params.shape[0] != n:
            raise ModelFormatError("forest arrays: params must have one row per node")
        for name in ("thr_lo", "thr_hi", "depth", "gain", "weight"):
            if getattr(self, name).shape != (n,):
                raise ModelFormatError(f"forest arrays: '{name}' must have one entry per node")
        if n == 0 or self.n_trees == 0:
            raise ModelFormatError("forest arrays: the forest has no trees")
        child = self.child
        split = child >= 0
        # Children sit after their parent, so traversal always moves forward and terminates.
        if np.any(child[split] + 1 >= n) or np.any(child[split] <= np.flatnonzero(split)):
            raise ModelFormatError("forest arrays: a child index points outside the forest or backwards")
        leaf_ids = -child[~split] - 1
        n_leaves = self.n_leaves
        if leaf_ids.size != n_leaves or not np.array_equal(np.sort(leaf_ids), np.arange(n_leaves)):
            raise ModelFormatError("forest arrays: leaf ids are not a permutation of 0..n_leaves-1")
        if np.any(self.tree_root < 0) or np.any(self.tree_root >= n):
            raise ModelFormatError("forest arrays: a tree root lies outside the forest")
        if self.leaf_node.shape != (n_leaves,) or self.leaf_tree.shape != (n_leaves,):
            raise ModelFormatError("forest arrays: leaf tables have the wrong length")
        if np.any(self.leaf_node < 0) or np.any(self.leaf_node >= n):
            raise ModelFormatError("forest arrays: a leaf points outside the forest")
        if np.any(self.leaf_tree < 0) or np.any(self.leaf_tree >= self.n_trees):
            raise ModelFormatError("forest arrays: a leaf names a tree that does not exist")
