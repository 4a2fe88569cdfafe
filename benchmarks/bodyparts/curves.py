"""Accuracy against training images and against tree depth on rendered bodies (the shape of Shotton et al.'s
Fig. 8), with scikit-learn's forest on fixed probe pairs at the same points.

    python benchmarks/bodyparts/curves.py --train DIR --test DIR [--images 50,150,500,1500] [--depths 6,10,14,18,22]
        [--depth-images 1000] [--test-maps 200] [--out curves.png]

Each point is a forest of 3 trees, 100 probe candidates, 500 pixels per map, balanced parts, scored by the mean
per-part pixel accuracy on `--test-maps` held-out renders. The depth curve trains on `--depth-images` maps.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.bodyparts.common import Confusion, probe_forest_peer
from imageforest.apps.bodyparts import open_dataset, train_bodyparts


def ours(train: Path, test, samples, n_images: int, depth: int) -> tuple[float, float]:
    t0 = time.perf_counter()
    model, _ = train_bodyparts(train, n_trees=3, max_depth=depth, n_images=n_images, pixels_per_image=500,
                               n_candidates=100, class_weight="balanced", random_state=0)
    fit = time.perf_counter() - t0
    conf = Confusion(len(model.part_names_))
    for s in samples:
        d, lab = test.load(s)
        conf.add(lab, model.parse(d, test.camera(s, d.shape), joints=False).labels)
    return conf.mean_per_part(), fit


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", type=Path, required=True)
    ap.add_argument("--test", type=Path, required=True)
    ap.add_argument("--images", default="50,150,500,1500")
    ap.add_argument("--depths", default="6,10,14,18,22")
    ap.add_argument("--depth-images", type=int, default=1000)
    ap.add_argument("--test-maps", type=int, default=200)
    ap.add_argument("--out", type=Path, default=Path("bodyparts_curves.png"))
    args = ap.parse_args()
    train_set, test = open_dataset(args.train), open_dataset(args.test)
    samples = test.samples[: args.test_maps]
    reach = 0.6 * 1000.0 * test.camera(samples[0], (240, 320)).fx
    rows = {"images": [], "depth": []}
    for n in (int(v) for v in args.images.split(",")):
        acc, fit = ours(args.train, test, samples, n, 20)
        rf = probe_forest_peer(train_set, train_set.samples[:n], test, samples, 500, reach)[0].mean_per_part()
        rows["images"].append((n, acc, rf))
        print(f"images {n:5d} depth 20: imageforest {acc:.3f} (fit {fit:.0f} s)  scikit-learn {rf:.3f}", flush=True)
    for depth in (int(v) for v in args.depths.split(",")):
        acc, fit = ours(args.train, test, samples, args.depth_images, depth)
        rf = probe_forest_peer(train_set, train_set.samples[: args.depth_images], test, samples, 500, reach,
                               max_depth=depth)[0].mean_per_part()
        rows["depth"].append((depth, acc, rf))
        print(f"images {args.depth_images:5d} depth {depth:2d}: imageforest {acc:.3f} (fit {fit:.0f} s)  "
              f"scikit-learn {rf:.3f}", flush=True)

    plot(rows, len(samples), args.depth_images, args.out)


def plot(rows: dict[str, list[tuple[int, float, float]]], n_test: int, depth_images: int, out: Path) -> None:
    """Both curves side by side: rows["images"] and rows["depth"] hold (x, imageforest, scikit-learn)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for ax, key, label in ((axes[0], "images", "training maps (log)"), (axes[1], "depth", "tree depth D")):
        r = np.array(rows[key])
        ax.plot(r[:, 0], r[:, 1], "o-", label="imageforest (depth probes)")
        ax.plot(r[:, 0], r[:, 2], "s--", label="scikit-learn RF (200 probe pairs)")
        ax.set_xlabel(label)
        ax.set_ylabel("mean per-part accuracy")
        ax.grid(alpha=0.3)
        if key == "images":
            ax.set_xscale("log")
            ax.set_xticks(r[:, 0], [f"{int(v):,}" for v in r[:, 0]])
            ax.xaxis.set_minor_formatter(NullFormatter())
    axes[0].legend(fontsize=8)
    axes[0].set_title(f"3 trees, depth 20; {n_test} held-out renders", fontsize=9)
    axes[1].set_title(f"3 trees, {depth_images} training maps", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"-> {out}")


if __name__ == "__main__":
    main()
