"""Multi-view car detection with viewpoint: Hough forests (plain and alternating) beside dlib's HOG detectors, in the
same process, trained on the same crops and scored on the same photographs.

    python benchmarks/detect/cars.py [--variants hough,adhf] [--seeds 0] [--viewpoint-bins 0] [--trees 10]
        [--depth 15] [--patches 200] [--images N] [--json OUT] [--no-dlib] [--model M.npz]
        [--view-radii 0.04,0.08,0.15]

Data (Weizmann Cars ViewPoint, Glasner et al., "Viewpoint-aware object detection and continuous pose estimation",
2012): training on the 947 cropped views of the 14 training cars with the 400 car-free photographs as background,
scoring on the 222 photographs of the 3 validation cars (one car each, never seen in training). `--model` scores a
saved model instead of training one (the shipped one: apps/detect/models/cars.npz); a model with a window
classifier of the viewpoint is also scored with its votes alone ("saved/votes").

Reported per method: average precision at IoU >= 0.5 (area under the monotone precision-recall curve, VOC 2010, and
the 11-point VOC 2007 one), recall at the equal-error rate and at any score, the azimuth error of the strongest
correct detection of each photograph (median, and the shares within 22.5 and 45 degrees), median seconds per
photograph (warm), training seconds and peak resident memory growth during training.

`--view-radii` scores a forest's viewpoints read within each of several radii (`view_radius`, object sizes) and
chooses one by leave-one-car-out: for each validation car, the radius with the most azimuths within 22.5 degrees on
the other two cars is scored on it, so the reported share is not chosen on the photographs it is measured on.

Peer: dlib's HOG + structural SVM `simple_object_detector`, one detector per viewpoint group (side, back, front, and
the two diagonals, as dlib's examples split views whose shapes differ), each with the group's median aspect ratio,
left-right flips, C = 5, each crop pasted into a car-free photograph for the border dlib's window reads; their
windows are merged by non-maximum suppression, and a detection's azimuth is its
group's circular mean.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks._measure import measure, mib
from benchmarks.detect.common import Scorer, dlib_available, dlib_options
from imageforest.apps.detect.datasets import list_images, open_box_folder, open_crop_folder, read_rgb
from imageforest.apps.detect.model import HoughForestDetector
from imageforest.apps.detect.recipe import CROPS_RECIPE
from imageforest.voting.hough import box_iou, non_maximum_suppression

CARS = Path(__file__).resolve().parents[3] / "shared" / "data" / "wcvp-cars"


def angle_error(a: float, b: float) -> float:
    """Absolute difference of two azimuths in degrees, in [0, 180]."""
    return float(abs((a - b + 180.0) % 360.0 - 180.0))


def eleven_point_ap(scores: list[float], hits: list[bool], n_true: int) -> float:
    """VOC 2007 average precision: the mean over recall 0, 0.1, ..., 1 of the best precision at that recall or more."""
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
    tp = np.cumsum(np.asarray(hits, dtype=np.float64)[order])
    recall = tp / max(n_true, 1)
    precision = tp / np.arange(1, tp.size + 1)
    return float(np.mean([precision[recall >= r].max() if np.any(recall >= r) else 0.0
                          for r in np.linspace(0, 1, 11)]))


def view_group(azimuth: np.ndarray) -> np.ndarray:
    """0 side, 1 back, 2 front, 3 back diagonal, 4 front diagonal: groups closed under a left-right flip (azimuth
    a -> 180 - a), so that dlib's flipped copies stay in their group."""
    a = np.mod(azimuth, 360.0)
    side = np.minimum(np.abs((a + 180.0) % 360.0 - 180.0), np.abs(a - 180.0)) <= 22.5
    back = np.abs(a - 90.0) <= 22.5
    front = np.abs(a - 270.0) <= 22.5
    return np.where(side, 0, np.where(back, 1, np.where(front, 2, np.where(a < 180.0, 3, 4))))


def circular_mean(deg: np.ndarray) -> float:
    r = np.deg2rad(deg)
    return float(np.rad2deg(np.arctan2(np.sin(r).mean(), np.cos(r).mean())) % 360.0)


def train_dlib_groups(crops: list[np.ndarray], azimuth: np.ndarray, negatives: list[np.ndarray], area: int = 80 * 80,
                      c: float = 5.0, seed: int = 0) -> list[tuple[object, float]]:
    """One dlib detector per view group: (detector, the group's mean azimuth). dlib's HOG window reads a border
    around the box, which a tight crop lacks, so each crop is pasted into a car-free photograph (in turn, brought to
    the size at which the car spans 40% of it, at a random place off its border): the scenes dlib learns from look
    like the test photographs, and it mines its hard negatives from them and from the other car-free photographs."""
    import dlib

    from imageforest.apps.detect.model import resize

    groups = view_group(azimuth)
    rng = np.random.default_rng(seed)
    out = []
    negs = [np.ascontiguousarray((n * 255).round().astype(np.uint8)) for n in negatives]
    for g in range(5):
        members = np.flatnonzero(groups == g)
        images, rects = [], []
        for i, k in enumerate(members):
            crop = crops[k]
            h, w = crop.shape[:2]
            back = negatives[(g * 97 + i) % len(negatives)]
            scene = resize(back, 2.5 * np.sqrt(h * w) / np.sqrt(back.shape[0] * back.shape[1]))
            scene = np.array(scene, copy=True)
            m = round(0.2 * max(h, w))  # dlib's window needs a border around the box
            if scene.shape[0] <= h + 2 * m or scene.shape[1] <= w + 2 * m:
                continue
            y0 = int(rng.integers(m, scene.shape[0] - h - m))
            x0 = int(rng.integers(m, scene.shape[1] - w - m))
            scene[y0:y0 + h, x0:x0 + w] = crop
            images.append(np.ascontiguousarray((np.clip(scene, 0, 1) * 255).round().astype(np.uint8)))
            rects.append([dlib.rectangle(x0, y0, x0 + w - 1, y0 + h - 1)])
        used = {(g * 97 + i) % len(negatives) for i in range(len(members))}
        others = [n for j, n in enumerate(negs) if j not in used]
        images += others
        rects += [[] for _ in others]
        detector = dlib.train_simple_object_detector(images, rects, dlib_options(area, c))
        out.append((detector, circular_mean(azimuth[members])))
    return out


def run_dlib_groups(models: list[tuple[object, float]], rgb: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Boxes, scores and azimuths of every group's windows above -1, merged by non-maximum suppression."""
    import dlib

    img = np.ascontiguousarray((rgb * 255).round().astype(np.uint8))
    dets, scores, which = dlib.simple_object_detector.run_multiple([m for m, _ in models], img, upsample_num_times=0,
                                                                   adjust_threshold=-1.0)
    boxes = np.array([[d.left(), d.top(), d.right() + 1, d.bottom() + 1] for d in dets], dtype=np.float64)
    boxes = boxes.reshape(-1, 4)
    scores = np.asarray(scores, dtype=np.float64)
    azimuth = np.array([models[int(i)][1] for i in which], dtype=np.float64)
    if len(boxes) == 0:
        return boxes, scores, azimuth
    keep = non_maximum_suppression(boxes, scores, 0.3, 0.6)
    return boxes[keep], scores[keep], azimuth[keep]


class ViewScorer(Scorer):
    """PASCAL scoring plus the azimuth error of each photograph's strongest correct detection."""

    def __init__(self) -> None:
        super().__init__()
        self.errors: list[float] = []

    def add_views(self, boxes: np.ndarray, scores: np.ndarray, azimuth: np.ndarray, truth: np.ndarray,
                  truth_azimuth: np.ndarray) -> None:
        self.add(boxes, scores, truth)
        if len(boxes) == 0:
            return
        iou = box_iou(boxes, truth)
        for j in range(len(truth)):
            hit = np.flatnonzero(iou[:, j] >= 0.5)
            if hit.size and np.isfinite(azimuth[hit]).any():
                best = hit[np.argmax(np.where(np.isfinite(azimuth[hit]), scores[hit], -np.inf))]
                self.errors.append(angle_error(float(azimuth[best]), float(truth_azimuth[j])))

    def summary(self) -> dict:
        out = super().summary()
        e = np.asarray(self.errors)
        order = np.argsort(-np.asarray(self.scores), kind="stable")
        out.update({"ap_11point": eleven_point_ap(self.scores, self.hits, self.n_true),
                    "recall_any": float(np.sum(np.asarray(self.hits)[order]) / max(self.n_true, 1)),
                    "azimuth_median_deg": float(np.median(e)) if e.size else float("nan"),
                    "within_22_5": float(np.mean(e <= 22.5)) if e.size else float("nan"),
                    "within_45": float(np.mean(e <= 45.0)) if e.size else float("nan"), "n_views": int(e.size)})
        return out


def choose_view_radius(model: HoughForestDetector, tests: list, cars: list[str], radii: list[float]) -> dict:
    """Per radius and car, the azimuth errors of the photographs' correct detections; the leave-one-car-out
    choice of the radius and the share within 22.5 degrees it gives on the cars it was not chosen on."""
    kept = model.view_radius
    within: dict[float, dict[str, list[bool]]] = {}
    for r in radii:
        model.view_radius = r
        per_car: dict[str, list[bool]] = {}
        for (rgb, truth, truth_az), car in zip(tests, cars, strict=True):
            sc = ViewScorer()
            found = model.detect(rgb, threshold=0.0).detections
            sc.add_views(np.array([d.box_xyxy for d in found]).reshape(-1, 4), np.array([d.score for d in found]),
                         np.array([d.viewpoint[0] if d.viewpoint else np.nan for d in found]), truth, truth_az)
            per_car.setdefault(car, []).extend(e <= 22.5 for e in sc.errors)
        within[r] = per_car
        share = np.mean([v for vs in per_car.values() for v in vs])
        print(f"  view_radius {r:g}: within 22.5 {share:.3f} ("
              + ", ".join(f"car {c} {np.mean(v):.3f}" for c, v in sorted(per_car.items())) + ")", flush=True)
    model.view_radius = kept
    held: list[bool] = []
    choice = {}
    for car in sorted(set(cars)):
        def others(r: float, car: str = car) -> float:
            return float(np.mean([v for c, vs in within[r].items() if c != car for v in vs]))
        best = max(radii, key=others)  # ties go to the first listed
        choice[car] = best
        held.extend(within[best][car])
    print(f"  leave-one-car-out: radius per held-out car {choice}, within 22.5 {np.mean(held):.3f}", flush=True)
    return {"within_22_5": {str(r): float(np.mean([v for vs in within[r].values() for v in vs])) for r in radii},
            "per_car": {str(r): {c: float(np.mean(v)) for c, v in within[r].items()} for r in radii},
            "leave_one_car_out": {"choice": choice, "within_22_5": float(np.mean(held))}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=CARS)
    ap.add_argument("--variants", default="hough", help="comma-separated: hough, adhf")
    ap.add_argument("--seeds", default="0", help="comma-separated forest seeds")
    ap.add_argument("--trees", type=int, default=CROPS_RECIPE["n_trees"])
    ap.add_argument("--depth", type=int, default=CROPS_RECIPE["max_depth"])
    ap.add_argument("--patches", type=int, default=CROPS_RECIPE["patches_per_image"])
    ap.add_argument("--viewpoint-bins", type=int, default=CROPS_RECIPE["viewpoint_bins"])
    ap.add_argument("--viewpoint-share", type=float, default=0.3)
    ap.add_argument("--no-flip", action="store_true")
    ap.add_argument("--images", type=int, default=None, help="score only every k-th photograph so that N are scored")
    ap.add_argument("--model", type=Path, default=None, help="score this saved model instead of training")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--no-dlib", action="store_true")
    ap.add_argument("--no-forest", action="store_true", help="score dlib only")
    ap.add_argument("--view-radii", default=None,
                    help="comma-separated view_radius values for the forests, chosen leave-one-car-out")
    args = ap.parse_args()

    crops = open_crop_folder(args.data / "train")
    val = open_box_folder(args.data / "val")
    t0 = time.perf_counter()
    train = [crops.load(k) for k in range(len(crops.names))]
    negatives = [read_rgb(p) for p in list_images(crops.negatives_dir)]
    names = val.names if args.images is None else val.names[::max(1, len(val.names) // args.images)]
    tests = [(*val.load(n), val.viewpoints(n)) for n in names]
    print(f"{len(train)} crops, {len(negatives)} background photographs, {len(tests)} test photographs "
          f"(read in {time.perf_counter() - t0:.0f} s)", flush=True)

    models: dict[str, object] = {}
    fits: dict[str, tuple[float, int]] = {}
    if args.no_forest:
        pass
    elif args.model is not None:
        models["saved"] = HoughForestDetector.load(args.model)
        if models["saved"].window_forest_ is not None:  # the same forest reading its votes alone, beside it
            models["saved/votes"] = HoughForestDetector.load(args.model)
            models["saved/votes"].window_forest_ = None
    else:
        for seed in [int(s) for s in args.seeds.split(",")]:
            for variant in args.variants.split(","):
                det = HoughForestDetector(args.trees, max_depth=args.depth, patches_per_image=args.patches,
                                          variant=variant, viewpoint_bins=args.viewpoint_bins,
                                          viewpoint_share=args.viewpoint_share, flip=not args.no_flip,
                                          object_sizes=CROPS_RECIPE["object_sizes"], random_state=seed)
                _, fit_s, fit_mem = measure(lambda d=det: d.fit([c for c, _ in train], [b for _, b in train],
                                                                negatives, [crops.azimuth[k:k + 1]
                                                                            for k in range(len(train))]))
                label = f"{variant}/seed{seed}"
                models[label] = det
                fits[label] = (fit_s, fit_mem)
                print(f"{label}: fit {fit_s:.0f} s, {mib(fit_mem)}", flush=True)
    if not args.no_dlib and dlib_available():
        models["dlib-hog"], fit_s, fit_mem = measure(lambda: train_dlib_groups([c for c, _ in train], crops.azimuth,
                                                                               negatives))
        fits["dlib-hog"] = (fit_s, fit_mem)
        print(f"dlib-hog: fit {fit_s:.0f} s, {mib(fit_mem)}", flush=True)

    out = {}
    print(f"\n{'method':<16} {'AP':>6} {'AP11':>6} {'EER rec':>8} {'recall':>7} {'az med':>7} {'<22.5':>6} "
          f"{'<45':>6} {'s/img':>6} {'fit s':>6}")
    for label, model in models.items():
        sc = ViewScorer()
        for rgb, truth, truth_az in tests:
            t = time.perf_counter()
            if label == "dlib-hog":
                boxes, scores, azimuth = run_dlib_groups(model, rgb)
            else:
                found = model.detect(rgb, threshold=0.0).detections
                boxes = np.array([d.box_xyxy for d in found]).reshape(-1, 4)
                scores = np.array([d.score for d in found])
                azimuth = np.array([d.viewpoint[0] if d.viewpoint else np.nan for d in found])
            sc.seconds.append(time.perf_counter() - t)
            sc.add_views(boxes, scores, azimuth, truth, truth_az)
        s = sc.summary()
        s["fit_s"], s["fit_peak_mib"] = (fits[label][0], fits[label][1] / 2**20) if label in fits else (None, None)
        out[label] = s
        print(f"{label:<16} {s['ap']:6.3f} {s['ap_11point']:6.3f} {s['eer_recall']:8.3f} {s['recall_any']:7.3f} "
              f"{s['azimuth_median_deg']:7.1f} {s['within_22_5']:6.2f} {s['within_45']:6.2f} "
              f"{s['s_per_image']:6.3f} {s['fit_s'] or 0:6.0f}", flush=True)
    if args.view_radii:
        radii = [float(r) for r in args.view_radii.split(",")]
        cars = [n.split("_")[1] if n.startswith("car_") else n for n in names]
        for label, model in models.items():
            if label != "dlib-hog":
                out[label]["view_radii"] = choose_view_radius(model, tests, cars, radii)
    forests = {k: v for k, v in out.items() if k.split("/")[0] in ("hough", "adhf")}
    summary = {}
    for variant in ("hough", "adhf"):
        aps = [v["ap"] for k, v in forests.items() if k.startswith(variant + "/")]
        if aps:
            summary[variant] = {"ap_mean": float(np.mean(aps)), "ap_std": float(np.std(aps)), "n_seeds": len(aps),
                                "azimuth_median_mean": float(np.mean([v["azimuth_median_deg"] for k, v in
                                                                      forests.items() if k.startswith(variant)]))}
            print(f"{variant}: AP {np.mean(aps):.3f} +- {np.std(aps):.3f} over {len(aps)} seed(s)")
    if "hough" in summary and "adhf" in summary:
        diffs = [out[f"adhf/seed{s}"]["ap"] - out[f"hough/seed{s}"]["ap"] for s in args.seeds.split(",")]
        summary["adhf_minus_hough"] = {"mean": float(np.mean(diffs)), "std": float(np.std(diffs)),
                                       "per_seed": diffs}
        print(f"AP adhf - hough per seed: {', '.join(f'{d:+.3f}' for d in diffs)}")
    out["summary"] = summary
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "results": out},
                                        indent=1))


if __name__ == "__main__":
    main()
