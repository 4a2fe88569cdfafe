"""One GrabCut picture segmented from its scribbles with and without `stroke_regions`, side by side.

    python benchmarks/segment/stroke_regions_figure.py ../shared/data/grabcut-scribbles --picture NAME [--set 2]
        --out apps/segment/docs/stroke_regions.png

Left, the strokes (red: object, blue: background); middle, the recipe's segmentation; right, the same with
`stroke_regions` (each class keeps only the regions its strokes touch; the background keeps all of its own). The
object's outline is yellow, the ground truth's white; the titles give each one's foreground IoU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from scipy import ndimage

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grabcut import iou, load

from imageforest.apps.segment import SegmentationSession, prepare


def outlined(img: np.ndarray, fg: np.ndarray, truth: np.ndarray) -> np.ndarray:
    view = img.copy()
    view[truth ^ ndimage.binary_erosion(truth)] = (255, 255, 255)
    edge = fg ^ ndimage.binary_erosion(fg)
    view[ndimage.binary_dilation(edge)] = (255, 230, 0)
    return view


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", type=Path)
    ap.add_argument("--picture", required=True)
    ap.add_argument("--set", type=int, default=2)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    img, scr, gt = load(args.data, args.picture, args.set)
    prepared = prepare(img, rgb=True)
    panels = []
    for on in (False, True):
        session = SegmentationSession(prepared, stroke_regions=on)
        session.set_scribbles(scr)
        fg = session.update().labels == 1
        panels.append((fg, iou(fg, gt)))
    truth = gt > 128
    strokes = img.copy()
    strokes[ndimage.binary_dilation(scr == 1)] = (230, 0, 0)
    strokes[ndimage.binary_dilation(scr == 2)] = (0, 110, 255)
    fig, axes = plt.subplots(1, 3, figsize=(13.5, 4.3))
    axes[0].imshow(strokes)
    axes[0].set_title(f"{args.picture}: set-{args.set} strokes")
    for ax, (fg, score), name in zip(axes[1:], panels, ("recipe", "with stroke_regions"), strict=True):
        ax.imshow(outlined(img, fg, truth))
        ax.set_title(f"{name}: IoU {score:.3f}")
    for ax in axes:
        ax.axis("off")
    fig.tight_layout(pad=1.2)
    fig.savefig(args.out, dpi=80)
    print(f"{args.out}: IoU {panels[0][1]:.3f} -> {panels[1][1]:.3f}")


if __name__ == "__main__":
    main()
