"""Where an organ stops: one CT scan segmented from the same simulated strokes with and without the extent bound
and the slice path scale, drawn on a sagittal plane through the brainstem, the cord and the larynx.

    python benchmarks/segment/extent_figure.py ../shared/data/openkbp-hn --case train_pt_4 \
        --out apps/segment/docs/extent_bound.png

The strokes are `ct.py`'s (three axial slices per organ plus background); the reference contour is drawn in white,
the segmentation's in colour, the scribbled slices' strokes as short ticks at the left edge.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks._figures import pyplot, save_png
from benchmarks.segment.ct import ORGANS, dice, simulated_scribbles
from imageforest.apps.segment import SegmentationSession
from imageforest.imaging.io import read_image

SHOWN = {"Brainstem": "tab:orange", "SpinalCord": "tab:cyan", "Larynx": "tab:pink", "Esophagus": "tab:green"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path)
    ap.add_argument("--case", default="train_pt_4")
    ap.add_argument("--out", type=Path, default=Path("extent_bound.png"))
    args = ap.parse_args()
    path = args.data / f"{args.case}_ct.nii.gz"
    ct = read_image(path)
    labels = read_image(args.data / f"{args.case}_organs.nii.gz").array
    strokes = simulated_scribbles(labels)
    runs = {"no bound, paths as they are": dict(extent_margin=np.inf, slice_path_scale=1.0),
            "extent bound and slice path scale (the recipe)": {}}
    results = {}
    for title, settings in runs.items():
        session = SegmentationSession(ct, **settings)
        session.set_scribbles(strokes)
        results[title] = session.update().labels
    # the sagittal plane through the cord's median column
    cord = labels == ORGANS.index("SpinalCord") + 1
    x = int(np.median(np.nonzero(cord)[2])) if cord.any() else labels.shape[2] // 2
    sz, _, sx = ct.spacing[::-1]  # (z, y, x) mm
    volume = ct.array
    plt = pyplot()
    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 5.2))
    for ax, (title, seg) in zip(axes, results.items(), strict=True):
        ax.imshow(np.clip(volume[:, :, x], -200, 300), cmap="gray", origin="lower", aspect=sz / sx)
        scores = []
        for organ, colour in SHOWN.items():
            k = ORGANS.index(organ) + 1
            if not (labels == k).any():
                continue
            ax.contour((labels[:, :, x] == k).astype(float), [0.5], colors="white", linewidths=1.0, origin="lower")
            if (seg[:, :, x] == k).any():
                ax.contour((seg[:, :, x] == k).astype(float), [0.5], colors=colour, linewidths=1.6,
                           origin="lower")
            for z in np.flatnonzero((strokes == k).any(axis=(1, 2))):
                ax.plot([0, 6], [z, z], color=colour, linewidth=2)
            scores.append(f"{organ} {dice(seg == k, labels == k):.2f}")
        ax.set_title(f"{title}\nDice: " + ", ".join(scores), fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.text(2, volume.shape[0] - 6, "S", color="yellow", fontsize=11)
        ax.text(2, 3, "I", color="yellow", fontsize=11)
        ax.text(volume.shape[1] - 8, 3, "P", color="yellow", fontsize=11)
        bar = 50.0 / sx  # 50 mm along y (the plane's horizontal axis has the in-plane spacing)
        ax.plot([volume.shape[1] - 10 - bar, volume.shape[1] - 10], [8, 8], color="yellow", linewidth=3)
        ax.text(volume.shape[1] - 10 - bar, 11, "50 mm", color="yellow", fontsize=8)
    fig.suptitle(f"{args.case}: reference in white, segmentation in colour, scribbled slices as ticks (left)",
                 fontsize=10)
    save_png(fig, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
