"""Joint proposals from part probabilities: weighted mean shift in 3-D (Shotton et al., CVPR 2011, sec. 4).

Every body pixel x with depth z is a 3-D point; for joint j it carries the weight w = p_j(x) z^2 / (fx fy), the
probability that it belongs to one of the joint's parts times the pixel's area on the body surface (m^2), so that
near and far bodies count alike. Mean shift with a Gaussian kernel of width `bandwidth_mm` finds the modes of this
density; a mode's confidence is the weight that reached it (an area in cm^2), and the mode, which lies on the body
surface, is pushed back along the ray by the joint's learnt `push_mm` to reach the joint inside the body.

Paper: J. Shotton et al., "Real-time human pose recognition in parts from single depth images", CVPR 2011.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import prange

from imageforest.apps.bodyparts.depth import Camera
from imageforest.forest.threads import run_ranges
from imageforest.kernels import njit


@dataclass(frozen=True)
class JointProposal:
    """One proposed position of a joint: camera mm (x right, y down, z ahead), pixel (x, y), confidence (cm^2)."""

    position_mm: tuple[float, float, float]
    pixel: tuple[float, float]
    confidence: float

    def to_dict(self) -> dict:
        return {"position_mm": [round(v, 1) for v in self.position_mm],
                "pixel": [round(v, 2) for v in self.pixel], "confidence": round(self.confidence, 3)}


@njit(cache=True)
def _grid_cells(points, weights, cell):  # pragma: no cover - numba
    """Weighted centroids of the occupied cubes of side `cell` (mm): fewer, heavier points for mean shift."""
    n = points.shape[0]
    keys = np.empty(n, dtype=np.int64)
    for i in range(n):
        kx = np.int64(np.floor(points[i, 0] / cell)) + 100_000
        ky = np.int64(np.floor(points[i, 1] / cell)) + 100_000
        kz = np.int64(np.floor(points[i, 2] / cell))
        keys[i] = (kx * 200_000 + ky) * 200_000 + kz
    order = np.argsort(keys, kind="mergesort")
    out_p = np.zeros((n, 3))
    out_w = np.zeros(n)
    m = -1
    last = np.int64(-1)
    for r in range(n):
        i = order[r]
        if m < 0 or keys[i] != last:
            m += 1
            last = keys[i]
        w = weights[i]
        out_w[m] += w
        for a in range(3):
            out_p[m, a] += w * points[i, a]
    m += 1
    for k in range(m):
        for a in range(3):
            out_p[k, a] /= out_w[k]
    return out_p[:m], out_w[:m]


# Mean shift reads the cells of the 27 buckets (cubes of at least 3 bandwidths, the kernel's reach) around each
# estimate: the cost then follows the body's local density, not its whole extent (a frame whose background is not
# removed spreads its points over metres).
KERNEL_REACH = 3.0
MAX_BUCKETS = 1 << 20
# A climbing estimate within this many bandwidths of a mode already found stops there (`_climb`): far inside the
# distance at which modes are merged (half a bandwidth), so the proposals are those of full climbs.
SETTLE = 0.1


@njit(cache=True)
def _bucket_cells(points, reach):  # pragma: no cover - numba
    """Cells sorted by the cube that holds them (side `reach` or more, so that at most `MAX_BUCKETS` cubes span
    the cells): (order, first, span, lo, side).

    Bucket (bx, by, bz), counted from `lo`, has the index (bx * ny + by) * nz + bz, so the buckets along z of one
    (bx, by) column are one run; its cells are order[first[b]:first[b + 1]]. A margin bucket on each side keeps
    the neighbours of every cell's bucket in range.
    """
    n = points.shape[0]
    side = reach
    while True:
        lo = np.empty(3, dtype=np.int64)
        span = np.empty(3, dtype=np.int64)
        for a in range(3):
            b0 = np.int64(np.floor(points[:, a].min() / side))
            b1 = np.int64(np.floor(points[:, a].max() / side))
            lo[a] = b0 - 1
            span[a] = b1 - b0 + 3
        if span[0] * span[1] * span[2] <= MAX_BUCKETS:
            break
        side *= 2.0  # wider cubes: still every cell within reach among the 27
    n_buckets = span[0] * span[1] * span[2]
    bucket = np.empty(n, dtype=np.int64)
    first = np.zeros(n_buckets + 1, dtype=np.int64)
    for i in range(n):
        bx = np.int64(np.floor(points[i, 0] / side)) - lo[0]
        by = np.int64(np.floor(points[i, 1] / side)) - lo[1]
        bz = np.int64(np.floor(points[i, 2] / side)) - lo[2]
        bucket[i] = (bx * span[1] + by) * span[2] + bz
        first[bucket[i] + 1] += 1
    for b in range(n_buckets):
        first[b + 1] += first[b]
    order = np.empty(n, dtype=np.int64)
    fill = first[:-1].copy()
    for i in range(n):  # a counting sort: cells keep their order within a bucket
        order[fill[bucket[i]]] = i
        fill[bucket[i]] += 1
    return order, first, span, lo, side


@njit(cache=True, inline="always")
def _found_near(found, n_found, x0, x1, x2, settle2):  # pragma: no cover - numba
    """Index of the first of the `n_found` modes in `found` within sqrt(settle2) of (x0, x1, x2), or -1."""
    for m in range(n_found):
        if (found[m, 0] - x0) ** 2 + (found[m, 1] - x1) ** 2 + (found[m, 2] - x2) ** 2 < settle2:
            return m
    return -1


@njit(cache=True, inline="always")
def _climb(x0, x1, x2, pts, wts, first, span, lo, side, bandwidth, max_iter, found, n_found
           ):  # pragma: no cover - numba
    """Mean shift of one estimate (x0, x1, x2) to its mode among the bucketed cells (see `_bucket_cells`):
    (x0, x1, x2, converged). An estimate that comes within `SETTLE` bandwidths of one of the first `n_found`
    modes in `found` (m, 3) stops there: it is inside that mode's basin, and climbing on would only reach it."""
    settle2 = (SETTLE * bandwidth) ** 2
    converged = False
    inv = 1.0 / (bandwidth * bandwidth)
    reach2 = KERNEL_REACH * KERNEL_REACH
    tol = (1e-3 * bandwidth) ** 2
    for _ in range(max_iter):
        a0 = a1 = a2 = tot = 0.0
        bx = np.int64(np.floor(x0 / side)) - lo[0]
        by = np.int64(np.floor(x1 / side)) - lo[1]
        bz = np.int64(np.floor(x2 / side)) - lo[2]
        z0 = max(bz - 1, 0)
        z1 = min(bz + 1, span[2] - 1)
        if z0 > z1:  # the estimate is out of every cell's reach
            break
        for cx in range(max(bx - 1, 0), min(bx + 2, span[0])):
            for cy in range(max(by - 1, 0), min(by + 2, span[1])):
                column = (cx * span[1] + cy) * span[2]
                for i in range(first[column + z0], first[column + z1 + 1]):
                    d0 = pts[i, 0] - x0
                    d1 = pts[i, 1] - x1
                    d2 = pts[i, 2] - x2
                    q = (d0 * d0 + d1 * d1 + d2 * d2) * inv
                    if q < reach2:  # beyond 3 bandwidths the kernel is under 1e-4
                        k = wts[i] * np.exp(-q)
                        a0 += k * pts[i, 0]
                        a1 += k * pts[i, 1]
                        a2 += k * pts[i, 2]
                        tot += k
        if tot <= 0.0:
            break
        n0, n1, n2 = a0 / tot, a1 / tot, a2 / tot
        step = (n0 - x0) ** 2 + (n1 - x1) ** 2 + (n2 - x2) ** 2
        x0, x1, x2 = n0, n1, n2
        if step < tol:
            converged = True
            break
        settled = _found_near(found, n_found, x0, x1, x2, settle2)
        if settled >= 0:
            x0, x1, x2 = found[settled, 0], found[settled, 1], found[settled, 2]
            converged = True
            break
    return x0, x1, x2, converged


@njit(cache=True, parallel=True)
def _mean_shift(seeds, points, weights, bandwidth, max_iter):  # pragma: no cover - numba
    """Mean shift of every seed to its mode in the density of weighted `points` (Gaussian kernel of width
    `bandwidth`, cut at `KERNEL_REACH` widths): (n_seeds, 3) modes."""
    modes = seeds.copy()
    if points.shape[0] == 0:
        return modes
    order, first, span, lo, side = _bucket_cells(points, KERNEL_REACH * bandwidth)
    pts = points[order]
    wts = weights[order]
    none = np.zeros((0, 3))
    for s in prange(seeds.shape[0]):
        modes[s, 0], modes[s, 1], modes[s, 2], _ = _climb(modes[s, 0], modes[s, 1], modes[s, 2], pts, wts,
                                                          first, span, lo, side, bandwidth, max_iter, none, 0)
    return modes


@njit(cache=True)
def _modes_of(points, weights, bandwidth, max_iter):  # pragma: no cover - numba
    """`joint_modes` before ranking, on one thread: merged modes (m, 3) and the weight that climbed to each."""
    # the density from cubes of half a bandwidth, climbed from cubes of a bandwidth (a mode is never narrower)
    cells, cw = _grid_cells(points, weights, 0.5 * bandwidth)
    seeds, sw = _grid_cells(points, weights, bandwidth)
    order, first, span, lo, side = _bucket_cells(cells, KERNEL_REACH * bandwidth)
    pts = cells[order]
    wts = cw[order]
    modes = seeds.copy()
    found = np.empty(seeds.shape)  # distinct modes reached so far: later seeds stop when they reach one
    n_found = 0
    settle2 = (SETTLE * bandwidth) ** 2
    for s in range(seeds.shape[0]):
        x0, x1, x2, converged = _climb(modes[s, 0], modes[s, 1], modes[s, 2], pts, wts, first, span, lo, side,
                                       bandwidth, max_iter, found, n_found)
        modes[s, 0], modes[s, 1], modes[s, 2] = x0, x1, x2
        # only a converged climb marks a mode (one cut short by max_iter is on a slope)
        if converged and _found_near(found, n_found, x0, x1, x2, settle2) < 0:
            found[n_found, 0], found[n_found, 1], found[n_found, 2] = x0, x1, x2
            n_found += 1
    return _merge_modes(modes, sw, 0.5 * bandwidth)


@njit(cache=True, parallel=True)
def _joints_modes(points, area, probabilities, parts, threshold, bandwidth, max_iter, max_modes
                  ):  # pragma: no cover - numba
    """Every joint's strongest modes at once, one joint per thread: (J, max_modes, 3) modes, (J, max_modes)
    weights (descending) and (J,) how many each joint has. Joint j sums the probabilities of the columns
    parts[j, :] (-1 pads); pixels above `threshold` vote with that sum times their `area`."""
    n_joints = parts.shape[0]
    n = points.shape[0]
    out_modes = np.zeros((n_joints, max_modes, 3))
    out_weights = np.zeros((n_joints, max_modes))
    counts = np.zeros(n_joints, dtype=np.int64)
    for j in prange(n_joints):
        p = np.zeros(n, dtype=np.float32)
        for i in range(n):
            acc = np.float32(0.0)
            for c in parts[j]:
                if c >= 0:
                    acc += probabilities[i, c]
            p[i] = acc
        keep = np.flatnonzero(p > threshold)
        if keep.size == 0:
            continue
        w = np.empty(keep.size)
        for r in range(keep.size):
            w[r] = np.float64(p[keep[r]]) * area[keep[r]]
        centres, support = _modes_of(points[keep], w, bandwidth, max_iter)
        rank = np.argsort(-support, kind="mergesort")[:max_modes]
        counts[j] = rank.size
        for r in range(rank.size):
            out_modes[j, r] = centres[rank[r]]
            out_weights[j, r] = support[rank[r]]
    return out_modes, out_weights, counts


def joint_modes(points_mm: np.ndarray, weights: np.ndarray, bandwidth_mm: float, max_modes: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """Modes of a weighted 3-D point set, strongest first.

    Parameters
    ----------
    points_mm : (n, 3) float64 camera mm
    weights : (n,) float64, non-negative
    bandwidth_mm : Gaussian kernel width (mm)
    max_modes : at most this many modes are returned

    Returns
    -------
    modes (m, 3) mm and their weights (m,), descending
    """
    if points_mm.shape[0] == 0:
        return np.zeros((0, 3)), np.zeros(0)
    pts = np.ascontiguousarray(points_mm, dtype=np.float64)
    w = np.ascontiguousarray(weights, dtype=np.float64)
    centres, support = _modes_of(pts, w, float(bandwidth_mm), 30)
    rank = np.argsort(-support, kind="stable")[:max_modes]
    return centres[rank], support[rank]


@njit(cache=True)
def _merge_modes(modes, weights, radius):  # pragma: no cover - numba
    """Modes closer than `radius` are one (the heaviest cell's first); each keeps the weight that climbed to it."""
    order = np.argsort(-weights, kind="mergesort")
    centres = np.empty_like(modes)
    support = np.zeros(modes.shape[0])
    m = 0
    r2 = radius * radius
    for i in order:
        for k in range(m):
            d = ((modes[i, 0] - centres[k, 0]) ** 2 + (modes[i, 1] - centres[k, 1]) ** 2
                 + (modes[i, 2] - centres[k, 2]) ** 2)
            if d < r2:
                support[k] += weights[i]
                break
        else:
            centres[m] = modes[i]
            support[m] = weights[i]
            m += 1
    return centres[:m], support[:m]


def propose_joints(probabilities: np.ndarray, pixels: np.ndarray, depth_mm: np.ndarray, camera: Camera,
                   joint_parts: dict[str, list[int]], push_mm: dict[str, float], *, bandwidth_mm: float = 65.0,
                   threshold: float = 0.14, max_proposals: int = 5) -> dict[str, list[JointProposal]]:
    """Ranked proposals for every joint from the body pixels of one depth map.

    Parameters
    ----------
    probabilities : (n, K) float32 part posteriors of the body pixels (column k = part k + 1)
    pixels : (n, 2) int (row y, column x) of the body pixels
    depth_mm : (n,) their depth (mm, positive)
    camera : intrinsics of the depth map
    joint_parts : joint name -> part numbers (1..K) whose probabilities vote for it
    push_mm : joint name -> depth added to a surface mode to reach the joint (mm)
    bandwidth_mm, threshold, max_proposals : mean-shift kernel width, the least part probability that votes,
        proposals kept per joint

    Returns
    -------
    joint name -> proposals, most confident first (empty when no pixel voted)
    """
    z = np.asarray(depth_mm, dtype=np.float64)
    pts = np.ascontiguousarray(camera.back_project(pixels[:, 0], pixels[:, 1], z), dtype=np.float64)
    area_cm2 = (z / 10.0) ** 2 / (camera.fx * camera.fy)  # a pixel's area on the surface, cm^2
    names = list(joint_parts)
    if not names:
        return {}
    parts = np.full((len(names), max(len(joint_parts[j]) for j in names)), -1, dtype=np.int64)
    for j, name in enumerate(names):
        parts[j, :len(joint_parts[name])] = np.asarray(joint_parts[name], dtype=np.int64) - 1
    # one compiled call for every joint (a Python loop over joints cost as much as their mean shift)
    modes, conf, counts = _joints_modes(pts, np.ascontiguousarray(area_cm2), np.asarray(probabilities, np.float32),
                                        parts, np.float32(threshold), float(bandwidth_mm), 30, int(max_proposals))
    out: dict[str, list[JointProposal]] = {}
    for j, joint in enumerate(names):
        m = modes[j, :counts[j]]
        push = float(push_mm.get(joint, 0.0))
        pos = m * (1.0 + push / m[:, 2:3])  # along the ray through each mode, `push` mm deeper
        uv = camera.project(pos)
        out[joint] = [JointProposal((float(p[0]), float(p[1]), float(p[2])), (float(u), float(v)), float(c))
                      for p, (u, v), c in zip(pos, uv, conf[j, :counts[j]], strict=True)]
    return out


def true_part_posteriors(labels: np.ndarray, n_parts: int) -> tuple[np.ndarray, np.ndarray]:
    """One-hot posteriors (n, K) of the labelled pixels of a part map and their (n, 2) pixels: the proposals
    these give are the bound that perfect part labels would reach."""
    yy, xx = np.nonzero(labels > 0)
    onehot = np.zeros((yy.size, n_parts), dtype=np.float32)
    onehot[np.arange(yy.size), labels[yy, xx].astype(np.int64) - 1] = 1.0
    return onehot, np.c_[yy, xx]


def smooth_posteriors(post: np.ndarray, yx: np.ndarray, radius: int) -> np.ndarray:
    """Each body pixel's posterior averaged over the body pixels of the (2 radius + 1)^2 window around it.

    Parameters
    ----------
    post : (n, K) float32 posteriors of the body pixels; yx : (n, 2) their (row, column); radius : pixels

    Returns
    -------
    (n, K) float32, each row still a distribution
    """
    if post.shape[0] == 0:
        return post
    y0, x0 = int(yx[:, 0].min()), int(yx[:, 1].min())
    h, w = int(yx[:, 0].max()) - y0 + 1, int(yx[:, 1].max()) - x0 + 1
    return _box_average(np.ascontiguousarray(post, dtype=np.float32),
                        np.ascontiguousarray(yx[:, 0] - y0, dtype=np.int64),
                        np.ascontiguousarray(yx[:, 1] - x0, dtype=np.int64), h, w, int(radius))


def _box_average(post: np.ndarray, ys: np.ndarray, xs: np.ndarray, h: int, w: int, r: int) -> np.ndarray:
    """Masked box filter over the body's bounding box: window sums along rows of the posteriors (a last channel
    counts body pixels; off the body every channel is 0), then along columns, each body pixel's average written as
    its column sum passes it; (n, k) float32 averages."""
    index = _pixel_index(ys, xs, h, w)
    rows = np.empty((h, w, post.shape[1] + 1), dtype=np.float32)
    run_ranges(_row_sums_range, h, post, index, rows, r)
    out = np.empty_like(post)
    run_ranges(_column_averages_range, w, rows, index, out, r)
    return out


@njit(cache=True, nogil=True)
def _pixel_index(ys, xs, h, w):  # pragma: no cover - numba
    """(h, w) int32: the body pixel at each place of the box, -1 off the body."""
    index = np.full((h, w), -1, dtype=np.int32)
    for i in range(ys.shape[0]):
        index[ys[i], xs[i]] = i
    return index


@njit(cache=True, inline="always")
def _add_pixel(acc, post, index, line, x, sign):  # pragma: no cover - numba
    """acc += sign * (posterior of the body pixel at (line, x), 1); nothing off the body."""
    i = index[line, x]
    if i >= 0:
        k = post.shape[1]
        for c in range(k):
            acc[c] += sign * post[i, c]
        acc[k] += sign


@njit(cache=True, nogil=True)
def _row_sums_range(l0, l1, post, index, dst, r):  # pragma: no cover - numba
    """dst[l, x] = sum over the body pixels of row l in columns x - r .. x + r of their posteriors, and their count
    in the last channel, for rows l0..l1, by a running sum in float64 (places off the body add nothing)."""
    length = index.shape[1]
    acc = np.zeros(post.shape[1] + 1, dtype=np.float64)
    for line in range(l0, l1):
        acc[:] = 0.0
        for x in range(min(r, length)):
            _add_pixel(acc, post, index, line, x, 1.0)
        for x in range(length):
            if x + r < length:
                _add_pixel(acc, post, index, line, x + r, 1.0)
            for c in range(acc.shape[0]):
                dst[line, x, c] = acc[c]
            if x - r >= 0:
                _add_pixel(acc, post, index, line, x - r, -1.0)


@njit(cache=True, nogil=True)
def _column_averages_range(x0, x1, src, index, out, r):  # pragma: no cover - numba
    """The row sums `src` summed along the columns x0..x1 (window rows y - r .. y + r, float64, walking down the
    rows so that each step reads contiguous memory); at each body pixel its window's posterior sum over its
    window's body-pixel count, into out (n, k) float32."""
    h, ch = src.shape[0], src.shape[2]
    k = ch - 1
    acc = np.zeros((x1 - x0, ch), dtype=np.float64)
    for y in range(min(r, h)):
        for x in range(x0, x1):
            for c in range(ch):
                acc[x - x0, c] += src[y, x, c]
    for y in range(h):
        if y + r < h:
            for x in range(x0, x1):
                for c in range(ch):
                    acc[x - x0, c] += src[y + r, x, c]
        for x in range(x0, x1):
            i = index[y, x]
            if i >= 0:
                count = np.float32(acc[x - x0, k])
                for c in range(k):
                    out[i, c] = np.float32(acc[x - x0, c]) / count
        if y - r >= 0:
            for x in range(x0, x1):
                for c in range(ch):
                    acc[x - x0, c] -= src[y - r, x, c]
