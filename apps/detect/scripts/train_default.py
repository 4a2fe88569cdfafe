"""The recipes of the detectors shipped in `apps/detect/models/`: horses (the default) and cars.

    python -m imageforest.apps.detect.scripts.train_default [--cars] [--data DIR] [--negatives DIR] [--out PATH]
        [--benchmark-json RESULTS.json]

Horses: a Hough forest (10 trees of depth 15, 400 patches per image, fixed seed) on the 228 Weizmann horses with the
35 GrabCut images as background images. `--benchmark-json` records the accuracy measured by
`benchmarks/detect/horses.py --json` (cross-validated, so never on the images it was trained on) in the card of the
existing model, and sets its default score threshold to the cross-validated equal-error score.

Cars (`--cars`): the same forest with viewpoints (`CROPS_RECIPE`) on the 947 cropped views of the 14 training cars
of the Weizmann Cars ViewPoint set and its 400 car-free photographs. `--benchmark-json` takes
`benchmarks/detect/cars.py --model apps/detect/models/cars.npz --json` (the 3 validation cars, never trained on):
their figures go into the card, and their equal-error score becomes the default threshold.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from imageforest.apps.detect.api import DEFAULT_MODEL, SHIPPED
from imageforest.apps.detect.model import HoughForestDetector
from imageforest.apps.detect.recipe import CROPS_RECIPE, RECIPE
from imageforest.apps.detect.training import train_detector

NAME = "weizmann-horses"
VERSION = "1"
CARS_NAME = "wcvp-cars"
CARS_VERSION = "2"  # 2: the window classifier of the viewpoints
DATA = Path(__file__).resolve().parents[3].parent / "shared" / "data"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DATA / "weizmann-horses")
    ap.add_argument("--negatives", type=Path, default=DATA / "grabcut-scribbles" / "images")
    ap.add_argument("--out", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--benchmark-json", type=Path, default=None,
                    help="benchmarks/detect/horses.py --json output to record in the model card")
    ap.add_argument("--cars", action="store_true", help="the car detector (viewpoints) instead of the horses")
    args = ap.parse_args()
    if args.cars:
        cars(args)
        return
    if args.benchmark_json is not None:
        model = HoughForestDetector.load(args.out)
        results = json.loads(args.benchmark_json.read_text())["results"]
        seed = f"hough/seed{RECIPE['random_state']}"
        own = results.get("hough", results.get(seed))  # the recipe's seed when the benchmark ran several
        model.model_card_["measured"] = {"cross_validated_5_fold": own, "seeds_summary": results.get("summary"),
                                         **{k: v for k, v in results.items() if k in ("dlib-hog", "window-forest")}}
        model.threshold_ = float(own["eer_score"])
        model.save(args.out)
        print(f"card of {args.out} updated; default threshold {model.threshold_:.3f}")
        return
    t0 = time.perf_counter()
    model, summary = train_detector(args.data, negatives_dir=args.negatives, progress=print, **RECIPE)
    model.model_card_ = {"name": NAME, "version": VERSION,
                         "trained_on": "228 Weizmann horses (Borenstein and Ullman; boxes from their masks) and 35 "
                                       "GrabCut images without horses as background",
                         "recipe": RECIPE, **summary}
    print(f"trained in {time.perf_counter() - t0:.0f} s")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    model.save(args.out)
    print(f"wrote {args.out} ({args.out.stat().st_size / 2**20:.1f} MiB)")


def cars(args: argparse.Namespace) -> None:
    out = args.out if args.out != DEFAULT_MODEL else SHIPPED["cars"]
    if args.benchmark_json is not None:
        model = HoughForestDetector.load(out)
        results = json.loads(args.benchmark_json.read_text())["results"]
        own = results["saved"]
        model.model_card_["measured"] = {"validation_3_cars_222_photographs": own,
                                         **{k: v for k, v in results.items() if k == "dlib-hog"}}
        model.threshold_ = float(own["eer_score"])
        model.save(out)
        print(f"card of {out} updated; default threshold {model.threshold_:.3f}")
        return
    data = args.data if args.data != DATA / "weizmann-horses" else DATA / "wcvp-cars" / "train"
    t0 = time.perf_counter()
    model, summary = train_detector(data, progress=print, **CROPS_RECIPE)
    model.model_card_ = {"name": CARS_NAME, "version": CARS_VERSION,
                         "trained_on": "947 cropped views of the 14 training cars of the Weizmann Cars ViewPoint set "
                                       "(Glasner et al. 2012) and its 400 car-free photographs",
                         "recipe": summary["settings"], **summary}
    print(f"trained in {time.perf_counter() - t0:.0f} s")
    model.save(out)
    print(f"wrote {out} ({out.stat().st_size / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()
