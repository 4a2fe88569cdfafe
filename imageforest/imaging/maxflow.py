"""Minimum s-t cuts of grid graphs, in numba: Boykov and Kolmogorov's augmenting-path algorithm ("An experimental
comparison of min-cut/max-flow algorithms for energy minimization in vision", PAMI 2004).

A grid graph has one node per voxel of a (z, y, x) grid, terminal edges from the source and to the sink at every
node, and edges between face neighbours with a capacity in each direction. Two search trees grow from the terminals
along edges with residual capacity; where they touch, the path is augmented; nodes cut off from their terminal are
re-adopted or freed. The kernel releases the GIL, so cuts of different tiles run side by side on threads.
"""

from __future__ import annotations

import numpy as np

from imageforest.exceptions import InvalidInputError
from imageforest.kernels import njit

FREE, SOURCE, SINK, WALL = 0, 1, 2, 3  # a node's tree; WALL marks the padding around the grid
NO_PARENT, TERMINAL, ORPHAN = -1, -2, -3  # parent codes beside a direction 0..5 (the edge towards the parent)


def grid_min_cut(source: np.ndarray, sink: np.ndarray, forward: list[np.ndarray | None],
                 backward: list[np.ndarray | None]) -> tuple[np.ndarray, float]:
    """Minimum cut of a (z, y, x) grid graph.

    Parameters
    ----------
    source, sink : (z, y, x) capacities of each node's edges from the source and to the sink (>= 0)
    forward, backward : per axis (z, y, x), None (no edges) or (z, y, x) capacities of the edges p -> p + 1 and
        p + 1 -> p along it, stored at p (the last slice is ignored)

    Returns
    -------
    (z, y, x) bool, True where the node is on the sink's side, and the cut's capacity (the maximum flow).
    """
    source = np.asarray(source, dtype=np.float64)
    shape = source.shape
    if source.ndim != 3 or np.shape(sink) != shape or len(forward) != 3 or len(backward) != 3:
        raise InvalidInputError("a grid cut takes (z, y, x) terminal capacities and three axes of edges")
    padded = tuple(n + 2 for n in shape)
    n_pad = padded[0] * padded[1] * padded[2]
    strides = np.array([padded[1] * padded[2], padded[2], 1], dtype=np.int64)
    inner = (slice(1, -1),) * 3
    terminal = np.zeros(padded)
    terminal[inner] = source - np.asarray(sink, dtype=np.float64)
    flow0 = float(np.minimum(source, np.asarray(sink, dtype=np.float64)).sum())  # pushed straight through
    # Residual capacities per node and direction: 2a is towards p - stride_a, 2a + 1 towards p + stride_a.
    residual = np.zeros((n_pad, 6))
    view = residual.reshape(*padded, 6)
    for axis in range(3):
        fwd, bwd = forward[axis], backward[axis]
        if (fwd is None and bwd is None) or shape[axis] < 2:
            continue
        far = [slice(1, -1)] * 3
        far[axis] = slice(2, shape[axis] + 1)
        near = [slice(1, -1)] * 3
        near[axis] = slice(1, shape[axis])
        edge = [slice(None)] * 3
        edge[axis] = slice(0, shape[axis] - 1)
        if fwd is not None:
            view[(*near, 2 * axis + 1)] = np.asarray(fwd, dtype=np.float64)[tuple(edge)]
        if bwd is not None:
            view[(*far, 2 * axis)] = np.asarray(bwd, dtype=np.float64)[tuple(edge)]
    if np.any(residual < 0) or np.any(source < 0) or np.any(np.asarray(sink) < 0):
        raise InvalidInputError("cut capacities must be >= 0")
    tree = np.full(padded, WALL, dtype=np.int8)
    tree[inner] = FREE
    first = 2 if shape[0] == 1 else 0  # a single plane has no edges along z
    flow = _max_flow(residual, terminal.ravel(), tree.ravel(), strides, first)
    return tree[inner] == SINK, flow0 + flow


@njit(nogil=True)
def _tree_capacity(residual, side, parent, child, k):  # pragma: no cover - numba
    """Residual capacity of the edge between `parent` and its neighbour `child` (direction k from parent to child)
    in the direction flow takes in a tree of `side`: parent to child in the source's tree, child to parent in the
    sink's."""
    return residual[parent, k] if side == SOURCE else residual[child, k ^ 1]


@njit(nogil=True)
def _max_flow(residual, terminal, tree, strides, first):  # pragma: no cover - numba
    """Boykov-Kolmogorov max-flow in place: residual (n, 6), terminal (n,) (> 0: residual from the source, < 0: to
    the sink), tree (n,) FREE or WALL on entry, SOURCE / SINK / FREE on exit; directions from `first` on. Returns
    the flow pushed."""
    n = terminal.size
    parent = np.full(n, NO_PARENT, dtype=np.int64)
    stamp = np.zeros(n, dtype=np.int64)  # when the distance to the terminal was last known right
    dist = np.zeros(n, dtype=np.int64)
    offset = np.empty(6, dtype=np.int64)
    for a in range(3):
        offset[2 * a] = -strides[a]
        offset[2 * a + 1] = strides[a]
    queue = np.empty(n, dtype=np.int64)  # active nodes, a ring buffer
    queued = np.zeros(n, dtype=np.bool_)
    head = 0
    count = 0
    orphans = np.empty(n, dtype=np.int64)
    n_orphans = 0
    for p in range(n):
        if tree[p] == WALL or terminal[p] == 0.0:
            continue
        tree[p] = SOURCE if terminal[p] > 0 else SINK
        parent[p] = TERMINAL
        dist[p] = 1
        queue[(head + count) % n] = p
        queued[p] = True
        count += 1
    time = 0
    total = 0.0
    while count > 0:
        p = queue[head]
        head = (head + 1) % n
        count -= 1
        queued[p] = False
        if tree[p] != SOURCE and tree[p] != SINK:
            continue
        # growth: find an edge from the source tree to the sink tree
        s_node = -1
        t_node = -1
        via = -1
        for k in range(first, 6):
            q = p + offset[k]
            if tree[q] == WALL:
                continue
            if _tree_capacity(residual, tree[p], p, q, k) <= 0.0:
                continue
            if tree[q] == FREE:
                tree[q] = tree[p]
                parent[q] = k ^ 1
                stamp[q] = stamp[p]
                dist[q] = dist[p] + 1
                if not queued[q]:
                    queue[(head + count) % n] = q
                    queued[q] = True
                    count += 1
            elif tree[q] != tree[p]:
                if tree[p] == SOURCE:
                    s_node, t_node, via = p, q, k
                else:
                    s_node, t_node, via = q, p, k ^ 1
                break
            elif stamp[q] <= stamp[p] and dist[q] > dist[p]:
                parent[q] = k ^ 1  # a shorter way to the terminal
                stamp[q] = stamp[p]
                dist[q] = dist[p] + 1
        if s_node < 0:
            continue
        # p stays active: it may touch the other tree again after this augmentation
        if not queued[p]:
            head = (head - 1) % n
            queue[head] = p
            queued[p] = True
            count += 1
        time += 1
        # bottleneck along source -> s_node -> t_node -> sink
        neck = residual[s_node, via]
        u = s_node
        while parent[u] != TERMINAL:
            w = u + offset[parent[u]]
            c = residual[w, parent[u] ^ 1]
            if c < neck:
                neck = c
            u = w
        if terminal[u] < neck:
            neck = terminal[u]
        u = t_node
        while parent[u] != TERMINAL:
            c = residual[u, parent[u]]
            if c < neck:
                neck = c
            u = u + offset[parent[u]]
        if -terminal[u] < neck:
            neck = -terminal[u]
        # push
        residual[s_node, via] -= neck
        residual[t_node, via ^ 1] += neck
        u = s_node
        while parent[u] != TERMINAL:
            w = u + offset[parent[u]]
            residual[w, parent[u] ^ 1] -= neck
            residual[u, parent[u]] += neck
            if residual[w, parent[u] ^ 1] <= 0.0:
                parent[u] = ORPHAN
                orphans[n_orphans] = u
                n_orphans += 1
            u = w
        terminal[u] -= neck
        if terminal[u] <= 0.0:
            parent[u] = ORPHAN
            orphans[n_orphans] = u
            n_orphans += 1
        u = t_node
        while parent[u] != TERMINAL:
            w = u + offset[parent[u]]
            residual[u, parent[u]] -= neck
            residual[w, parent[u] ^ 1] += neck
            if residual[u, parent[u]] <= 0.0:
                parent[u] = ORPHAN
                orphans[n_orphans] = u
                n_orphans += 1
            u = w
        terminal[u] += neck
        if terminal[u] >= 0.0:
            parent[u] = ORPHAN
            orphans[n_orphans] = u
            n_orphans += 1
        total += neck
        # adoption
        while n_orphans > 0:
            n_orphans -= 1
            u = orphans[n_orphans]
            side = tree[u]
            best = -1
            best_dist = 1 << 60
            for k in range(first, 6):
                q = u + offset[k]
                if tree[q] != side:
                    continue
                if _tree_capacity(residual, side, q, u, k ^ 1) <= 0.0:  # q as u's parent
                    continue
                # does q reach its terminal? walk up, counting steps
                d = 0
                w = q
                ok = True
                while True:
                    if stamp[w] == time:
                        d += dist[w]
                        break
                    if parent[w] == TERMINAL:
                        stamp[w] = time
                        dist[w] = 1
                        d += 1
                        break
                    if parent[w] == ORPHAN or parent[w] == NO_PARENT:
                        ok = False
                        break
                    d += 1
                    w = w + offset[parent[w]]
                if not ok:
                    continue
                if d < best_dist:
                    best, best_dist = k, d
                # remember the distances along the path just walked
                w = q
                dd = d
                while stamp[w] != time:
                    stamp[w] = time
                    dist[w] = dd
                    dd -= 1
                    w = w + offset[parent[w]]
            if best >= 0:
                parent[u] = best
                stamp[u] = time
                dist[u] = best_dist + 1
                continue
            # no parent: u leaves its tree; its children become orphans, its neighbours that could feed it wake
            for k in range(first, 6):
                q = u + offset[k]
                if tree[q] != side:
                    continue
                pk = parent[q]
                if pk >= 0 and q + offset[pk] == u:
                    parent[q] = ORPHAN
                    orphans[n_orphans] = q
                    n_orphans += 1
                if _tree_capacity(residual, side, q, u, k ^ 1) > 0.0 and not queued[q]:
                    queue[(head + count) % n] = q
                    queued[q] = True
                    count += 1
            tree[u] = FREE
            parent[u] = NO_PARENT
    return total
