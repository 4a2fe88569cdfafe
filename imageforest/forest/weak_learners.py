"""Weak learners for feature vectors: axis-aligned, oblique and conic (Criminisi et al. 2012, sec. 2.3.3, eq. 2.5).

Parameter rows (float64, width fixed per kind):

- axis:    ``[d]``, f(v) = v[d]
- oblique: ``[d1, d2, w1, w2]``, f(v) = w1 u[d1] + w2 u[d2]
- conic:   ``[d1, d2, c1, c2, a11, a12, a22]``, f(v) = (u - c)^T A (u - c) over the two dimensions

where u = (v - mean) / std is the standardised input (the statistics of the training data, stored with the model),
so random oblique and conic parameters are drawn on the scale of the data. With the two-sided test tau2 < f <= tau1
a conic learner selects an elliptic or hyperbolic band, as in Fig. 2.4(c).
"""

from __future__ import annotations

import numpy as np

from imageforest.exceptions import InvalidInputError
from imageforest.forest.features import FeatureFamily
from imageforest.forest.row_split_search import _pairs_by_row
from imageforest.forest.storage import ForestArrays
from imageforest.forest.threads import run_ranges
from imageforest.kernels import njit

AXIS, OBLIQUE, CONIC = 0, 1, 2
KINDS = {"axis": AXIS, "oblique": OBLIQUE, "conic": CONIC}
PARAM_WIDTH = {AXIS: 1, OBLIQUE: 4, CONIC: 7}


@njit(cache=True, inline="always")
def _response(kind: int, row: np.ndarray, x: np.ndarray, mean: np.ndarray, inv_std: np.ndarray) -> float:
    if kind == AXIS:
        return x[int(row[0])]
    d1 = int(row[0])
    d2 = int(row[1])
    u1 = (x[d1] - mean[d1]) * inv_std[d1]
    u2 = (x[d2] - mean[d2]) * inv_std[d2]
    if kind == OBLIQUE:
        return row[2] * u1 + row[3] * u2
    e1 = u1 - row[2]
    e2 = u2 - row[3]
    return row[4] * e1 * e1 + 2.0 * row[5] * e1 * e2 + row[6] * e2 * e2


def _responses_kernel(kind, X, mean, inv_std, params, samples, pos_set):
    """Responses (rho, M) float32 of each position's set of rho candidate learners."""
    out = np.empty((params.shape[1], samples.shape[0]), dtype=np.float32)
    run_ranges(_responses_range, samples.shape[0], kind, X, mean, inv_std, params, samples, pos_set, out)
    return out


@njit(cache=True, nogil=True)
def _responses_range(m0, m1, kind, X, mean, inv_std, params, samples, pos_set, out):  # pragma: no cover - numba
    rho = params.shape[1]
    for m in range(m0, m1):
        x = X[samples[m]]
        s = pos_set[m]
        for c in range(rho):
            out[c, m] = np.float32(_response(kind, params[s, c], x, mean, inv_std))


def _axis_responses_kernel(XT, dims, samples, pos_set):
    """Axis learners are a plain gather from the feature-major copy: out[c, m] = XT[dims[set, c], samples[m]].

    When each set's positions are contiguous (as the trainer lays them out), (set, candidate) pairs are visited
    grouped by feature: a thread then reads one feature row at a time, which stays in L2, instead of hopping across
    rho rows for every point (deep levels scatter a chunk's points over the whole row).
    """
    m_total = samples.shape[0]
    n_sets = dims.shape[0]
    out = np.empty((dims.shape[1], m_total), dtype=np.float32)
    if m_total > 1 and bool(np.any(pos_set[1:] < pos_set[:-1])):
        run_ranges(_gather_by_point, m_total, XT, dims, samples, pos_set, out)
        return out
    start = np.zeros(n_sets + 1, dtype=np.int64)
    np.cumsum(np.bincount(pos_set, minlength=n_sets), out=start[1:])
    by_feature = _pairs_by_row(dims)
    run_ranges(_gather_by_feature, by_feature.shape[0], XT, dims, samples, start, by_feature, out)
    return out


@njit(cache=True, nogil=True)
def _gather_by_point(m0, m1, XT, dims, samples, pos_set, out):  # pragma: no cover - numba
    rho = dims.shape[1]
    for m in range(m0, m1):
        i = samples[m]
        s = pos_set[m]
        for c in range(rho):
            out[c, m] = XT[dims[s, c], i]


@njit(cache=True, nogil=True)
def _gather_by_feature(p0, p1, XT, dims, samples, start, by_feature, out):  # pragma: no cover - numba
    rho = dims.shape[1]
    for p in range(p0, p1):
        pair = by_feature[p]
        s = pair // rho
        c = pair % rho
        row = XT[dims[s, c]]
        for m in range(start[s], start[s + 1]):
            out[c, m] = row[samples[m]]


def _apply_kernel(kind, X, mean, inv_std, packed, tree_root):
    """Leaf id per (point, tree), (n, T) int32; `packed` rows are [left, right, thr_lo, thr_hi, params...]
    (ForestArrays.packed)."""
    out = np.empty((X.shape[0], tree_root.shape[0]), dtype=np.int32)
    run_ranges(_apply_range, X.shape[0], kind, X, mean, inv_std, packed, tree_root, out)
    return out


@njit(cache=True, nogil=True)
def _apply_range(i0, i1, kind, X, mean, inv_std, packed, tree_root, out):  # pragma: no cover - numba
    """Points i0..i1-1. Trees are the outer loop: the points descend one tree while its nodes sit in cache,
    instead of every point walking the whole forest (which does not fit in cache for large models)."""
    for t in range(tree_root.shape[0]):
        root = tree_root[t]
        for i in range(i0, i1):
            x = X[i]
            node = root
            while packed[node, 0] >= 0.0:
                if kind == AXIS:
                    f = np.float64(x[int(packed[node, 4])])
                else:
                    f = np.float64(np.float32(_response(kind, packed[node, 4:], x, mean, inv_std)))
                go_left = f > packed[node, 2] and f <= packed[node, 3]
                node = int(packed[node, 0]) if go_left else int(packed[node, 1])
            out[i, t] = -int(packed[node, 0]) - 1


WALK_LANES = 8  # points one thread walks through a tree at once (6-16 measured alike; 1 is 2.5x slower)
WALK_BLOCK = 512  # points per parallel task; a block's leaf ids stay in L1


@njit(cache=True, inline="always")
def _axis_walk_block(xf, width, flat, thr, root, i0, i1, leaves):  # pragma: no cover - numba
    """Leaf ids reached from node `root` by points i0..i1-1 (features at xf[i * width:]), into leaves[:i1 - i0].

    Walks `packed_axis` rows (flat int32 `flat`, its float32 view `thr`). One root-to-leaf walk is a chain of
    dependent loads with an unpredictable branch per node (~6 ns a step), so WALK_LANES points descend together:
    each step advances every lane by one node with a branch-free select, letting the CPU overlap the lanes' loads,
    and a lane that reaches a leaf takes the block's next point (trees here are 25 levels deep on average but up to
    60, so lock-step to the deepest walk would waste most steps). Unsigned offsets drop negative-index checks.
    """
    four = np.uint64(4)
    one = np.uint64(1)
    two = np.uint64(2)
    three = np.uint64(3)
    node = np.empty(WALK_LANES, dtype=np.uint64)
    point = np.empty(WALK_LANES, dtype=np.int64)
    nxt = i0
    active = 0
    for lane in range(WALK_LANES):
        node[lane] = root
        if nxt < i1:
            point[lane] = nxt
            nxt += 1
            active += 1
        else:
            point[lane] = -1
    while active > 0:
        for lane in range(WALK_LANES):
            p = point[lane]
            if p < 0:
                continue
            row = node[lane] * four
            right = flat[row]
            if right < 0:  # a leaf: record it and start the block's next point in this lane
                leaves[p - i0] = -right - 1
                node[lane] = root
                if nxt < i1:
                    point[lane] = nxt
                    nxt += 1
                else:
                    point[lane] = -1
                    active -= 1
                continue
            f = xf[np.uint64(p) * width + np.uint64(flat[row + one])]
            go = np.uint64((f > thr[row + two]) & (f <= thr[row + three]))
            jump = np.uint64(right)
            node[lane] = jump + go * (node[lane] + one - jump)  # left child (next row) or right, without a branch


def _axis_walk_kernel(X, table, tree_root, leaf_table, average):
    """Walk every point through every tree of `ForestArrays.packed_axis` (16-byte nodes).

    With `average` False: the leaf id per (point, tree), (n, T) int32 (and an empty mean). With `average` True:
    the mean over trees of the leaf rows of `leaf_table` each point reaches, (n, k), without writing the (n, T)
    table; each point adds its rows in tree order, so the sums equal `tree_average`'s bit for bit.
    Each thread takes a range of point blocks and walks them tree after tree, so one tree's nodes stay in its
    cache while its points descend (`_axis_walk_block`).
    """
    n = X.shape[0]
    k = leaf_table.shape[1]
    ids = np.empty((0 if average else n, tree_root.shape[0]), dtype=np.int32)
    out = np.zeros((n if average else 0, k))
    flat = table.ravel()
    n_blocks = (n + WALK_BLOCK - 1) // WALK_BLOCK
    run_ranges(_axis_walk_range, n_blocks, X.ravel(), np.uint64(X.shape[1]), n, flat, flat.view(np.float32),
               tree_root, leaf_table, bool(average), ids, out)
    return ids, out


@njit(cache=True, nogil=True)
def _axis_walk_range(b0, b1, xf, width, n, flat, thr, tree_root, leaf_table, average, ids,
                     out):  # pragma: no cover - numba
    """`_axis_walk_kernel` for point blocks b0..b1."""
    n_trees = tree_root.shape[0]
    k = leaf_table.shape[1]
    leaves = np.empty(WALK_BLOCK, dtype=np.int32)
    for t in range(n_trees):
        root = np.uint64(tree_root[t])
        for b in range(b0, b1):
            i0 = b * WALK_BLOCK
            i1 = min(n, i0 + WALK_BLOCK)
            _axis_walk_block(xf, width, flat, thr, root, i0, i1, leaves)
            for i in range(i0, i1):
                leaf = leaves[i - i0]
                if average:
                    for c in range(k):
                        out[i, c] += leaf_table[leaf, c]
                else:
                    ids[i, t] = leaf
    if average:
        for i in range(b0 * WALK_BLOCK, min(n, b1 * WALK_BLOCK)):
            for c in range(k):
                out[i, c] /= n_trees


def partial_shuffle(u: np.ndarray, n: int) -> np.ndarray:
    """Distinct indices in [0, n) from uniforms u (n_sets, k) by a partial Fisher-Yates shuffle (k <= n): (n_sets, k)
    int32 (int64 beyond its range).

    Each set starts from the identity permutation; the k swaps are undone afterwards instead of rebuilding the
    permutation, so a set costs O(k), not O(n) (millions of sets per deep forest). Sets are independent, so the
    result does not depend on the thread count.
    """
    out = np.empty(u.shape, dtype=np.int32 if n <= np.iinfo(np.int32).max else np.int64)
    run_ranges(_partial_shuffle_range, u.shape[0], u, int(n), out, min_per_thread=4096)
    return out


@njit(cache=True, nogil=True)
def _partial_shuffle_range(s0, s1, u, n, out):  # pragma: no cover - numba
    k = u.shape[1]
    perm = np.arange(n)
    picked = np.empty(k, dtype=np.int64)
    for s in range(s0, s1):
        for j in range(k):
            r = j + min(int(u[s, j] * (n - j)), n - j - 1)
            picked[j] = r
            tmp = perm[j]
            perm[j] = perm[r]
            perm[r] = tmp
            out[s, j] = perm[j]
        for j in range(k - 1, -1, -1):  # undo in reverse order: perm is the identity again
            r = picked[j]
            tmp = perm[j]
            perm[j] = perm[r]
            perm[r] = tmp


class VectorFeatures(FeatureFamily):
    """Axis-aligned, oblique or conic weak learners over float32 vectors (n_samples, n_features).

    Parameters
    ----------
    kind : {"axis", "oblique", "conic"}
    n_features : int
    mean, std : (n_features,) arrays, optional
        Standardisation of the inputs for oblique and conic learners (training statistics).
    """

    name = "vector"

    def __init__(self, kind: str, n_features: int, mean: np.ndarray | None = None,
                 std: np.ndarray | None = None) -> None:
        if kind not in KINDS:
            raise InvalidInputError(f"weak_learner must be one of {sorted(KINDS)}, got {kind!r}")
        self.kind = kind
        self.code = KINDS[kind]
        self.n_features = int(n_features)
        if self.code != AXIS and self.n_features < 2:
            # An oblique or conic learner in one dimension degenerates to an axis test on a warped axis.
            raise InvalidInputError(f"the {kind} weak learner needs at least 2 features, got {n_features}")
        self.param_width = PARAM_WIDTH[self.code]
        self.mean = np.zeros(n_features) if mean is None else np.asarray(mean, dtype=np.float64)
        std = np.ones(n_features) if std is None else np.asarray(std, dtype=np.float64)
        self.inv_std = 1.0 / np.where(std > 0, std, 1.0)

    @classmethod
    def for_data(cls, kind: str, X: np.ndarray) -> VectorFeatures:
        """A family standardised on the training inputs X (n, d)."""
        return cls(kind, X.shape[1], X.mean(axis=0, dtype=np.float64), X.std(axis=0, dtype=np.float64))

    def sample(self, rng: np.random.Generator, n_sets: int, n_candidates: int) -> np.ndarray:
        d = self.n_features
        out = np.zeros((n_sets, n_candidates, self.param_width))
        if self.code == AXIS:
            out[:, :, 0] = self.sample_rows(rng, n_sets, n_candidates)
            return out
        flat = n_sets * n_candidates
        dims = partial_shuffle(rng.random((flat, 2)), d).reshape(n_sets, n_candidates, 2)
        out[:, :, :2] = dims
        if self.code == OBLIQUE:
            w = rng.standard_normal((n_sets, n_candidates, 2))
            w /= np.maximum(np.linalg.norm(w, axis=2, keepdims=True), 1e-12)
            out[:, :, 2:4] = w
        else:
            out[:, :, 2:4] = rng.uniform(-2.0, 2.0, (n_sets, n_candidates, 2))
            a = rng.standard_normal((n_sets, n_candidates, 3))
            a[:, :, 1] *= 0.5
            out[:, :, 4:7] = a
        return out

    def training_data(self, data: np.ndarray) -> np.ndarray:
        # A node's sample indices stay ascending (partitions are stable), so reading one feature of them walks a
        # feature-major row forward: far fewer cache lines than picking a few floats out of every sample row.
        return np.ascontiguousarray(data.T) if self.code == AXIS else data

    def responses(self, data, params, samples, pos_set):
        if self.code == AXIS:
            return _axis_responses_kernel(data, params[:, :, 0].astype(np.int64), samples, pos_set)
        return _responses_kernel(self.code, data, self.mean, self.inv_std, params, samples, pos_set)

    def response_matrix(self, data: np.ndarray) -> np.ndarray | None:
        return data if self.code == AXIS else None

    def point_matrix(self, data: np.ndarray) -> np.ndarray | None:
        ok = (self.code == AXIS and isinstance(data, np.ndarray) and data.dtype == np.float32
              and data.flags.c_contiguous)
        return data if ok else None

    def response_rows(self, params: np.ndarray) -> np.ndarray:
        return params[..., 0].astype(np.int64)

    def sample_draws(self, n_candidates: int) -> int | None:
        # an axis set takes one uniform per distinct feature; the other kinds' normal draws vary in count
        return min(n_candidates, self.n_features) if self.code == AXIS else None

    def sample_rows(self, rng: np.random.Generator, n_sets: int, n_candidates: int) -> np.ndarray:
        if self.code != AXIS:
            return super().sample_rows(rng, n_sets, n_candidates)
        d = self.n_features
        k = min(n_candidates, d)
        dims = partial_shuffle(rng.random((n_sets, k)), d)
        if k < n_candidates:  # more candidates than features: repeat features (thresholds still differ)
            dims = np.tile(dims, (1, -(-n_candidates // k)))[:, :n_candidates]
        return dims

    def row_params(self, rows: np.ndarray) -> np.ndarray:
        if self.code != AXIS:
            return super().row_params(rows)
        return np.asarray(rows, dtype=np.float64)[:, None]

    def prepare_apply(self, forest: ForestArrays) -> None:
        if self.code == AXIS:
            forest.packed_axis()
        else:
            forest.packed()

    def leaf_average(self, data: np.ndarray, forest: ForestArrays, leaf_table: np.ndarray) -> np.ndarray:
        if self.code == AXIS:
            table, roots = forest.packed_axis()
            return _axis_walk_kernel(data, table, roots, leaf_table, True)[1]
        return super().leaf_average(data, forest, leaf_table)

    def apply(self, data: np.ndarray, forest: ForestArrays, trees: np.ndarray | None = None) -> np.ndarray:
        """Leaf ids (n, T) of every point in every tree, or (n, len(trees)) in the trees `trees` only."""
        if self.code == AXIS:
            table, roots = forest.packed_axis()
            roots = roots if trees is None else np.ascontiguousarray(roots[trees])
            return _axis_walk_kernel(data, table, roots, np.zeros((1, 1)), False)[0]
        table, roots = forest.packed()
        roots = roots if trees is None else np.ascontiguousarray(roots[trees])
        return _apply_kernel(self.code, data, self.mean, self.inv_std, table, roots)

    def importance_dims(self, params: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.code == AXIS:
            return params[:, :1].astype(np.int64), np.ones((params.shape[0], 1))
        dims = params[:, :2].astype(np.int64)
        if self.code == OBLIQUE:
            w = np.abs(params[:, 2:4])
            share = w / np.maximum(w.sum(axis=1, keepdims=True), 1e-12)
        else:
            share = np.full((params.shape[0], 2), 0.5)
        return dims, share

    def to_spec(self) -> tuple[dict, dict[str, np.ndarray]]:
        spec = {"name": self.name, "kind": self.kind, "n_features": self.n_features}
        return spec, {"family.mean": self.mean, "family.inv_std": self.inv_std}

    @classmethod
    def from_spec(cls, spec: dict, arrays: dict[str, np.ndarray]) -> VectorFeatures:
        fam = cls(spec["kind"], int(spec["n_features"]))
        mean = np.asarray(arrays["family.mean"], dtype=np.float64)
        inv_std = np.asarray(arrays["family.inv_std"], dtype=np.float64)
        if mean.shape != (fam.n_features,) or inv_std.shape != (fam.n_features,):
            raise ValueError("family statistics do not match n_features")
        fam.mean, fam.inv_std = mean, inv_std
        return fam

    def validate_params(self, params: np.ndarray) -> bool:
        """True when every stored parameter row reads only existing dimensions."""
        if params.shape[1] != self.param_width:
            return False
        n_dims = 1 if self.code == AXIS else 2
        dims = params[:, :n_dims]
        return bool(np.all((dims >= 0) & (dims < self.n_features) & (dims == np.floor(dims))))
