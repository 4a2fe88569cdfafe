"""The recipe of the default body model shipped in `apps/bodyparts/models/bodies.npz`.

    python -m imageforest.apps.bodyparts.scripts.train_default [--images N] [--renders DIR] [--out PATH]
        [--benchmark-json RESULTS.json]

Renders N bodies at 320 x 240 with `imageforest.apps.bodyparts.renderer` (seed 1; the benchmark's held-out renders use
seed 2), trains 3 trees of depth 20 on them with the recipe below and a fixed seed, and writes the model with its
card. The default 36,000 bodies render in about 13 minutes and train in about 54 minutes within 13.6 GB on a
2-core machine. `--benchmark-json` adds the accuracy measured by `benchmarks/bodyparts/renders.py --json` to the
card of the existing model instead of training.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from imageforest.apps.bodyparts.api import DEFAULT_MODEL
from imageforest.apps.bodyparts.model import BodyPartsForest
from imageforest.apps.bodyparts.recipe import RECIPE
from imageforest.apps.bodyparts.training import train_bodyparts

NAME = "rendered-bodies-31-parts"
VERSION = "4"
RENDER_SEED = 1
RENDERER = ["-m", "imageforest.apps.bodyparts.renderer"]  # the application's renderer, installed with it


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=36000, help="bodies to render and train on")
    ap.add_argument("--renders", type=Path, default=None, help="folder of renders to reuse (or to fill)")
    ap.add_argument("--out", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--benchmark-json", type=Path, default=None,
                    help="benchmarks/bodyparts/renders.py --json output to record in the model card")
    args = ap.parse_args()
    if args.benchmark_json is not None:
        model = BodyPartsForest.load(args.out)
        model.model_card_["measured"] = json.loads(args.benchmark_json.read_text())["summary"]
        model.save(args.out)
        print(f"card of {args.out} updated")
        return
    with tempfile.TemporaryDirectory() as tmp:
        renders = args.renders or Path(tmp)
        if not any(renders.glob("*_depth.png")):
            subprocess.run([sys.executable, *RENDERER, "-n", str(args.images), "-o", str(renders), "--seed",
                            str(RENDER_SEED)], check=True)
        t0 = time.perf_counter()
        model, summary = train_bodyparts(renders, n_images=args.images, progress=print, **RECIPE)
        model.model_card_ = {"name": NAME, "version": VERSION,
                             "trained_on": f"{args.images} bodies rendered by data_scripts/render_bodies.py "
                                           f"(seed {RENDER_SEED}, 320 x 240, Kinect-like camera fx = 285 px)",
                             "recipe": RECIPE, **summary}
        print(f"trained in {time.perf_counter() - t0:.0f} s")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    model.save(args.out)
    print(f"{args.out}: {args.out.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
