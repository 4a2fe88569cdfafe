"""Scores shared by the body-parts benchmarks: per-part pixel accuracy, joint average precision, and a peer's
features (fixed depth-probe pairs computed up front, for scikit-learn)."""

from __future__ import annotations

import time

import numpy as np


class Confusion:
    """Pixel confusion over parts 1..K (background excluded)."""

    def __init__(self, n_parts: int) -> None:
        self.counts = np.zeros((n_parts + 1, n_parts + 1), dtype=np.int64)

    def add(self, truth: np.ndarray, predicted: np.ndarray) -> None:
        body = truth > 0
        np.add.at(self.counts, (truth[body].astype(np.int64), predicted[body].astype(np.int64)), 1)

    def per_part(self) -> np.ndarray:
        """(K,) accuracy of each part (NaN for parts never in the truth)."""
        rows = self.counts[1:].sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(rows > 0, self.counts.diagonal()[1:] / rows, np.nan)

    def mean_per_part(self) -> float:
        """The paper's measure: the mean over parts of each part's pixel accuracy."""
        return float(np.nanmean(self.per_part()))

    def pixel(self) -> float:
        return float(self.counts.diagonal()[1:].sum() / max(self.counts[1:].sum(), 1))


def average_precision(scores: list[float], hits: list[bool], n_positives: int) -> float:
    """Area under the precision-recall curve (precision made monotone, as PASCAL VOC since 2010)."""
    if n_positives == 0:
        return float("nan")
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
    tp = np.cumsum(np.asarray(hits, dtype=np.float64)[order])
    fp = np.cumsum(1.0 - np.asarray(hits, dtype=np.float64)[order])
    recall = np.concatenate([[0.0], tp / n_positives])
    precision = np.concatenate([[1.0], tp / np.maximum(tp + fp, 1e-12)])
    for i in range(precision.size - 2, -1, -1):
        precision[i] = max(precision[i], precision[i + 1])
    return float(np.sum((recall[1:] - recall[:-1]) * precision[1:]))


class JointAP:
    """Joint average precision as Shotton et al. score it: per joint, proposals of all test maps ranked by
    confidence; the first proposal within `radius_mm` of a visible true joint is a true positive, every other one a
    false positive; joints not visible in a map are neither counted nor penalised."""

    def __init__(self, radius_mm: float = 100.0) -> None:
        self.radius = radius_mm
        self.scores: dict[str, list[float]] = {}
        self.hits: dict[str, list[bool]] = {}
        self.positives: dict[str, int] = {}

    def add(self, proposals: dict, truth: dict) -> None:
        for joint, props in proposals.items():
            t = truth.get(joint)
            if t is None or not t["visible"]:
                continue
            self.positives[joint] = self.positives.get(joint, 0) + 1
            found = False
            for p in props:
                near = np.linalg.norm(np.asarray(p.position_mm) - np.asarray(t["camera_mm"])) <= self.radius
                self.scores.setdefault(joint, []).append(p.confidence)
                self.hits.setdefault(joint, []).append(bool(near and not found))
                found = found or near

    def per_joint(self) -> dict[str, float]:
        return {j: average_precision(self.scores.get(j, []), self.hits.get(j, []), n)
                for j, n in self.positives.items()}

    def mean(self) -> float:
        return float(np.nanmean(list(self.per_joint().values())))


def probe_pairs(rng: np.random.Generator, n: int, max_offset: float) -> np.ndarray:
    """(n, 4) fixed probe offsets (u_y, u_x, v_y, v_x) in pixels x mm, as the forest draws its candidates."""
    return rng.uniform(-max_offset, max_offset, (n, 4))


def probe_features(depth: np.ndarray, yx: np.ndarray, pairs: np.ndarray, background: float = 1e6) -> np.ndarray:
    """(m, n) float32 responses f = d(x + u / d(x)) - d(x + v / d(x)) of fixed probe pairs at pixels `yx` (m, 2)."""
    h, w = depth.shape
    d0 = depth[yx[:, 0], yx[:, 1]].astype(np.float64)
    inv = 1.0 / np.where(d0 > 0, d0, background)

    def read(oy: np.ndarray, ox: np.ndarray) -> np.ndarray:
        y = yx[:, 0, None] + np.floor(oy[None, :] * inv[:, None] + 0.5).astype(np.int64)
        x = yx[:, 1, None] + np.floor(ox[None, :] * inv[:, None] + 0.5).astype(np.int64)
        inside = (y >= 0) & (y < h) & (x >= 0) & (x < w)
        v = depth[np.clip(y, 0, h - 1), np.clip(x, 0, w - 1)].astype(np.float64)
        return np.where(inside & (v > 0), v, background)

    return (read(pairs[:, 0], pairs[:, 1]) - read(pairs[:, 2], pairs[:, 3])).astype(np.float32)


def probe_forest_peer(train, train_samples, test, test_samples, per_image: int, max_offset: float,
                      n_trees: int = 3, max_depth: int = 20) -> tuple[Confusion, float, int, float]:
    """scikit-learn's RandomForestClassifier (balanced classes) on 200 fixed probe pairs computed up front at
    `per_image` pixels of each training map, scored on every body pixel of the test maps: (confusion, fit
    seconds, fit peak memory growth in bytes, median seconds per test map including its probe pairs)."""
    from sklearn.ensemble import RandomForestClassifier

    from benchmarks._measure import measure
    from imageforest.apps.bodyparts.training import sample_pixels

    rng = np.random.default_rng(0)
    pairs = probe_pairs(np.random.default_rng(1), 200, max_offset)
    feats, labs = [], []
    for s in train_samples:
        depth, labels = train.load(s)
        yx, parts = sample_pixels(labels, per_image, rng)
        feats.append(probe_features(depth, yx, pairs))
        labs.append(parts)
    X, y = np.concatenate(feats), np.concatenate(labs)
    rf = RandomForestClassifier(n_estimators=n_trees, max_depth=max_depth, class_weight="balanced", n_jobs=2,
                                random_state=0)
    _, fit_s, fit_mem = measure(lambda: rf.fit(X, y))
    conf, seconds = Confusion(len(test.part_names)), []
    for s in test_samples:
        depth, labels = test.load(s)
        t0 = time.perf_counter()
        yy, xx = np.nonzero(depth > 0)
        pred = np.zeros_like(labels)
        pred[yy, xx] = rf.predict(probe_features(depth, np.c_[yy, xx], pairs))
        seconds.append(time.perf_counter() - t0)
        conf.add(labels, pred)
    return conf, fit_s, fit_mem, float(np.median(seconds))
