"""Segmentation at scale with a saved model: a 10,000 x 10,000 picture, and a batch of 100 pictures.

    python benchmarks/segment/scale.py ../shared/data/grabcut-scribbles [--side 10000] [--batch 100] [--no-whole]

A model is grown on one GrabCut picture's denser scribbles (`--save-model`). Then, each as its own
`imageforest segment` process (wall time and peak resident memory from the kernel's accounting of the child):

- the large picture: a mosaic of the GrabCut pictures (each scaled 4x, JPEG-free PNG) of `--side` pixels square,
  segmented in tiles (the command's path for pictures over 2048 x 2048) beside the same model on the whole picture
  at once (`SegmentationForest.segment` on one `prepare`d picture: what the command did before tiles);
  tiled and whole labels are compared pixel by pixel;
- the batch: `--batch` GrabCut pictures (the 35, repeated) in one `imageforest segment 'folder/*.png' --model M -o
  OUT/` (one model load), beside a loop of one `imageforest segment` process per picture (what a user's shell loop
  does): pictures per second of each.
"""

from __future__ import annotations

import argparse
import glob
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image as PILImage

PILImage.MAX_IMAGE_PIXELS = None  # the mosaic is ours


def child(args: list[str], env: dict | None = None) -> tuple[float, float]:
    """Run a command; (wall seconds, its peak resident GB)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    done = subprocess.run(args, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{done.stderr[-2000:]}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return wall, max(peak, before) / 1024 ** 2  # KB to GB (the maximum over children so far)


def mosaic(pictures: list[Path], side: int) -> np.ndarray:
    out = np.zeros((side, side, 3), dtype=np.uint8)
    y = x = k = 0
    row_h = 0
    while y < side:
        img = PILImage.open(pictures[k % len(pictures)]).convert("RGB")
        img = img.resize((img.width * 4, img.height * 4), PILImage.BILINEAR)
        a = np.asarray(img)
        h, w = min(a.shape[0], side - y), min(a.shape[1], side - x)
        out[y:y + h, x:x + w] = a[:h, :w]
        row_h = max(row_h, h)
        x += w
        k += 1
        if x >= side:
            x, y, row_h = 0, y + row_h, 0
    return out


def grow_model(data: Path, picture: Path, work: Path) -> Path:
    """The model both large-picture benchmarks apply: `imageforest segment --save-model` on `picture` (a GrabCut
    picture, saved as PNG in `work`) with its set-2 scribbles; its path in `work`."""
    PILImage.open(picture).convert("RGB").save(work / "train.png")
    model = work / "m.npz"
    child([sys.executable, "-m", "imageforest.cli", "segment", str(work / "train.png"), "--scribbles",
           str(data / "scribbles-set-2" / f"{picture.stem}.png"), "-o", str(work / "train_mask.png"),
           "--save-model", str(model)])
    return model


WHOLE = ("import sys, numpy as np; from PIL import Image; Image.MAX_IMAGE_PIXELS = None\n"
         "from imageforest.apps.segment import SegmentationForest, prepare\n"
         "m = SegmentationForest.load(sys.argv[1]); a = np.asarray(Image.open(sys.argv[2]).convert('RGB'))\n"
         "r = m.segment(prepare(a, rgb=True)); Image.fromarray(r.labels).save(sys.argv[3])\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", type=Path)
    ap.add_argument("--side", type=int, default=10_000)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--no-whole", action="store_true",
                    help="skip the whole-picture peer (at a side of 10,000 it needs over 24 GB)")
    args = ap.parse_args()
    exe = [sys.executable, "-m", "imageforest.cli"]
    pictures = sorted(Path(p) for p in glob.glob(str(args.data / "images" / "*.jpg")))
    work = Path(tempfile.mkdtemp(prefix="segment_scale_"))
    try:
        model = grow_model(args.data, pictures[0], work)
        big = work / "big.png"
        PILImage.fromarray(mosaic(pictures, args.side)).save(big, compress_level=1)
        print(f"large picture {args.side} x {args.side} RGB ({big.stat().st_size / 1e6:.0f} MB PNG)", flush=True)
        wall, peak = child([*exe, "segment", str(big), "--model", str(model), "-o", str(work / "tiled.png")])
        print(f"  imageforest segment (tiles): {wall:.1f} s, peak {peak:.2f} GB", flush=True)
        if not args.no_whole:
            # a fresh accounting for the peer: its own interpreter measures itself
            probe = subprocess.run([sys.executable, "-c", WHOLE + "import resource; print(resource.getrusage("
                                    "resource.RUSAGE_SELF).ru_maxrss)", str(model), str(big), str(work / "whole.png")],
                                   capture_output=True, text=True)
            if probe.returncode == 0:
                peak_whole = int(probe.stdout.split()[-1]) / 1024 ** 2
                tiled = np.asarray(PILImage.open(work / "tiled.png"))
                whole = np.asarray(PILImage.open(work / "whole.png"))
                print(f"  the whole picture at once: peak {peak_whole:.2f} GB; labels agree on "
                      f"{np.mean(tiled == whole) * 100:.4f}% of pixels", flush=True)
            else:
                lines = probe.stderr.strip().splitlines()
                why = lines[-1] if lines else (f"killed by signal {-probe.returncode} (out of memory?)"
                                               if probe.returncode < 0 else f"exit code {probe.returncode}")
                print(f"  the whole picture at once failed: {why}", flush=True)
        folder = work / "batch"
        folder.mkdir()
        for k in range(args.batch):
            src = pictures[k % len(pictures)]
            PILImage.open(src).convert("RGB").save(folder / f"{k:03d}_{src.stem}.png")
        wall, _ = child([*exe, "segment", str(folder / "*.png"), "--model", str(model), "-o", str(work / "out")])
        print(f"batch of {args.batch} pictures, one command: {wall:.1f} s ({args.batch / wall:.2f} pictures/s)",
              flush=True)
        n_loop = min(args.batch, 20)
        t0 = time.perf_counter()
        for path in sorted(folder.glob("*.png"))[:n_loop]:
            child([*exe, "segment", str(path), "--model", str(model), "-o", str(work / "loop.png")],
                  env={**os.environ})
        loop = time.perf_counter() - t0
        print(f"  a loop of one process per picture ({n_loop} of them): {loop / n_loop:.2f} s each "
              f"({n_loop / loop:.2f} pictures/s); the batch is {(args.batch / wall) / (n_loop / loop):.1f}x faster",
              flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
