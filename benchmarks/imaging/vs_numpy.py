"""The imaging layer's speed, against vectorised numpy in the same process.

1. Box-feature responses (displaced-box means over an integral image, mm offsets) per second: imageforest's lazy
   kernel vs the same computation vectorised in numpy (fancy indexing per candidate).
2. Depth-probe responses (eq. 3.2) per second, likewise.
3. `apply` over every pixel of a 640 x 480 depth frame with 3 trees of depth 20 (Shotton et al.'s setting).
4. The integral image of a 512 x 512 x 300 int16 volume (numba) vs numpy's cumsum.

    python benchmarks/imaging/vs_numpy.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks._measure import measure, mib
from imageforest.imaging import BoxFeatures, DepthProbes, ImageClassificationForest, integral_image
from imageforest.imaging.features import check_points
from imageforest.imaging.io import Image


def numpy_box_means(vol, spacing_zyx, pts, params, fill):
    """Vectorised numpy reference: (rho, n) box means via the integral image."""
    table = np.zeros(np.array(vol.shape) + 1)
    table[1:, 1:, 1:] = vol.cumsum(0).cumsum(1).cumsum(2)
    shape = np.array(vol.shape)
    out = np.empty((params.shape[0], pts.shape[0]))
    p = pts[:, 1:4]
    for c, row in enumerate(params):
        lo = p + np.floor((row[1:4] - row[4:7] / 2) / spacing_zyx + 0.5).astype(int)
        hi = p + np.floor((row[1:4] + row[4:7] / 2) / spacing_zyx + 0.5).astype(int)
        hi = np.maximum(hi, lo + 1)
        lo, hi = np.clip(lo, 0, shape), np.clip(hi, 0, shape)
        (z0, y0, x0), (z1, y1, x1) = lo.T, hi.T
        s = (table[z1, y1, x1] - table[z0, y1, x1] - table[z1, y0, x1] - table[z1, y1, x0] + table[z0, y0, x1]
             + table[z0, y1, x0] + table[z1, y0, x0] - table[z0, y0, x0])
        n = np.prod(hi - lo, axis=1)
        out[c] = np.where(n > 0, s / np.maximum(n, 1), fill)
    return out


def numpy_probes(depth, pts, params, background):
    ny, nx = depth.shape

    def at(y, x):
        inside = (y >= 0) & (y < ny) & (x >= 0) & (x < nx)
        v = np.where(inside, depth[np.clip(y, 0, ny - 1), np.clip(x, 0, nx - 1)], 0).astype(np.float64)
        return np.where(v > 0, v, background)

    y, x = pts[:, 2], pts[:, 3]
    d = at(y, x)
    out = np.empty((params.shape[0], pts.shape[0]))
    for c, row in enumerate(params):
        a = at(y + np.floor(row[0] / d + 0.5).astype(int), x + np.floor(row[1] / d + 0.5).astype(int))
        b = at(y + np.floor(row[2] / d + 0.5).astype(int), x + np.floor(row[3] / d + 0.5).astype(int))
        out[c] = a - b
    return out


def synthetic_depth_frame(rng, h=480, w=640) -> tuple[np.ndarray, np.ndarray]:
    """A body-like depth frame: background 0, a torso, a head and two arms at 1.5-3 m, with part labels."""
    yy, xx = np.mgrid[:h, :w]
    depth = np.zeros((h, w))
    labels = np.zeros((h, w), dtype=int)
    cx, cy = w / 2 + rng.uniform(-60, 60), h / 2 + rng.uniform(-30, 30)
    base = rng.uniform(1500, 3000)
    parts = [((cx, cy + 40, 70, 120), 1), ((cx, cy - 110, 35, 40), 2), ((cx - 110, cy + 10, 70, 18), 3),
             ((cx + 110, cy + 10, 70, 18), 4)]
    for (px, py, rx, ry), k in parts:
        inside = ((xx - px) / rx) ** 2 + ((yy - py) / ry) ** 2 <= 1
        depth[inside] = base - 80 * np.sqrt(np.clip(1 - ((xx - px) / rx) ** 2 - ((yy - py) / ry) ** 2, 0, 1))[inside]
        labels[inside] = k
    return depth.astype(np.uint16), labels


def main() -> None:
    rng = np.random.default_rng(0)
    n_pts, rho = 200_000, 50

    # 1. box features
    vol = rng.integers(-1000, 2000, (96, 128, 128)).astype(np.int16)
    img = Image(vol, np.array([0.9, 0.9, 2.5]), np.zeros(3), np.eye(3))
    fam = BoxFeatures(max_offset_mm=40.0, box_size_mm=(2.0, 20.0))
    stack = fam.prepare([img])
    pts = check_points(np.c_[np.zeros(n_pts, int), rng.integers(0, 96, n_pts), rng.integers(0, 128, n_pts),
                             rng.integers(0, 128, n_pts)], stack)
    params = fam.sample(rng, 1, rho)
    args = ((stack, pts), params, np.arange(n_pts, dtype=np.int32), np.zeros(n_pts, dtype=np.int32))
    fam.responses(*args)  # load compiled kernels
    ours, t_ours, mem_ours = measure(lambda: fam.responses(*args))
    ref, t_np, mem_np = measure(lambda: numpy_box_means(vol, img.spacing[::-1], pts, params[0], 0.0))
    assert np.allclose(ours, ref, rtol=1e-5, atol=1e-2)
    n = n_pts * rho
    print(f"box-feature responses ({n_pts} points x {rho} candidates, 96x128x128 int16, anisotropic mm):")
    print(f"  imageforest {n / t_ours / 1e6:7.1f} M/s   numpy {n / t_np / 1e6:7.1f} M/s   speed-up "
          f"{t_np / t_ours:5.1f}x   peak MiB {mib(mem_ours)} vs {mib(mem_np)}")

    # 2. depth probes
    depth, _ = synthetic_depth_frame(rng)
    dfam = DepthProbes(max_offset=100 * 2000.0)
    dstack = dfam.prepare([depth])
    yy, xx = np.nonzero(depth > 0)
    sel = rng.integers(0, yy.size, n_pts)
    dpts = check_points(np.c_[np.zeros(n_pts, int), yy[sel], xx[sel]], dstack)
    dparams = dfam.sample(rng, 1, rho)
    dargs = ((dstack, dpts), dparams, np.arange(n_pts, dtype=np.int32), np.zeros(n_pts, dtype=np.int32))
    dfam.responses(*dargs)
    ours, t_ours, _ = measure(lambda: dfam.responses(*dargs))
    ref, t_np, _ = measure(lambda: numpy_probes(depth, dpts, dparams[0], dfam.background))
    assert np.allclose(ours, ref, rtol=1e-6)
    print(f"depth-probe responses ({n_pts} points x {rho} candidates, 640x480):")
    print(f"  imageforest {n / t_ours / 1e6:7.1f} M/s   numpy {n / t_np / 1e6:7.1f} M/s   "
          f"speed-up {t_np / t_ours:5.1f}x")

    # 3. apply over a whole frame, 3 trees of depth 20
    frames, pts, labels = [], [], []
    for k in range(30):
        d, lab = synthetic_depth_frame(rng)
        yy, xx = np.nonzero(lab > 0)
        s = rng.choice(yy.size, 4000, replace=False)
        frames.append(d)
        pts.append(np.c_[np.full(s.size, k), yy[s], xx[s]])
        labels.append(lab[yy[s], xx[s]])
    forest = ImageClassificationForest(DepthProbes(max_offset=100 * 2000.0), n_trees=3, max_depth=20,
                                       n_candidates=100, random_state=0)
    _, t_fit, _ = measure(lambda: forest.fit(frames, np.concatenate(pts), np.concatenate(labels)))
    f = forest.forest_
    test, test_lab = synthetic_depth_frame(rng)
    forest.predict_proba_image(test)  # warm
    every = np.c_[np.zeros(480 * 640, int), np.indices((480, 640)).reshape(2, -1).T]
    data = (forest.family_.prepare([test]), check_points(every, forest.family_.prepare([test])))
    times = []
    for _ in range(20):
        t0 = time.perf_counter()
        forest.family_.apply(data, f)
        times.append(time.perf_counter() - t0)
    fg_pts = every[(test > 0).ravel()]
    fg_data = (data[0], check_points(fg_pts, data[0]))
    t_fg = []
    for _ in range(20):
        t0 = time.perf_counter()
        forest.family_.apply(fg_data, f)
        t_fg.append(time.perf_counter() - t0)
    t_img = []
    for _ in range(5):
        t0 = time.perf_counter()
        post = forest.predict_proba_image(test)
        t_img.append(time.perf_counter() - t0)
    fg = test_lab > 0
    acc = np.mean(forest.classes_[np.argmax(post.array, -1)][fg] == test_lab[fg])
    print(f"apply, every pixel of a 640x480 frame, T=3, max_depth=20 (reached {f.max_depth}, "
          f"mean leaf depth {f.depth[f.leaf_node].mean():.1f}; fit {t_fit:.1f} s):")
    print(f"  apply {np.median(times) * 1e3:6.1f} ms/frame ({1 / np.median(times):5.1f} frames/s); "
          f"posterior image incl. point set-up {np.median(t_img) * 1e3:6.1f} ms; foreground accuracy {acc:.3f}")
    print(f"  apply on the body pixels only ({len(fg_pts)} of {480 * 640}, as Shotton et al. do): "
          f"{np.median(t_fg) * 1e3:6.1f} ms/frame")

    # 4. integral image of a CT-sized volume
    big = rng.integers(-1024, 3071, (300, 512, 512)).astype(np.int16)
    integral_image(big[:4, :8, :8])
    table, t_ii, mem_ii = measure(lambda: integral_image(big))
    exact = table[-1, -1, -1] == big.astype(np.int64).sum()
    del table
    _, t_cs, mem_cs = measure(lambda: big.cumsum(0, dtype=np.int64).cumsum(1).cumsum(2))
    print(f"integral image 512x512x300 int16: imageforest {t_ii:.2f} s (exact total: {exact}, peak MiB "
          f"{mib(mem_ii)}); numpy cumsum int64 {t_cs:.2f} s (peak MiB {mib(mem_cs)})")


if __name__ == "__main__":
    main()
