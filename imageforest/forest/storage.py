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
from imageforest.forest.threads import run_ranges
from imageforest.kernels import njit

# Forests with more nodes than this take the compiled walk; smaller ones (a first fit, a shipped model being loaded)
# the numpy one, which compiles nothing.
COMPILED_WALK_MIN = 1_000_000


def _preorder(child: np.ndarray, tree_root: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Depth-first (preorder) position of every node, trees one after another, (n_nodes,) int32, and the leaves'
    node indices in that order, (n_leaves,) int32.

    Nodes shared between parents, stored before their parent, or unreachable from the roots raise
    ModelFormatError. Up to COMPILED_WALK_MIN nodes, level by level in numpy (one pass down for the levels, one up
    for subtree sizes, one down for positions): O(depth) array operations and nothing to compile, which keeps a new
    process's first fit and model load short; beyond, two compiled sweeps (0.8 s -> 0.2 s on 8 M nodes).
    """
    n = child.shape[0]
    roots = tree_root.astype(np.int64)
    if n > COMPILED_WALK_MIN:
        # the same checks in one compiled pass: on 20 M nodes numpy's took 0.7 s and a 320 MB temporary
        _raise_structure_error(_structure_error(child, roots))
        return _preorder_kernel(child, roots)
    split = np.flatnonzero(child >= 0)
    kids = child[split].astype(np.int64)
    if np.any(kids <= split) or np.any(kids + 1 >= n) or np.any((roots < 0) | (roots >= n)):
        _raise_structure_error(1)
    parents = np.bincount(np.concatenate([kids, kids + 1]), minlength=n)
    expected = np.ones(n, dtype=np.int64)
    expected[roots] = 0
    if not np.array_equal(parents, expected) or np.unique(roots).size != roots.size:
        _raise_structure_error(2)
    # every node has one parent stored before it, so following parents ends at a root: every node is reached once
    levels = []
    frontier = roots
    while frontier.size:
        inner = frontier[child[frontier] >= 0]
        levels.append(inner)
        left = child[inner].astype(np.int64)
        frontier = np.concatenate([left, left + 1])
    size = np.ones(n, dtype=np.int64)
    for inner in reversed(levels):
        left = child[inner]
        size[inner] = 1 + size[left] + size[left + 1]
    pos = np.empty(n, dtype=np.int64)
    pos[roots] = np.cumsum(size[roots]) - size[roots]
    for inner in levels:
        left = child[inner]
        pos[left] = pos[inner] + 1
        pos[left + 1] = pos[inner] + 1 + size[left]
    # pos is a permutation of 0..n-1: invert it (a scatter) rather than sort the leaves by it
    in_preorder = np.empty(n, dtype=np.int64)
    in_preorder[pos] = np.arange(n)
    return pos.astype(np.int32), in_preorder[child[in_preorder] < 0].astype(np.int32)


def _raise_structure_error(code: int) -> None:
    """Raise the ModelFormatError of a `_structure_error` code (0: none)."""
    if code == 1:
        raise ModelFormatError("forest arrays: a child is stored before its parent, or a node lies outside the forest")
    if code == 2:
        raise ModelFormatError("forest arrays: nodes are shared between parents or unreachable from the roots")


@njit(cache=True)
def _structure_error(child, roots):  # pragma: no cover - numba
    """`_preorder`'s checks in one pass: 1 if a child sits at or before its parent or a child or root lies outside
    the forest; 2 if a node has other than one parent (roots: none) or a root repeats; else 0."""
    n = child.shape[0]
    parents = np.zeros(n, dtype=np.int8)  # parents counted up to 2; 3 marks a root
    for j in range(n):
        c = child[j]
        if c >= 0:
            if c <= j or c + 1 >= n:
                return 1
            for k in range(c, c + 2):
                if parents[k] < 2:
                    parents[k] += 1
    for r in roots:
        if r < 0 or r >= n:
            return 1
    for r in roots:
        if parents[r] != 0:
            return 2
        parents[r] = 3
    for j in range(n):
        if parents[j] == 0 or parents[j] == 2:
            return 2
    return 0


@njit(cache=True)
def _preorder_kernel(child, tree_root):  # pragma: no cover - numba
    """`_preorder` of a checked forest: two sweeps over the nodes, whose parents sit before them."""
    n = child.shape[0]
    size = np.ones(n, dtype=np.int32)  # int32 tables (n < 2^31, node ids are int32): half the memory to touch
    for j in range(n - 1, -1, -1):  # children before parents: subtree sizes
        c = child[j]
        if c >= 0:
            size[j] = 1 + size[c] + size[c + 1]
    pos = np.empty(n, dtype=np.int32)
    acc = 0
    for t in range(tree_root.shape[0]):
        pos[tree_root[t]] = acc
        acc += size[tree_root[t]]
    n_leaves = 0
    for j in range(n):  # parents before children: positions
        c = child[j]
        if c >= 0:
            pos[c] = pos[j] + 1
            pos[c + 1] = pos[j] + 1 + size[c]
        else:
            n_leaves += 1
    in_preorder = size  # the sizes are no longer needed: their table takes the inverse permutation
    for j in range(n):
        in_preorder[pos[j]] = j
    leaves = np.empty(n_leaves, dtype=np.int32)
    k = 0
    for p in range(n):
        if child[in_preorder[p]] < 0:
            leaves[k] = in_preorder[p]
            k += 1
    return pos, leaves


def _axis_table_kernel(child, pos, params, thr_lo, thr_hi):
    """Rows [right, dim, thr_lo bits, thr_hi bits] at preorder positions (see `ForestArrays.packed_axis`); a split
    node's dimension is its parameter row's first entry (read in place: an int32 copy was 4 bytes per node more at
    the end of a fit)."""
    table = np.empty((child.shape[0], 4), dtype=np.int32)
    run_ranges(_axis_table_range, child.shape[0], child, pos, params, thr_lo, thr_hi, table, table.view(np.float32))
    return table


@njit(cache=True, nogil=True)
def _axis_table_range(j0, j1, child, pos, params, thr_lo, thr_hi, table, as_float):  # pragma: no cover - numba
    for j in range(j0, j1):
        p = pos[j]
        c = child[j]
        if c >= 0:
            table[p, 0] = pos[c + 1]
            table[p, 1] = np.int32(params[j, 0])
        else:
            table[p, 0] = c
            table[p, 1] = 0
        as_float[p, 2] = thr_lo[j]
        as_float[p, 3] = thr_hi[j]


def _compact_table_kernel(child, pos, params, thr_lo, thr_hi, width):
    """Rows [right, thr_lo bits, thr_hi bits, params as float32..., 0 padding] (`width` int32 words) at preorder
    positions (see `ForestArrays.packed_compact`)."""
    table = np.zeros((child.shape[0], width), dtype=np.int32)
    run_ranges(_compact_table_range, child.shape[0], child, pos, params, thr_lo, thr_hi, table,
               table.view(np.float32))
    return table


@njit(cache=True, nogil=True)
def _compact_table_range(j0, j1, child, pos, params, thr_lo, thr_hi, table, as_float):  # pragma: no cover - numba
    n_params = params.shape[1]
    for j in range(j0, j1):
        p = pos[j]
        c = child[j]
        table[p, 0] = pos[c + 1] if c >= 0 else c
        as_float[p, 1] = thr_lo[j]
        as_float[p, 2] = thr_hi[j]
        for k in range(n_params):
            as_float[p, 3 + k] = np.float32(params[j, k])


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

    def node_tree(self) -> np.ndarray:
        """Tree index of every node, (n_nodes,) int64, propagated from the roots level by level."""
        tree = np.full(self.n_nodes, -1, dtype=np.int64)
        tree[self.tree_root] = np.arange(self.n_trees)
        split = np.flatnonzero(self.child >= 0)
        split_depth = self.depth[split]
        for d in range(self.max_depth + 1):  # parents precede children: top-down labels every node
            nodes = split[split_depth == d]
            tree[self.child[nodes]] = tree[nodes]
            tree[self.child[nodes] + 1] = tree[nodes]
        return tree

    def packed(self) -> tuple[np.ndarray, np.ndarray]:
        """Traversal table and roots for `apply`: ((n_nodes, 4 + param_width) float64, (T,) int32).

        Rows are ``[left, right, thr_lo, thr_hi, params...]`` (``left = -leaf_id - 1`` at leaves), so a visit reads
        one cache line, and nodes are laid out depth-first per tree (storage interleaves trees level by level), so
        a root-to-leaf path stays local and one tree stays in cache while all points descend it. Child ids and
        float32 thresholds are exact in float64. Derived, never saved; built once per forest.
        """
        cached = self.__dict__.get("_packed")
        if cached is None:
            pos = self._preorder_positions()
            n = self.n_nodes
            table = np.empty((n, 4 + self.params.shape[1]))
            split = self.child >= 0
            left = np.where(split, 0, self.child).astype(np.float64)
            right = np.zeros(n)
            left[split] = pos[self.child[split]]
            right[split] = pos[self.child[split] + 1]
            table[pos, 0] = left
            table[pos, 1] = right
            table[pos, 2] = self.thr_lo
            table[pos, 3] = self.thr_hi
            table[pos, 4:] = self.params
            cached = (table, pos[self.tree_root].astype(np.int32))
            self.__dict__["_packed"] = cached
        return cached

    def packed_axis(self) -> tuple[np.ndarray, np.ndarray]:
        """Compact traversal table for axis-aligned tests: ((n_nodes, 4) int32, (T,) int32).

        Rows are ``[right, dim, thr_lo bits, thr_hi bits]`` in the depth-first layout of `packed`, where a split
        node's left child is the next row; ``right = -leaf_id - 1`` at leaves. The thresholds are float32 bit
        patterns (read through a float32 view), so a node is 16 bytes: a tree of ~60k nodes stays in L2 while
        all points descend it. Derived, never saved.
        """
        cached = self.__dict__.get("_packed_axis")
        if cached is None:
            pos = self._preorder_positions()
            table = _axis_table_kernel(self.child, pos, self.params, self.thr_lo, self.thr_hi)
            cached = (table, pos[self.tree_root].astype(np.int32))
            self.__dict__["_packed_axis"] = cached
            # the walk's positions are in the table now: 4 bytes per node less for the model's life (walked again
            # should anything else ask for them; its leaf list lives on as `leaf_node` after a fit's renumbering)
            self.__dict__.pop("_preorder", None)
        return cached

    def packed_compact(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Compact traversal table for tests whose parameters are float32 numbers: ((n_nodes, W) int32, (T,) int32),
        or None when some parameter is not.

        Rows are ``[right, thr_lo bits, thr_hi bits, params...]`` (the thresholds and parameters as float32 bit
        patterns, read through a float32 view), padded to W = 8 or a multiple of 8 words, in the depth-first
        layout of `packed`: a split node's left child is the next row; ``right = -leaf_id - 1`` at leaves. Half the
        bytes of `packed` for four parameters (two nodes per cache line), with the same values. Derived, never
        saved.
        """
        cached = self.__dict__.get("_packed_compact")
        if cached is None:
            exact = np.array_equal(self.params.astype(np.float32).astype(np.float64), self.params)
            if exact:
                width = -(-(3 + self.params.shape[1]) // 8) * 8
                pos = self._preorder_positions()
                table = _compact_table_kernel(self.child, pos, self.params, self.thr_lo, self.thr_hi, width)
                cached = (table, pos[self.tree_root].astype(np.int32))
            else:
                cached = False
            self.__dict__["_packed_compact"] = cached
        return cached or None

    def _preorder_positions(self) -> np.ndarray:
        """Depth-first (preorder) position of every node, trees one after another: (n_nodes,) int32."""
        return self._preorder_walk()[0]

    def leaves_depth_first(self) -> np.ndarray:
        """Node index of every leaf in depth-first order (left child first), trees one after another: (n_leaves,)
        int32. Renumbering leaves (changing `child` at leaves only) leaves it valid."""
        return self._preorder_walk()[1]

    def _preorder_walk(self) -> tuple[np.ndarray, np.ndarray]:
        cached = self.__dict__.get("_preorder")
        if cached is None:
            cached = _preorder(self.child, self.tree_root)
            self.__dict__["_preorder"] = cached
        return cached

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

    @classmethod
    def concatenate(cls, forests: list[ForestArrays]) -> ForestArrays:
        """Forests grown apart (e.g. as separate jobs) as one: their trees, nodes and leaves in the order given."""
        if not forests:
            raise ValueError("concatenate needs at least one forest")
        node_base = np.cumsum([0] + [f.n_nodes for f in forests[:-1]])
        leaf_base = np.cumsum([0] + [f.n_leaves for f in forests[:-1]])
        tree_base = np.cumsum([0] + [f.n_trees for f in forests[:-1]])
        child = [np.where(f.child >= 0, f.child + nb, f.child - lb)
                 for f, nb, lb in zip(forests, node_base, leaf_base, strict=True)]
        return cls(params=np.concatenate([f.params for f in forests]),
                   thr_lo=np.concatenate([f.thr_lo for f in forests]),
                   thr_hi=np.concatenate([f.thr_hi for f in forests]),
                   child=np.concatenate(child).astype(np.int32),
                   depth=np.concatenate([f.depth for f in forests]),
                   gain=np.concatenate([f.gain for f in forests]),
                   weight=np.concatenate([f.weight for f in forests]),
                   tree_root=np.concatenate([f.tree_root + nb for f, nb in zip(forests, node_base, strict=True)]
                                            ).astype(np.int32),
                   leaf_node=np.concatenate([f.leaf_node + nb for f, nb in zip(forests, node_base, strict=True)]
                                            ).astype(np.int32),
                   leaf_tree=np.concatenate([f.leaf_tree + tb for f, tb in zip(forests, tree_base, strict=True)]
                                            ).astype(np.int32))

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
            if arrays[key].dtype != dtype:  # written with exactly these types: another is a damaged or forged file
                raise ModelFormatError(f"model array '{key}' has dtype {arrays[key].dtype}, not {np.dtype(dtype)}")
            values[name] = np.ascontiguousarray(arrays[key])
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
        # A NaN threshold sends every point one way (every comparison is false): a forged model would answer with
        # one leaf per tree. Thresholds may be infinite (one-sided tests); parameters and weights may not.
        if np.isnan(self.thr_lo[split]).any() or np.isnan(self.thr_hi[split]).any():
            raise ModelFormatError("forest arrays: a split's threshold is NaN")
        if not np.all(np.isfinite(self.params[split])):
            raise ModelFormatError("forest arrays: a split's weak-learner parameters are not finite")
        if not (np.all(np.isfinite(self.weight)) and np.all(self.weight >= 0)):
            raise ModelFormatError("forest arrays: node weights must be finite and non-negative")
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
