"""A picture of the body-parts model at work: depth, true parts, predicted parts with each joint's strongest
proposal (white) beside the true joint (black cross), on held-out renders.

    python benchmarks/bodyparts/gallery.py [--model M] [--test DIR] [--n 4] [--out apps/bodyparts/docs/overlay.png]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from imageforest.apps.bodyparts import load_body_model, open_dataset
from imageforest.apps.bodyparts.report import palette

RENDERER = ["-m", "imageforest.apps.bodyparts.renderer"]  # the application's renderer, installed with it


def crop_box(mask: np.ndarray, margin: int = 8) -> tuple[slice, slice]:
    yy, xx = np.nonzero(mask)
    h, w = mask.shape
    return (slice(max(0, yy.min() - margin), min(h, yy.max() + margin + 1)),
            slice(max(0, xx.min() - margin), min(w, xx.max() + margin + 1)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--test", type=Path, default=None)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--out", type=Path, default=Path("apps/bodyparts/docs/overlay.png"))
    args = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    model = load_body_model(args.model)
    colours = palette(len(model.part_names_)) / 255.0
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.test
        if folder is None:
            folder = Path(tmp)
            subprocess.run([sys.executable, *RENDERER, "-n", str(args.n), "-o", str(folder), "--seed", "2"],
                           check=True, stdout=subprocess.DEVNULL)
        data = open_dataset(folder)
        fig, axes = plt.subplots(3, args.n, figsize=(2.3 * args.n, 7.2), squeeze=False)
        for k, s in enumerate(data.samples[: args.n]):
            depth, labels = data.load(s)
            cam = data.camera(s, depth.shape)
            result = model.parse(depth, cam)
            truth = data.joints(s)
            ys, xs = crop_box(depth > 0)
            d = np.where(depth > 0, depth, np.nan)[ys, xs]
            axes[0, k].imshow(d, cmap="gray_r")
            axes[1, k].imshow(colours[labels[ys, xs]])
            axes[2, k].imshow(colours[result.labels[ys, xs]])
            for joint, props in result.joints.items():
                if props:
                    u, v = props[0].pixel
                    axes[2, k].plot(u - xs.start, v - ys.start, "o", ms=4, mfc="white", mec="black", mew=0.8)
                t = truth.get(joint)
                if t is not None and t["visible"]:
                    axes[2, k].plot(t["pixel"][0] - xs.start, t["pixel"][1] - ys.start, "x", ms=4, color="black")
            acc = np.mean(result.labels[labels > 0] == labels[labels > 0])
            axes[2, k].set_title(f"{acc:.0%} of pixels right", fontsize=8)
        for ax in axes.ravel():
            ax.axis("off")
        for row, title in enumerate(("depth (held out)", "true parts", "imageforest + joints")):
            axes[row, 0].text(-0.05, 0.5, title, transform=axes[row, 0].transAxes, rotation=90, va="center",
                              ha="right", fontsize=9)
        fig.tight_layout()
        args.out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(args.out, dpi=90)
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
