"""A picture of the Hough forest at work, as Gall and Lempitsky's Fig. 1: held-out images, their Hough images (the
scale of the strongest detection) and the detections (yellow: the strongest, white: the others above the
threshold; green: the true box), and a background image without a horse.

    python benchmarks/detect/gallery.py [--n 4] [--out apps/detect/docs/gallery.png]

The forest is trained with the default recipe on the first cross-validation fold's training images (the images
shown are never trained on).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.detect.common import folds, load_backgrounds, load_horses
from imageforest.apps.detect.model import HoughForestDetector
from imageforest.apps.detect.recipe import RECIPE


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4, help="horse images shown")
    ap.add_argument("--threshold", type=float, default=None, help="score threshold (default: the shipped model's)")
    ap.add_argument("--out", type=Path, default=Path("apps/detect/docs/gallery.png"))
    ap.add_argument("--model", type=Path, default=None,
                    help="a detector already trained on the first fold's training images (else trained here)")
    args = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    horses, backgrounds = load_horses(), load_backgrounds()
    test = set(folds(len(horses))[0].tolist())
    train = [h for i, h in enumerate(horses) if i not in test]
    negatives = [b for j, b in enumerate(backgrounds) if j % 5 != 0]
    if args.model is not None:
        model = HoughForestDetector.load(args.model)
    else:
        recipe = {k: v for k, v in RECIPE.items() if k != "n_trees"}
        model = HoughForestDetector(RECIPE["n_trees"], **recipe).fit([s.rgb for s in train],
                                                                     [s.boxes for s in train],
                                                                     [s.rgb for s in negatives])
    if args.threshold is None:
        from imageforest.apps.detect.api import load_detector

        threshold = load_detector().threshold_
    else:
        threshold = args.threshold
    shown = [horses[i] for i in sorted(test)[:: max(1, len(test) // args.n)][: args.n]]
    shown.append(next(b for j, b in enumerate(backgrounds) if j % 5 == 0))
    fig, axes = plt.subplots(2, len(shown), figsize=(3.2 * len(shown), 5.2))
    for col, sample in enumerate(shown):
        result = model.detect(sample.rgb, threshold=0.0, keep_hough=True)
        best = result.detections[0] if result.detections else None
        k = int(np.argmin(np.abs(np.asarray(result.scales) - best.scale))) if best else 0
        axes[0, col].imshow(sample.rgb)
        axes[1, col].imshow(result.hough[k], cmap="inferno")
        for b in sample.boxes:
            axes[0, col].add_patch(Rectangle(b[:2], b[2] - b[0], b[3] - b[1], fill=False, ec="lime", lw=1.5))
        for rank, d in enumerate(result.detections):
            if d.score < threshold and rank > 0:
                continue
            x0, y0, x1, y1 = d.box_xyxy
            colour = "yellow" if rank == 0 else "white"
            style = "-" if d.score >= threshold else ":"
            axes[0, col].add_patch(Rectangle((x0, y0), x1 - x0, y1 - y0, fill=False, ec=colour, lw=1.5, ls=style))
            axes[0, col].text(x0 + 2, y0 + 10, f"{d.score:.2f}", color=colour, fontsize=8)
        axes[0, col].set_title(sample.name, fontsize=8)
        axes[1, col].set_title(f"Hough image, scale {result.scales[k]:.2f}", fontsize=8)
        for ax in axes[:, col]:
            ax.set_axis_off()
    fig.suptitle(f"Hough forest on held-out images (threshold {threshold:.2f}; dotted: the best box below it)",
                 fontsize=9)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
