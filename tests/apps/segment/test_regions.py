"""`keep_stroked_regions`: a class's regions that hold none of its strokes go to the background."""

from __future__ import annotations

import numpy as np
from scipy import ndimage

from imageforest.apps.segment.regions import keep_stroked_regions


def reference(idx: np.ndarray, strokes: np.ndarray, background: int, exempt: np.ndarray) -> np.ndarray:
    """The same rule by scipy's connected components (full connectivity), class by class."""
    out = idx.copy()
    for k in np.unique(idx):
        if k == background or exempt[k]:
            continue
        comp, _ = ndimage.label(idx == k, structure=np.ones((3,) * idx.ndim, bool))
        hit = np.unique(comp[(strokes == k) & (comp > 0)])
        out[(comp > 0) & ~np.isin(comp, hit)] = background
    return out


def test_a_picture_keeps_the_stroked_blob_and_its_corner_neighbour():
    idx = np.full((1, 8, 8), 2, dtype=np.int64)
    idx[0, 1:3, 1:3] = 0  # stroked
    idx[0, 3, 3] = 0  # touches the stroked blob at a corner only
    idx[0, 6:8, 6:8] = 0  # no stroke
    idx[0, 0, 7] = 1  # a class with no stroke at all
    strokes = np.full(idx.size, -1, dtype=np.int64)
    strokes[np.ravel_multi_index((0, 1, 1), idx.shape)] = 0
    out = keep_stroked_regions(idx.ravel(), (1, 8, 8), strokes, background=2).reshape(idx.shape)
    assert out[0, 1, 1] == 0 and out[0, 3, 3] == 0
    assert np.all(out[0, 6:8, 6:8] == 2) and out[0, 0, 7] == 2
    exempt = np.array([False, True, False, False])  # a locked class keeps its regions (a 4th class unused)
    kept = keep_stroked_regions(idx.ravel(), (1, 8, 8), strokes, 2, exempt).reshape(idx.shape)
    assert kept[0, 0, 7] == 1 and np.all(kept[0, 6:8, 6:8] == 2)


def test_random_volumes_match_connected_components():
    rng = np.random.default_rng(0)
    for trial in range(20):
        shape = tuple(int(v) for v in rng.integers(1, 9, size=3))
        n_cls = int(rng.integers(2, 5))
        idx = ndimage.median_filter(rng.integers(0, n_cls, size=shape), size=2).astype(np.int64)
        strokes = np.where(rng.random(idx.size) < 0.05, idx.ravel(), -1).astype(np.int64)
        background = int(rng.integers(0, n_cls))
        exempt = rng.random(n_cls) < 0.2
        got = keep_stroked_regions(idx.ravel(), shape, strokes, background, exempt).reshape(shape)
        assert np.array_equal(got, reference(idx, strokes.reshape(shape), background, exempt)), trial
