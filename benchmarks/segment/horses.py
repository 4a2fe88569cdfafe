"""Segmentation from scribbles on pictures the segmentation app was never tuned on: the Weizmann horses, beside
OpenCV's GrabCut and scikit-image's random_walker on the same simulated scribbles.

    python benchmarks/segment/horses.py ../shared/data/weizmann-horses [--limit N] [--sheet PNG] [--json OUT]

The 228 horse photographs (scaled to their figure-ground masks, about 320 x 240) carry no user scribbles, so
strokes are simulated from each mask, in two densities (a fixed draw per picture):

- sparse: the foreground's skeleton (of the mask eroded by 4 pixels) within two discs a fifth of the picture wide,
  and the background ring 12-14 pixels outside the horse within three such discs;
- dense: the whole skeleton, the whole ring and a 3-pixel frame along the picture's border.

Scored: the mean foreground IoU against the mask per method and density, the pictures where imageforest beats
GrabCut, and the median seconds per picture; all in this process on the same inputs, imageforest with its recipe
(`SegmentationSession` defaults, chosen on the GrabCut pictures) and with `stroke_regions` on. The scribbles are
not a person's: the figures compare the methods on new pictures, not with the GrabCut set's real strokes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image as PILImage
from scipy import ndimage

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from grabcut import grabcut_peer, ours, random_walker_peer  # the same peers as on the GrabCut pictures

from imageforest.apps.segment import prepare

METHODS = {"imageforest": ours({}), "imageforest --stroke-regions": ours({"stroke_regions": True}),
           "OpenCV GrabCut": grabcut_peer, "skimage random_walker": random_walker_peer}


def load(root: Path, name: str) -> tuple[np.ndarray, np.ndarray]:
    """The photograph scaled to its mask's size (h, w, 3) uint8 and the mask (h, w) bool."""
    mask = np.asarray(PILImage.open(root / "figure_ground" / name).convert("L")) > 127
    img = PILImage.open(root / "rgb" / name).convert("RGB").resize(mask.shape[::-1], PILImage.BILINEAR)
    return np.asarray(img), mask


def simulated_scribbles(mask: np.ndarray, dense: bool, seed: int) -> np.ndarray:
    """(h, w) uint8: 1 foreground strokes, 2 background strokes, 0 elsewhere (see the module notes)."""
    from skimage.morphology import skeletonize

    rng = np.random.default_rng(seed)
    h, w = mask.shape
    skeleton = skeletonize(ndimage.binary_erosion(mask, iterations=4))
    if not skeleton.any():
        skeleton = skeletonize(mask)
    outside = ndimage.distance_transform_edt(~mask)
    ring = (outside >= 12) & (outside <= 14)
    if dense:
        ring |= ~mask & ~ndimage.binary_erosion(np.ones_like(mask), iterations=3)
    else:
        radius = max(h, w) / 10.0
        yy, xx = np.mgrid[:h, :w]

        def discs(where: np.ndarray, n: int) -> np.ndarray:
            ys, xs = np.nonzero(where)
            keep = np.zeros_like(where)
            for i in rng.choice(ys.size, size=min(n, ys.size), replace=False):
                keep |= (yy - ys[i]) ** 2 + (xx - xs[i]) ** 2 <= radius ** 2
            return where & keep

        skeleton, ring = discs(skeleton, 2), discs(ring, 3)
    out = np.zeros(mask.shape, np.uint8)
    out[ring] = 2
    out[skeleton] = 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--sheet", type=Path, default=None,
                    help="a PNG of the first 12 pictures' sparse strokes (red foreground, blue background), "
                         "imageforest's outline (yellow) and the mask's (white)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    names = sorted(p.name for p in (args.data / "figure_ground").glob("*.jpg"))[: args.limit]
    scores = {d: {m: [] for m in METHODS} for d in ("sparse", "dense")}
    seconds = {m: [] for m in METHODS}
    shown = []
    for k, name in enumerate(names):
        img, mask = load(args.data, name)
        prepared = prepare(img, rgb=True)
        for density in ("sparse", "dense"):
            scr = simulated_scribbles(mask, density == "dense", seed=k)
            if not ((scr == 1).any() and (scr == 2).any()):
                continue
            for method, run in METHODS.items():
                t0 = time.perf_counter()
                fg = run(img, scr, prepared)
                seconds[method].append(time.perf_counter() - t0)
                scores[density][method].append(float(np.sum(fg & mask) / max(np.sum(fg | mask), 1)))
                if args.sheet is not None and len(shown) < 12 and density == "sparse" and method == "imageforest":
                    shown.append((img, scr, fg, mask))
    print(f"{len(names)} Weizmann horse pictures, simulated scribbles; mean IoU (pictures where imageforest beats "
          "GrabCut), median seconds per picture")
    for density, by_method in scores.items():
        ours_iou = np.array(by_method["imageforest"])
        peer = np.array(by_method["OpenCV GrabCut"])
        print(f"  {density} ({ours_iou.size} pictures): " + ", ".join(
            f"{m} {np.mean(v):.3f}" for m, v in by_method.items())
            + f"; imageforest ahead of GrabCut on {np.sum(ours_iou > peer)} of {ours_iou.size}")
    print("  seconds: " + ", ".join(f"{m} {np.median(v):.2f}" for m, v in seconds.items()))
    if args.json is not None:
        args.json.write_text(json.dumps({"names": names, "iou": scores}))
    if args.sheet is not None and shown:
        tiles = []
        for img, scr, fg, mask in shown:
            view = img.copy()
            edge = fg ^ ndimage.binary_erosion(fg)
            view[edge] = (255, 255, 0)
            view[mask ^ ndimage.binary_erosion(mask)] = (255, 255, 255)
            view[scr == 1] = (255, 0, 0)
            view[scr == 2] = (0, 128, 255)
            tiles.append(PILImage.fromarray(view).resize((240, 180), PILImage.LANCZOS))
        sheet = PILImage.new("RGB", (4 * 240, 180 * -(-len(tiles) // 4)))
        for i, t in enumerate(tiles):
            sheet.paste(t, ((i % 4) * 240, (i // 4) * 180))
        sheet.quantize(colors=256, method=PILImage.Quantize.MEDIANCUT).save(args.sheet, optimize=True)


if __name__ == "__main__":
    main()
