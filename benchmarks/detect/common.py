"""Data, folds, scoring and peers of the detection benchmarks (Weizmann horses plus GrabCut background images).

Images are shown at the masks' resolution (the grey frame of the Weizmann horses, about 320 x 240), which is the
frame of their boxes; background images are brought to the median horse image's geometric size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from benchmarks.bodyparts.common import average_precision
from imageforest.apps.detect.datasets import list_images, open_box_folder, read_rgb
from imageforest.apps.detect.model import resize
from imageforest.voting.hough import box_iou, hough_peaks, non_maximum_suppression

HORSES = Path(__file__).resolve().parents[3] / "shared" / "data" / "weizmann-horses"
BACKGROUNDS = Path(__file__).resolve().parents[3] / "shared" / "data" / "grabcut-scribbles" / "images"


@dataclass
class Sample:
    name: str
    rgb: np.ndarray  # (h, w, 3) float32 in [0, 1]
    boxes: np.ndarray  # (k, 4) [x0, y0, x1, y1]; (0, 4) for a background image


def load_horses(folder: Path = HORSES) -> list[Sample]:
    """The horses at their masks' resolution, with their boxes."""
    data = open_box_folder(folder)
    out = []
    for name in data.names:
        rgb, boxes = data.load(name)
        gw, _ = data.raw[name]["gray_size_wh"]
        s = gw / rgb.shape[1]
        out.append(Sample(name, resize(rgb, s), boxes * s))
    return out


def load_backgrounds(folder: Path = BACKGROUNDS, geometric_size: float = 280.0) -> list[Sample]:
    """Background images (no horse), resized to the given geometric size sqrt(h w)."""
    out = []
    for path in list_images(folder):
        rgb = read_rgb(path)
        out.append(Sample(path.name, resize(rgb, geometric_size / np.sqrt(rgb.shape[0] * rgb.shape[1])),
                          np.zeros((0, 4))))
    return out


def folds(n: int, k: int = 5, seed: int = 0) -> list[np.ndarray]:
    """k disjoint index sets covering range(n) (a seeded permutation cut into k parts)."""
    perm = np.random.default_rng(seed).permutation(n)
    return [np.sort(part) for part in np.array_split(perm, k)]


@dataclass
class Scorer:
    """PASCAL scoring: a detection is correct when it overlaps a not yet claimed true box with IoU >= 0.5."""

    scores: list[float] = field(default_factory=list)
    hits: list[bool] = field(default_factory=list)
    n_true: int = 0
    seconds: list[float] = field(default_factory=list)

    def add(self, boxes: np.ndarray, scores: np.ndarray, truth: np.ndarray) -> None:
        boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
        self.n_true += len(truth)
        claimed = np.zeros(len(truth), dtype=bool)
        order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
        iou = box_iou(boxes, truth) if len(truth) else np.zeros((len(boxes), 0))
        for i in order:
            hit = False
            if len(truth):
                cand = np.where(claimed, -1.0, iou[i])
                j = int(np.argmax(cand))
                if cand[j] >= 0.5:
                    claimed[j] = True
                    hit = True
            self.scores.append(float(scores[i]))
            self.hits.append(hit)

    def ap(self) -> float:
        return average_precision(self.scores, self.hits, self.n_true)

    def equal_error(self) -> tuple[float, float]:
        """Recall where precision equals recall (the first rank at which precision drops to recall or below), and
        the score of the detection at that rank (a threshold with as many misses as false detections)."""
        order = np.argsort(-np.asarray(self.scores), kind="stable")
        tp = np.cumsum(np.asarray(self.hits, dtype=np.float64)[order])
        rank = np.arange(1, tp.size + 1)
        recall, precision = tp / max(self.n_true, 1), tp / rank
        cross = np.flatnonzero(precision <= recall)
        at = int(cross[0]) if cross.size else tp.size - 1
        return float(recall[at]), float(np.asarray(self.scores)[order][at])

    def equal_error_recall(self) -> float:
        return self.equal_error()[0]

    def summary(self) -> dict:
        recall, score = self.equal_error()
        return {"ap": self.ap(), "eer_recall": recall, "eer_score": score,
                "s_per_image": float(np.median(self.seconds)) if self.seconds else float("nan")}


def sliding_window(detector, rgb: np.ndarray, aspects: np.ndarray, nms_iou: float = 0.3
                   ) -> tuple[np.ndarray, np.ndarray]:
    """A sliding-window detector on a classification forest's patch posteriors: at each of the detector's scales,
    windows of the learnt object size (one per aspect ratio w/h) score the mean p(object | patch) inside them;
    window maxima are suppressed across scales and aspects. Returns boxes (n, 4) and scores (n,)."""
    from scipy import ndimage

    boxes, scores = [], []
    size = detector.object_size
    for s in detector.search_scales(rgb.shape[:2]):
        fg = detector.foreground_probability(rgb, float(s))
        for a in aspects:
            w, h = size * np.sqrt(a), size / np.sqrt(a)
            win = ndimage.uniform_filter(fg, (max(1, round(h)), max(1, round(w))), mode="constant")
            for py, px in hough_peaks(win, max(1, round(0.15 * size)), 0.0, 8):
                cx, cy = (px + 0.5) / s, (py + 0.5) / s
                boxes.append([cx - 0.5 * w / s, cy - 0.5 * h / s, cx + 0.5 * w / s, cy + 0.5 * h / s])
                scores.append(float(win[py, px]))
    if not boxes:
        return np.zeros((0, 4)), np.zeros(0)
    b = np.asarray(boxes)
    b[:, [0, 2]] = np.clip(b[:, [0, 2]], 0, rgb.shape[1])
    b[:, [1, 3]] = np.clip(b[:, [1, 3]], 0, rgb.shape[0])
    keep = non_maximum_suppression(b, np.asarray(scores), nms_iou, detector.nms_inside)
    return b[keep], np.asarray(scores)[keep]


def dlib_available() -> bool:
    try:
        import dlib  # noqa: F401
    except ImportError:
        return False
    return True


def dlib_options(window: int, c: float):
    """dlib's training options as the benchmarks use them: left-right flips, both cores, a window of `window`
    pixels' area, SVM constant C = `c`."""
    import dlib

    options = dlib.simple_object_detector_training_options()
    options.add_left_right_image_flips = True
    options.C = c
    options.num_threads = 2
    options.be_verbose = False
    options.detection_window_size = window
    return options


def train_dlib(train: list[Sample], negatives: list[Sample], window: int = 80 * 80, c: float = 5.0):
    """dlib's HOG + structural SVM `simple_object_detector` on the same training images (and background images
    without boxes), with left-right flips, as dlib's own example trains it."""
    import dlib

    images = [np.ascontiguousarray((s.rgb * 255).round().astype(np.uint8)) for s in [*train, *negatives]]
    rects = [[dlib.rectangle(round(b[0]), round(b[1]), round(b[2]) - 1, round(b[3]) - 1)
              for b in s.boxes] for s in [*train, *negatives]]
    return dlib.train_simple_object_detector(images, rects, dlib_options(window, c))


def run_dlib(detector, rgb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Boxes (n, 4) [x0, y0, x1, y1] and scores of dlib's detector: every window scoring above -1 (its margin is
    0), so that the precision-recall curve reaches past its default operating point."""
    import dlib

    img = np.ascontiguousarray((rgb * 255).round().astype(np.uint8))
    dets, scores, _ = dlib.simple_object_detector.run_multiple([detector], img, upsample_num_times=0,
                                                               adjust_threshold=-1.0)
    boxes = np.array([[d.left(), d.top(), d.right() + 1, d.bottom() + 1] for d in dets], dtype=np.float64)
    return boxes.reshape(-1, 4), np.asarray(scores, dtype=np.float64)
