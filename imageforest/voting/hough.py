"""Hough voting for object detection: patches cast their leaves' offset votes into an image of object centres.

Every pixel of an image reaches one leaf per tree; each leaf holds the offsets from its training patches to their
objects' centres (and those objects' sizes) and the share of object patches among them. A pixel votes at its own
position plus each stored offset with weight p(object | leaf) / (number of offsets x T), so the Hough image sums to
the expected number of object patches whose centres land in each cell (Gall and Lempitsky, "Class-specific Hough
forests for object detection", CVPR 2009). Alongside the vote mass, the vote-weighted object sizes are summed,
so that a maximum also says how large its object is.
"""

from __future__ import annotations

import numpy as np

from imageforest.forest.threads import run_ranges
from imageforest.kernels import njit

N_CHUNKS = 8  # fixed pixel chunks, each with its own accumulator: sums do not depend on the thread count


@njit(cache=True, nogil=True)
def _cast_chunks(c0, c1, leaves, ys, xs, vote_start, votes, leaf_weight, acc):  # pragma: no cover - numba
    """Votes of the pixels of chunks c0..c1 into their own accumulators acc[c] (height, width, 3): a vote's mass and
    size sums share one cache line."""
    n = leaves.shape[0]
    step = (n + N_CHUNKS - 1) // N_CHUNKS
    height, width = acc.shape[1], acc.shape[2]
    for c in range(c0, c1):
        for i in range(c * step, min(n, (c + 1) * step)):
            y0 = np.float32(ys[i])
            x0 = np.float32(xs[i])
            for t in range(leaves.shape[1]):
                leaf = leaves[i, t]
                w = leaf_weight[leaf]
                if w <= 0.0:
                    continue
                for v in range(vote_start[leaf], vote_start[leaf + 1]):
                    y = int(np.floor(y0 + votes[v, 1] + np.float32(0.5)))
                    x = int(np.floor(x0 + votes[v, 0] + np.float32(0.5)))
                    if y < 0 or y >= height or x < 0 or x >= width:
                        continue
                    acc[c, y, x, 0] += w
                    acc[c, y, x, 1] += w * votes[v, 2]
                    acc[c, y, x, 2] += w * votes[v, 3]


@njit(cache=True)
def _sum_chunks(acc):  # pragma: no cover - numba
    height, width = acc.shape[1], acc.shape[2]
    out = np.empty((3, height, width), dtype=np.float32)
    for k in range(3):
        for y in range(height):
            for x in range(width):
                total = acc[0, y, x, k]
                for c in range(1, N_CHUNKS):
                    total += acc[c, y, x, k]
                out[k, y, x] = total
    return out


def cast_votes(leaves: np.ndarray, ys: np.ndarray, xs: np.ndarray, vote_start: np.ndarray, votes: np.ndarray,
               leaf_weight: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """Accumulate the votes of pixels at (ys, xs) reaching `leaves`.

    Parameters
    ----------
    leaves : (n, T) int32 leaf ids;  ys, xs : (n,) int pixel coordinates
    vote_start : (n_leaves + 1,) int64, leaf l's votes are rows vote_start[l]:vote_start[l + 1] of `votes`
    votes : (n_votes, 4) float32 [dx, dy, width, height] in pixels (offset to the centre, object size)
    leaf_weight : (n_leaves,) float32 weight of each of a leaf's votes
    shape : (height, width) of the Hough image

    Returns
    -------
    (3, height, width) float32: vote mass, and vote-weighted sums of object width and height.
    """
    acc = np.zeros((N_CHUNKS, int(shape[0]), int(shape[1]), 3), dtype=np.float32)
    run_ranges(_cast_chunks, N_CHUNKS, np.ascontiguousarray(leaves, dtype=np.int32),
               np.ascontiguousarray(ys, dtype=np.int32), np.ascontiguousarray(xs, dtype=np.int32), vote_start, votes,
               leaf_weight, acc)
    return _sum_chunks(acc)


VIEW_BINS = 36  # the azimuth distribution of a detection, in 10-degree bins


@njit(cache=True, nogil=True)
def _view_chunks(c0, c1, leaves, ys, xs, vote_start, votes, leaf_weight, owner, hist):  # pragma: no cover - numba
    """Votes of chunks c0..c1 that land on a peak's cells (owner >= 0) add their weight to that peak's azimuth
    histogram hist[c, peak] (VIEW_BINS bins), shared linearly between the two nearest bin centres."""
    n = leaves.shape[0]
    step = (n + N_CHUNKS - 1) // N_CHUNKS
    height, width = owner.shape
    n_bins = hist.shape[2]
    width_deg = 360.0 / n_bins
    for c in range(c0, c1):
        for i in range(c * step, min(n, (c + 1) * step)):
            y0 = np.float32(ys[i])
            x0 = np.float32(xs[i])
            for t in range(leaves.shape[1]):
                leaf = leaves[i, t]
                w = leaf_weight[leaf]
                if w <= 0.0:
                    continue
                for v in range(vote_start[leaf], vote_start[leaf + 1]):
                    y = int(np.floor(y0 + votes[v, 1] + np.float32(0.5)))
                    x = int(np.floor(x0 + votes[v, 0] + np.float32(0.5)))
                    if y < 0 or y >= height or x < 0 or x >= width:
                        continue
                    p = owner[y, x]
                    if p < 0:
                        continue
                    a = votes[v, 4] / width_deg - 0.5  # position among the bin centres
                    lo = int(np.floor(a))
                    frac = a - lo
                    hist[c, p, lo % n_bins] += w * (1.0 - frac)
                    hist[c, p, (lo + 1) % n_bins] += w * frac


def peak_viewpoints(leaves: np.ndarray, ys: np.ndarray, xs: np.ndarray, vote_start: np.ndarray, votes: np.ndarray,
                    leaf_weight: np.ndarray, shape: tuple[int, int], peaks: np.ndarray, radius: int) -> np.ndarray:
    """The azimuth distribution of the votes that landed within `radius` of each peak.

    Parameters
    ----------
    leaves, ys, xs, vote_start, leaf_weight : as `cast_votes`
    votes : (n_votes, 5) float32 [dx, dy, width, height, azimuth_deg]
    shape : (height, width) of the Hough image;  peaks : (k, 2) int (y, x), strongest first
    radius : cells within this distance of a peak are its own (a cell near two peaks goes to the stronger)

    Returns
    -------
    (k, VIEW_BINS) float64 vote mass per 10-degree azimuth bin (bin b centred on 10 b + 5 degrees).
    """
    h, w = int(shape[0]), int(shape[1])
    owner = np.full((h, w), -1, dtype=np.int32)
    yy, xx = np.ogrid[:h, :w]
    for p in range(len(peaks) - 1, -1, -1):  # the strongest painted last, so it keeps the shared cells
        py, px = int(peaks[p, 0]), int(peaks[p, 1])
        y0, y1, x0, x1 = max(0, py - radius), min(h, py + radius + 1), max(0, px - radius), min(w, px + radius + 1)
        disc = (yy[y0:y1] - py) ** 2 + (xx[:, x0:x1] - px) ** 2 <= radius * radius
        owner[y0:y1, x0:x1][disc] = p
    hist = np.zeros((N_CHUNKS, len(peaks), VIEW_BINS), dtype=np.float64)
    if len(peaks):
        run_ranges(_view_chunks, N_CHUNKS, np.ascontiguousarray(leaves, dtype=np.int32),
                   np.ascontiguousarray(ys, dtype=np.int32), np.ascontiguousarray(xs, dtype=np.int32), vote_start,
                   votes, leaf_weight, owner, hist)
    return hist.sum(axis=0)


def viewpoint_of(hist: np.ndarray) -> tuple[float, float]:
    """Mode and spread (degrees) of an azimuth distribution over VIEW_BINS bins.

    The mode is the circular mean of the highest bin (after a [1, 2, 1] circular smoothing) and its two
    neighbours; the spread is the root-mean-square angular distance from the mode of the distribution above its
    floor (its lowest bin: the votes of background patches spread over every azimuth), so that a sharp peak reports
    a small spread and a car seen as both its front and its back (two peaks 180 degrees apart) a large one; a flat
    distribution reports that of a uniform one (180 / sqrt(3) degrees).
    """
    hist = np.asarray(hist, dtype=np.float64)
    n = hist.size
    total = hist.sum()
    if total <= 0:
        return float("nan"), float("nan")
    smooth = 0.5 * hist + 0.25 * (np.roll(hist, 1) + np.roll(hist, -1))
    top = int(np.argmax(smooth))
    centres = np.deg2rad((np.arange(n) + 0.5) * 360.0 / n)
    near = np.array([top - 1, top, top + 1]) % n
    mode = np.arctan2(np.sum(hist[near] * np.sin(centres[near])), np.sum(hist[near] * np.cos(centres[near])))
    mode_deg = float(np.rad2deg(mode) % 360.0)
    diff = (np.rad2deg(centres) - mode_deg + 180.0) % 360.0 - 180.0
    above = hist - hist.min()
    if above.sum() <= 0:
        return mode_deg, float(180.0 / np.sqrt(3.0))
    spread = float(np.sqrt(np.sum(above * diff**2) / above.sum()))
    return mode_deg, spread


def hough_peaks(hough: np.ndarray, radius: int, threshold: float, max_peaks: int) -> np.ndarray:
    """Local maxima of a (smoothed) Hough image: (k, 2) int (y, x), strongest first.

    A cell is a peak when no cell within `radius` (a (2 radius + 1)^2 window) is higher and its value is at least
    `threshold`; ties keep the first cell in raster order.
    """
    from scipy import ndimage

    size = 2 * int(radius) + 1
    top = ndimage.maximum_filter(hough, size=size, mode="constant", cval=-np.inf)
    ys, xs = np.nonzero((hough >= top) & (hough >= threshold) & (hough > 0))
    order = np.argsort(-hough[ys, xs], kind="stable")[:max_peaks]
    return np.c_[ys[order], xs[order]]


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Intersection over union of boxes a (n, 4) and b (m, 4), [x0, y0, x1, y1]: (n, m)."""
    a = np.asarray(a, dtype=np.float64).reshape(-1, 4)
    b = np.asarray(b, dtype=np.float64).reshape(-1, 4)
    ix = np.clip(np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0]), 0, None)
    iy = np.clip(np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1]), 0, None)
    inter = ix * iy
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


def box_inside(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Share of each box a (n, 4) that lies inside each box b (m, 4): intersection / area(a), (n, m)."""
    a = np.asarray(a, dtype=np.float64).reshape(-1, 4)
    b = np.asarray(b, dtype=np.float64).reshape(-1, 4)
    ix = np.clip(np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0]), 0, None)
    iy = np.clip(np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1]), 0, None)
    area_a = ((a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1]))[:, None]
    return np.where(area_a > 0, ix * iy / np.where(area_a > 0, area_a, 1.0), 0.0)


def non_maximum_suppression(boxes: np.ndarray, scores: np.ndarray, iou: float, inside: float = 1.0) -> np.ndarray:
    """Indices of the boxes kept by greedy suppression: strongest first, each dropping the later boxes that overlap
    it with IoU above `iou`, or that lie inside it by more than the share `inside` (a part of an object found at
    a smaller scale; 1.0 turns this off)."""
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
    keep: list[int] = []
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    alive = np.ones(order.size, dtype=bool)
    for pos, i in enumerate(order):
        if not alive[pos]:
            continue
        keep.append(int(i))
        rest = order[pos + 1:]
        if rest.size:
            alive[pos + 1:] &= box_iou(boxes[i], boxes[rest])[0] <= iou
            if inside < 1.0:
                alive[pos + 1:] &= box_inside(boxes[rest], boxes[i])[:, 0] <= inside
    return np.array(keep, dtype=np.int64)
