"""Spatial regularisation of a posterior: a contrast-sensitive graph cut.

Energy over labels f: sum_p -log p_p(f_p) + sum_{p~q} w_pq [f_p != f_q], with w_pq = smoothness *
exp(-beta |I_p - I_q|^2) / |p - q|_mm over face neighbours and beta = 1 / (2 <|I_p - I_q|^2>) (Boykov and Jolly,
"Interactive graph cuts for optimal boundary and region segmentation", ICCV 2001; Rother, Kolmogorov and Blake,
"GrabCut", SIGGRAPH 2004). Scribbled voxels keep their label. Two labels: one exact minimum cut. More: alpha-expansion
moves (Boykov, Veksler and Zabih, "Fast approximate energy minimization via graph cuts", PAMI 2001), each an exact
cut, until no move lowers the energy. Max-flow is `imageforest.imaging.maxflow` (Boykov and Kolmogorov's algorithm in
numba, free of the GIL: tiles are cut side by side).
"""

from __future__ import annotations

import numpy as np

from imageforest.imaging.maxflow import grid_min_cut
from imageforest.kernels import njit

UNARY_FLOOR = 1e-4  # posterior floor: -log caps at 9.2 nats, so no single voxel's evidence is absolute
FIXED_COST = 1e6  # cost of giving a scribbled voxel another label than its own
CERTAIN = 0.999  # a voxel whose largest class probability reaches this is sure (see `_uncertain_box`)
BOX_MARGIN = 8  # voxels
BAND_BLOCKS = 4  # a banded cut works at full resolution within this many coarse pixels of the coarse cut's boundary


def contrast_weights(guide: np.ndarray, spacing: np.ndarray, smoothness: float) -> list[tuple[int, np.ndarray]]:
    """Per axis of the (z, y, x) grid, the weights w[p] of the edges p -> p + 1 along it (last slice 0).

    guide : (z, y, x, c) float32; spacing : (z, y, x) mm. Axes of length 1 have no edges.
    """
    diffs = []
    for axis in range(3):
        if guide.shape[axis] < 2:
            continue
        a = np.diff(guide, axis=axis)
        diffs.append((axis, np.einsum("...c,...c->...", a, a)))
    if not diffs:
        return []
    mean_sq = np.mean(np.concatenate([d.ravel() for _, d in diffs]))
    beta = 1.0 / (2.0 * mean_sq) if mean_sq > 0 else 0.0
    out = []
    for axis, d2 in diffs:
        w = np.zeros(guide.shape[:3], dtype=np.float64)
        index = [slice(None)] * 3
        index[axis] = slice(0, guide.shape[axis] - 1)
        w[tuple(index)] = smoothness * np.exp(-beta * d2) / float(spacing[axis] / spacing.min())
        out.append((axis, w))
    return out


def _shifted(a: np.ndarray, axis: int) -> np.ndarray:
    """a at p + 1 along `axis` (edge-padded): the label of each edge's far end."""
    out = np.empty_like(a)
    index = [slice(None)] * 3
    index[axis] = slice(0, -1)
    src = [slice(None)] * 3
    src[axis] = slice(1, None)
    out[tuple(index)] = a[tuple(src)]
    last = [slice(None)] * 3
    last[axis] = slice(-1, None)
    out[tuple(last)] = a[tuple(last)]
    return out


def energy(labels: np.ndarray, unary: np.ndarray, edges: list[tuple[int, np.ndarray]]) -> float:
    """The energy of a (z, y, x) labelling under (z, y, x, K) unaries and `contrast_weights` edges."""
    total = float(np.take_along_axis(unary, labels[..., None], axis=-1).sum())
    for axis, w in edges:
        total += float(np.sum(w * (labels != _shifted(labels, axis))))
    return total


def graph_cut(posterior: np.ndarray, guide: np.ndarray, spacing: np.ndarray, smoothness: float,
              fixed: np.ndarray | None = None, sweeps: int = 2,
              edges: list[tuple[int, np.ndarray]] | None = None, banded: bool = False) -> np.ndarray:
    """Regularised labels (z, y, x) int32, indices into the posterior's last axis.

    Parameters
    ----------
    posterior : (z, y, x, K) per-voxel class probabilities
    guide : (z, y, x, c) intensities the contrast is measured on; spacing : (z, y, x) mm
    smoothness : weight of a label change between two voxels of equal intensity (0: argmax of the posterior)
    fixed : (z, y, x) int, a class index where the label is given, -1 elsewhere
    sweeps : alpha-expansion cycles over the labels at most (K > 2)
    edges : `contrast_weights(guide, spacing, smoothness)`, when the caller keeps them for the next cut
    banded : for two classes on one plane, cut at half resolution first, then at full resolution only in a band
        around that cut's boundary (`banded_cut`: several times faster, not exact)
    """
    if smoothness <= 0 or posterior.shape[-1] < 2:
        labels = np.argmax(posterior, axis=-1).astype(np.int32)
        if fixed is not None:
            labels[fixed >= 0] = fixed[fixed >= 0]
        return labels
    unary = -np.log(np.clip(posterior, UNARY_FLOOR, 1.0))
    if fixed is not None:
        given = fixed >= 0
        unary[given] = FIXED_COST
        unary[given, fixed[given]] = 0.0
    labels = np.argmin(unary, axis=-1).astype(np.int32)
    box = _uncertain_box(posterior, fixed)
    if box is None:
        return labels
    if edges is None:
        edges = contrast_weights(guide, spacing, smoothness)
    if any(b.stop - b.start < n for b, n in zip(box, labels.shape, strict=True)):
        labels[box] = _cut(unary[box], _crop_edges(edges, box), labels[box], sweeps, banded)
        return labels
    return _cut(unary, edges, labels, sweeps, banded)


def _per_axis(edges: list[tuple[int, np.ndarray]]) -> list[np.ndarray | None]:
    """`contrast_weights` edges as `grid_min_cut` takes them: one entry per axis (z, y, x), None without edges."""
    out: list[np.ndarray | None] = [None, None, None]
    for axis, w in edges:
        out[axis] = w
    return out


def _crop_edges(edges: list[tuple[int, np.ndarray]], box: tuple[slice, ...]) -> list[tuple[int, np.ndarray]]:
    """The edges inside `box`: weights of edges leaving it (its last slice along each axis) set to 0."""
    out = []
    for axis, w in edges:
        if box[axis].stop - box[axis].start < 2:
            continue
        cropped = w[box].copy()
        last = [slice(None)] * 3
        last[axis] = slice(-1, None)
        cropped[tuple(last)] = 0.0
        out.append((axis, cropped))
    return out


def _uncertain_box(posterior: np.ndarray, fixed: np.ndarray | None) -> tuple[slice, ...] | None:
    """The bounding box (grown by `BOX_MARGIN` voxels) of the voxels whose posterior is not all but certain; None
    when every voxel is. Outside it the graph cut keeps the argmax: a volume where most voxels are sure background
    is cut only around the structures in question (a 128^3 CT around its organs)."""
    top = posterior[..., 0].copy()
    for k in range(1, posterior.shape[-1]):  # class by class: a reduction over a last axis of 2-8 is 5x slower
        np.maximum(top, posterior[..., k], out=top)
    unsure = top < CERTAIN
    if fixed is not None:
        unsure &= fixed < 0
    if not unsure.any():
        return None
    box = []
    for axis in range(3):
        along = np.flatnonzero(unsure.any(axis=tuple(a for a in range(3) if a != axis)))
        box.append(slice(max(int(along[0]) - BOX_MARGIN, 0), min(int(along[-1]) + 1 + BOX_MARGIN,
                                                                   unsure.shape[axis])))
    return tuple(box)


def _cut(unary: np.ndarray, edges: list[tuple[int, np.ndarray]], labels: np.ndarray, sweeps: int,
         banded: bool = False) -> np.ndarray:
    """The graph cut over a whole grid, from the argmax `labels`."""
    K = unary.shape[-1]
    if not edges:
        return labels
    if K == 2 and banded and unary.shape[0] == 1 and min(unary.shape[1:3]) >= 2 * BAND_BLOCKS:
        return banded_cut(unary, edges).astype(np.int32)
    if K == 2:
        weights = _per_axis(edges)
        sink_side, _ = grid_min_cut(unary[..., 1], unary[..., 0], weights, weights)  # sink side = class 1
        return sink_side.astype(np.int32)
    best = energy(labels, unary, edges)
    for _ in range(sweeps):
        improved = False
        for alpha in range(K):
            moved = _expand(labels, alpha, unary, edges)
            e = energy(moved, unary, edges)
            if e < best - 1e-9 * max(abs(best), 1.0):
                labels, best, improved = moved, e, True
        if not improved:
            break
    return labels


def _expand(labels: np.ndarray, alpha: int, unary: np.ndarray, edges: list[tuple[int, np.ndarray]]) -> np.ndarray:
    """The best alpha-expansion of `labels`: every voxel keeps its label (x = 0) or takes alpha (x = 1).

    A pair term E(x_p, x_q) is written E00 + (E10 - E00) x_p + (E11 - E10) x_q + (E01 + E10 - E00 - E11)
    (1 - x_p) x_q (Kolmogorov and Zabih, "What energy functions can be minimized via graph cuts?", PAMI 2004);
    the last term is an edge p -> q, cut when p keeps and q takes alpha.
    """
    keep_cost = np.take_along_axis(unary, labels[..., None], axis=-1)[..., 0]
    take_cost = unary[..., alpha].copy()
    linear = np.zeros(labels.shape)
    forward: list[np.ndarray | None] = [None, None, None]
    not_alpha = labels != alpha
    for axis, w in edges:
        far = _shifted(labels, axis)
        e00 = w * (labels != far)
        e01 = w * not_alpha  # p keeps f_p, q takes alpha
        e10 = w * (far != alpha)  # p takes alpha, q keeps f_q
        linear += e10 - e00  # coefficient of x_p
        linear -= _back(e10, axis)  # coefficient of x_q: E11 - E10 = -E10, credited to q = p + 1
        forward[axis] = e01 + e10 - e00
    take_cost += np.maximum(linear, 0.0)
    keep_cost += np.maximum(-linear, 0.0)
    take, _ = grid_min_cut(take_cost, keep_cost, forward, [None, None, None])  # sink side = takes alpha
    return np.where(take, alpha, labels).astype(np.int32)


def _back(a: np.ndarray, axis: int) -> np.ndarray:
    """Values of edges p -> p + 1 moved to their far end p + 1 (0 at the first slice)."""
    out = np.zeros_like(a)
    dst = [slice(None)] * 3
    dst[axis] = slice(1, None)
    src = [slice(None)] * 3
    src[axis] = slice(0, -1)
    out[tuple(dst)] = a[tuple(src)]
    return out


def banded_cut(unary: np.ndarray, edges: list[tuple[int, np.ndarray]]) -> np.ndarray:
    """A two-class cut of one plane, coarse to fine (Lombaert, Sun, Grady and Xu, "A multilevel banded graph cuts
    method for fast image segmentation", ICCV 2005): the exact cut of the plane at half resolution (each coarse pixel
    the sum of its 2 x 2 pixels' costs, each coarse edge the sum of the edges it stands for), then the exact cut at
    full resolution of the pixels within `BAND_BLOCKS` coarse pixels of that cut's boundary, the others keeping the
    coarse label. Returns (1, y, x) bool, True for class 1.

    unary : (1, y, x, 2) costs; edges : `contrast_weights` of the plane (axes 1 and 2)
    """
    from scipy import ndimage

    h, w = unary.shape[1:3]
    hc, wc = -(-h // 2), -(-w // 2)

    def pooled(a: np.ndarray) -> np.ndarray:  # (h, w) -> (hc, wc) sums of 2 x 2 blocks (zeros past the edge)
        padded = np.zeros((2 * hc, 2 * wc))
        padded[:h, :w] = a
        return padded.reshape(hc, 2, wc, 2).sum(axis=(1, 3))

    weight = {axis: np.zeros((2 * hc, 2 * wc)) for axis in (1, 2)}
    for axis, wt in edges:
        weight[axis][:h, :w] = wt[0]
    coarse_y = np.zeros((hc, wc))  # coarse (i, j) -> (i + 1, j): the fine edges from row 2i + 1 to 2i + 2
    coarse_y[:-1] = (weight[1][1:-1:2, 0::2] + weight[1][1:-1:2, 1::2])[: hc - 1]
    coarse_x = np.zeros((hc, wc))
    coarse_x[:, :-1] = (weight[2][0::2, 1:-1:2] + weight[2][1::2, 1:-1:2])[:, : wc - 1]
    coarse_edges = [None, coarse_y[None], coarse_x[None]]
    coarse, _ = grid_min_cut(pooled(unary[0, ..., 1])[None], pooled(unary[0, ..., 0])[None], coarse_edges,
                             coarse_edges)
    coarse = coarse[0]
    boundary = np.zeros_like(coarse)
    boundary[:, :-1] |= coarse[:, :-1] != coarse[:, 1:]
    boundary[:, 1:] |= coarse[:, :-1] != coarse[:, 1:]
    boundary[:-1] |= coarse[:-1] != coarse[1:]
    boundary[1:] |= coarse[:-1] != coarse[1:]
    band = ndimage.binary_dilation(boundary, iterations=BAND_BLOCKS) if boundary.any() else boundary
    def up(a: np.ndarray) -> np.ndarray:  # (hc, wc) -> (h, w), each coarse pixel over its 2 x 2
        return np.repeat(np.repeat(a, 2, axis=0), 2, axis=1)[:h, :w]

    label, free = up(coarse), up(band)
    # Only the band is cut: a pixel outside it keeps its coarse label, so each edge from the band to such a pixel
    # becomes a cost on the band pixel's other label, and the pixels outside have no edges nor terminal costs (the
    # search never visits them). The same cut as with those pixels tied to their labels, in a fraction of the time.
    source = np.empty((h, w))
    sink = np.empty((h, w))
    along_y = np.empty((h, w))
    along_x = np.empty((h, w))
    _band_graph(unary[0, ..., 1], unary[0, ..., 0], weight[1][:h, :w], weight[2][:h, :w], label, free, source, sink,
                along_y, along_x)
    fine = [None, along_y[None], along_x[None]]
    out, _ = grid_min_cut(source[None], sink[None], fine, fine)
    return np.where(free, out[0], label)[None]


@njit(nogil=True)
def _band_graph(cost_true, cost_false, weight_y, weight_x, label, free, source, sink, along_y,
                along_x):  # pragma: no cover - numba
    """The graph of a banded cut's band, (h, w) arrays: terminal capacities (`source`: the cost of True, `sink`:
    of False) and the edges to the next row (`along_y`) and column (`along_x`) between band pixels; an edge from a
    band pixel to a fixed one (`free` False, its label `label`) is added to the band pixel's cost of the other
    label."""
    h, w = label.shape
    for i in range(h):
        for j in range(w):
            if free[i, j]:
                source[i, j] = cost_true[i, j]
                sink[i, j] = cost_false[i, j]
            else:
                source[i, j] = 0.0
                sink[i, j] = 0.0
            along_y[i, j] = 0.0
            along_x[i, j] = 0.0
    for i in range(h):
        for j in range(w):
            for di, dj in ((1, 0), (0, 1)):
                a, b = i + di, j + dj
                if a >= h or b >= w:
                    continue
                wt = weight_y[i, j] if di == 1 else weight_x[i, j]
                if free[i, j] and free[a, b]:
                    if di == 1:
                        along_y[i, j] = wt
                    else:
                        along_x[i, j] = wt
                elif free[i, j]:
                    if label[a, b]:
                        sink[i, j] += wt
                    else:
                        source[i, j] += wt
                elif free[a, b]:
                    if label[i, j]:
                        sink[a, b] += wt
                    else:
                        source[a, b] += wt
