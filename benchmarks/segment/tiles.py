"""One tile of a large picture, step by step, beside the libraries the steps used to call.

    python benchmarks/segment/tiles.py ../shared/data/grabcut-scribbles [--tiles 3] [--side 1152]

A model is grown on one GrabCut picture's set-2 scribbles (as `scale.py` grows it). Then `--tiles` GrabCut pictures,
resized to `--side` pixels square (a 1024-pixel tile with the 64-pixel halo its filters read), go through what
`segment_tiles` does to each tile, on one thread: the features of the core and its 16-pixel cut margin (and, beside
them, the same filter bank's Gaussian filters by scipy.ndimage over the whole tile), the forest, and the banded graph
cut tiles use (and, beside it, the exact cut, by
`imageforest.imaging.maxflow` and by PyMaxflow, Kolmogorov's C++ implementation, when it is installed: `pip install
PyMaxflow`). Last, every tile twice, two at a time on two threads, as `segment_tiles` runs them: seconds per tile.
Prints medians, the largest difference between the two filter implementations, how the exact cuts agree and how
much of each tile the banded cut labels as the exact one does.
"""

from __future__ import annotations

import argparse
import glob
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from PIL import Image as PILImage
from scipy import ndimage

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import grow_model  # the model scale.py applies

from benchmarks._measure import rss_bytes
from imageforest.apps.segment import SegmentationForest, prepare
from imageforest.apps.segment.features import Tile
from imageforest.apps.segment.model import TILE_HALO, TILE_MARGIN
from imageforest.estimators.base import numba_threads
from imageforest.imaging.gaussian import gaussian_filter, gaussian_laplace
from imageforest.imaging.regularize import UNARY_FLOOR, contrast_weights, graph_cut


def filter_passes(lightness: np.ndarray, smooth, laplace) -> float:
    """Seconds for the segmentation filter bank's Gaussian passes on one channel (the Gaussians of all three channels
    counted), with a library's Gaussian filter and Laplacian of Gaussian."""
    t0 = time.perf_counter()
    for scale in (1.0, 2.0, 4.0, 8.0):
        for _ in range(3):
            smooth(lightness, scale)
        grad = [smooth(lightness, scale, order=o) for o in ((1, 0), (0, 1))]
        np.sqrt(grad[0] ** 2 + grad[1] ** 2)
        laplace(lightness, scale)
        g = [smooth(lightness, scale / 2, order=o) for o in ((1, 0), (0, 1))]
        for a, b in ((0, 0), (0, 1), (1, 1)):
            smooth(g[a] * g[b], scale)
    return time.perf_counter() - t0


def pymaxflow_cut(posterior: np.ndarray, guide: np.ndarray, smoothness: float) -> tuple[np.ndarray, float] | None:
    """The two-class cut by PyMaxflow: (sink-side labels, seconds), None when it is not installed."""
    try:
        import maxflow
    except ImportError:
        return None
    unary = -np.log(np.clip(posterior, UNARY_FLOOR, 1.0))
    t0 = time.perf_counter()
    edges = contrast_weights(guide, np.ones(3), smoothness)
    g = maxflow.Graph[float]()
    ids = g.add_grid_nodes(unary.shape[:3])
    for axis, w in edges:
        structure = np.zeros((3, 3, 3))
        at = [1, 1, 1]
        at[axis] = 2
        structure[tuple(at)] = 1.0
        g.add_grid_edges(ids, weights=w, structure=structure, symmetric=True)
    g.add_grid_tedges(ids, unary[..., 1], unary[..., 0])
    g.maxflow()
    return g.get_grid_segments(ids), time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", type=Path)
    ap.add_argument("--tiles", type=int, default=3)
    ap.add_argument("--side", type=int, default=1152)
    args = ap.parse_args()
    pictures = sorted(Path(p) for p in glob.glob(str(args.data / "images" / "*.jpg")))
    with tempfile.TemporaryDirectory() as work:
        model = SegmentationForest.load(grow_model(args.data, pictures[0], Path(work)))
    tiles = [np.asarray(PILImage.open(p).convert("RGB").resize((args.side, args.side)))
             for p in pictures[1:1 + args.tiles]]
    where = Tile((0, 0), (10 * args.side, 10 * args.side), None)
    # an inner tile: the forest and the cut see the core and its margin, the filters the whole halo
    inner = slice(TILE_HALO - TILE_MARGIN, args.side - (TILE_HALO - TILE_MARGIN))
    smooth = float(model.smoothness)
    rows = []

    def one(picture: np.ndarray, times: list | None = None) -> None:
        t0 = time.perf_counter()
        prepared = prepare(picture, rgb=True, tile=where, window=(inner, inner))
        t1 = time.perf_counter()
        p = model.pixel_posterior(prepared).astype(np.float32).reshape(*prepared.guide.shape[:3], -1)
        t2 = time.perf_counter()
        labels = graph_cut(p, prepared.guide, prepared.spacing, smooth, banded=True)  # as segment_tiles cuts
        t3 = time.perf_counter()
        if times is not None:
            exact = graph_cut(p, prepared.guide, prepared.spacing, smooth)
            times.append((t1 - t0, t2 - t1, t3 - t2, prepared, p, exact, time.perf_counter() - t3,
                          float(np.mean(exact == labels))))

    with numba_threads(1):
        one(tiles[0])  # kernels loaded
        for picture in tiles:
            done: list = []
            one(picture, done)
            features, forest, cut, prepared, p, labels, exact_s, banded_agree = done[0]
            lightness = prepare(picture, rgb=True).guide[0, ..., 0]  # the whole tile, as the filters read it
            ours = filter_passes(lightness, gaussian_filter, gaussian_laplace)
            peer_filters = filter_passes(lightness, ndimage.gaussian_filter, ndimage.gaussian_laplace)
            peer = pymaxflow_cut(p, prepared.guide, smooth)
            rows.append((features, forest, cut, ours, peer_filters, None if peer is None else peer[1],
                         None if peer is None else float(np.mean(peer[0] == labels.astype(bool))), exact_s,
                         banded_agree))
    # the filters themselves against scipy's values
    lightness = prepare(tiles[0], rgb=True).guide[0, ..., 0]
    ref = ndimage.gaussian_filter(lightness, 8.0)
    diff = float(np.abs(gaussian_filter(lightness, 8.0) - ref).max() / np.abs(ref).max())

    print(f"{len(tiles)} tiles of {args.side} x {args.side} RGB, one thread, seconds (median):")
    med = np.median(np.array([[r[i] if r[i] is not None else np.nan for i in range(8)] for r in rows]), axis=0)
    print(f"  features {med[0]:.2f}, of which the Gaussian passes {med[3]:.2f} (scipy.ndimage: {med[4]:.2f}, "
          f"{med[4] / med[3]:.1f}x); forest {med[1]:.2f}; banded graph cut {med[2]:.2f} (the same labels as the "
          f"exact cut on {min(r[8] for r in rows) * 100:.2f}-{max(r[8] for r in rows) * 100:.2f}% of a tile); "
          f"exact cut {med[7]:.2f}", end="")
    if rows[0][5] is not None:
        print(f" (PyMaxflow {med[5]:.2f}, {med[5] / med[7]:.2f}x; the same labels on "
              f"{min(r[6] for r in rows) * 100:.4f}% of pixels or more)")
    else:
        print(" (PyMaxflow not installed)")
    print(f"  largest difference from scipy's Gaussian (sigma 8), relative to its largest value: {diff:.1e}")

    t0 = time.perf_counter()
    queue = list(tiles) * 2

    def worker() -> None:
        with numba_threads(1):
            while True:
                try:
                    picture = queue.pop()
                except IndexError:
                    return
                one(picture)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    print(f"two tiles in flight on two threads: {wall / (2 * len(tiles)):.2f} s a tile "
          f"(resident after: {rss_bytes() / 2**20:.0f} MiB)")


if __name__ == "__main__":
    main()
