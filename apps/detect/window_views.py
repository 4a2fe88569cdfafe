"""A detection's viewpoint from its whole window: a classification forest over azimuth classes that reads a HOG
descriptor of the box (Dalal and Triggs, "Histograms of oriented gradients for human detection", CVPR 2005).

The Hough votes near a detected centre come from patches of every part of the object, and a patch of a wheel or a
door looks much the same on a car's left side as on its right: their azimuths often pile up at the object's mirror
image or its other end as well. The window as a whole says which way the car faces (where its bonnet is, how high
its rear is, the box's shape), so its class posterior, multiplied into the votes' azimuth histogram, picks the
right one of two such peaks. On the Weizmann cars' 3 validation cars this raises the share of azimuths within
22.5 degrees from 0.80 to 0.88 (`apps/detect/README.md`).
"""

from __future__ import annotations

import numpy as np

from imageforest.voting.hough import VIEW_BINS

WINDOW_SHAPE = (48, 96)  # (height, width) every window is resized to: cars are about twice as wide as high
CELL = 8  # HOG cell side in pixels of the resized window
WINDOW_TREES = 100
FLOOR = 0.01  # added to the window's posterior so that a class it never saw cannot veto the votes


def window_descriptor(rgb: np.ndarray, box: np.ndarray) -> np.ndarray:
    """HOG of the box's grey window resized to `WINDOW_SHAPE`, and the log of the box's width / height.

    Parameters
    ----------
    rgb : (h, w, 3) float32 RGB in [0, 1] (as `imageforest.imaging.channels.as_rgb` gives)
    box : (4,) [x0, y0, x1, y1] in its pixels (clipped to the image)

    Returns
    -------
    (n_features,) float32
    """
    from skimage.feature import hog
    from skimage.transform import resize as resize_to

    h, w = rgb.shape[:2]
    x0, y0 = int(np.clip(np.floor(box[0]), 0, w - 1)), int(np.clip(np.floor(box[1]), 0, h - 1))
    x1, y1 = int(np.clip(np.ceil(box[2]), x0 + 1, w)), int(np.clip(np.ceil(box[3]), y0 + 1, h))
    grey = rgb[y0:y1, x0:x1].mean(axis=-1)
    window = resize_to(grey, WINDOW_SHAPE, order=1, anti_aliasing=True)
    descriptor = hog(window, orientations=9, pixels_per_cell=(CELL, CELL), cells_per_block=(2, 2),
                     feature_vector=True)
    return np.r_[descriptor, np.log((x1 - x0) / (y1 - y0))].astype(np.float32)


def n_window_features() -> int:
    """Length of `window_descriptor`'s output."""
    cells_y, cells_x = WINDOW_SHAPE[0] // CELL, WINDOW_SHAPE[1] // CELL
    return (cells_y - 1) * (cells_x - 1) * 2 * 2 * 9 + 1


def fit_window_views(rgbs: list[np.ndarray], boxes: list[np.ndarray], azimuths: list[np.ndarray], classes: int,
                     seed: int, n_jobs: int | None):
    """The window classifier: a `ClassificationForest` over `classes` equal azimuth classes (class c covers
    [c, c + 1) * 360 / classes degrees), grown on every training box's `window_descriptor`."""
    from imageforest.apps.detect.model import azimuth_bin
    from imageforest.estimators.classification import ClassificationForest

    x = np.stack([window_descriptor(rgb, b) for rgb, bs in zip(rgbs, boxes, strict=True) for b in bs])
    y = azimuth_bin(np.concatenate(azimuths), classes)
    forest = ClassificationForest(WINDOW_TREES, min_samples_leaf=2, random_state=seed, n_jobs=n_jobs)
    return forest.fit(x, y)


def window_histograms(forest, classes: int, rgb: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """The window classifier's azimuth posterior of each box (k, 4), spread onto the Hough votes' `VIEW_BINS`
    ten-degree bins (each bin takes the class its centre falls in): (k, VIEW_BINS) float64."""
    x = np.stack([window_descriptor(rgb, b) for b in boxes])
    posterior = np.zeros((len(boxes), classes))
    posterior[:, forest.classes_.astype(np.int64)] = forest.predict_proba(x)
    centres = (np.arange(VIEW_BINS) + 0.5) * 360.0 / VIEW_BINS
    return posterior[:, np.floor(centres / (360.0 / classes)).astype(np.int64) % classes]
