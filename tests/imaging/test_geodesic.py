"""Geodesic distance transforms: Euclidean when intensity is flat, long across edges, spacing in mm."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import ndimage

from imageforest.exceptions import InvalidInputError
from imageforest.imaging.geodesic import geodesic_distance, geodesic_distances


def test_flat_image_gives_the_chamfer_distance():
    seeds = np.zeros((40, 50), bool)
    seeds[10, 20] = seeds[30, 40] = True
    d = geodesic_distance(np.zeros((40, 50, 1)), seeds)
    e = ndimage.distance_transform_edt(~seeds)
    assert np.all(np.abs(d - e) <= 0.09 * np.maximum(e, 1))  # 8-neighbour chamfer: within 8% of Euclidean
    assert np.all(d[seeds] == 0)


def test_an_edge_lengthens_paths_that_cross_it():
    seeds = np.zeros((40, 60), bool)
    seeds[10, 10] = True
    img = np.zeros((40, 60, 1))
    img[:, 30, 0] = 100.0  # a wall with a gap at the bottom
    img[35:, 30, 0] = 0.0
    d = geodesic_distance(img, seeds, gamma=1.0)
    flat = geodesic_distance(np.zeros_like(img), seeds, gamma=1.0)
    assert d[10, 45] > flat[10, 45] + 20  # around through the gap
    assert d[10, 20] == pytest.approx(flat[10, 20])  # same side


def test_volume_spacing_is_in_mm():
    seeds = np.zeros((5, 5, 5), bool)
    seeds[0, 2, 2] = True
    d = geodesic_distance(np.zeros((5, 5, 5, 1)), seeds, spacing=(3.0, 1.0, 1.0))
    assert d[4, 2, 2] == pytest.approx(12.0)
    assert d[0, 2, 4] == pytest.approx(2.0)


def test_no_seed_is_infinite_and_bad_shapes_are_refused():
    assert np.all(np.isinf(geodesic_distance(np.zeros((4, 4, 1)), np.zeros((4, 4), bool))))
    with pytest.raises(InvalidInputError):
        geodesic_distance(np.zeros((4, 5, 1)), np.zeros((4, 4), bool))
    with pytest.raises(InvalidInputError):
        geodesic_distance(np.zeros((4, 4, 4, 1)), np.zeros((4, 4, 4), bool), spacing=(1.0, 0.0, 1.0))


def test_all_labels_in_one_sweep_equal_one_label_at_a_time():
    rng = np.random.default_rng(0)
    img = rng.random((6, 20, 24, 2)) * 50
    labels = np.full((6, 20, 24), -1)
    labels[1, 3, 4] = 0
    labels[4, 15, 20] = 1
    labels[2, 10:12, 10] = 2
    many = geodesic_distances(img, labels, 4, spacing=(2.0, 1.0, 1.0), gamma=0.5)
    for k in range(3):
        one = geodesic_distance(img, labels == k, spacing=(2.0, 1.0, 1.0), gamma=0.5)
        assert np.allclose(many[..., k], one)
    assert np.all(np.isinf(many[..., 3]))  # a label without seeds


def test_a_sweep_from_known_distances_adds_the_new_seeds_paths():
    rng = np.random.default_rng(3)
    img = rng.random((5, 18, 22, 1)) * 40
    old = np.zeros((5, 18, 22), bool)
    old[1, 2, 3] = True
    new = np.zeros_like(old)
    new[3, 15, 18] = new[4, 9, 2] = True
    kw = {"spacing": (2.0, 1.0, 1.0), "gamma": 0.7}
    known = geodesic_distances(img, np.where(old, 0, -1), 1, **kw)
    grown = geodesic_distances(img, np.where(old | new, 0, -1), 1, start=known, **kw)
    fresh = geodesic_distances(img, np.where(old | new, 0, -1), 1, **kw)
    # never longer than a sweep from every seed, and no shorter than the shortest paths (2-D: Dijkstra below)
    assert np.all(grown <= fresh) and np.all(grown[old | new] == 0)
    assert np.all(grown <= known) and np.any(grown < known)
    # starting from +inf is a fresh sweep, bit for bit
    assert np.array_equal(geodesic_distances(img, np.where(old, 0, -1), 1, start=np.full(known.shape, np.inf),
                                             **kw), known)
    with pytest.raises(InvalidInputError, match="start distances"):
        geodesic_distances(img, np.where(old, 0, -1), 1, start=np.zeros((5, 18, 22, 2)), **kw)


def test_a_sweep_from_known_distances_is_never_below_the_shortest_path():
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import dijkstra

    rng = np.random.default_rng(4)
    img = rng.random((15, 17, 1)) * 30
    seeds = np.zeros((15, 17), bool)
    seeds[2, 2] = True
    more = np.zeros_like(seeds)
    more[12, 14] = True
    known = geodesic_distances(img, np.where(seeds, 0, -1), 1, gamma=0.5)
    grown = geodesic_distances(img, np.where(seeds | more, 0, -1), 1, gamma=0.5, start=known)[..., 0]
    # the exact shortest paths over the same 8-neighbour steps
    idx = np.arange(seeds.size).reshape(seeds.shape)
    rows, cols, costs = [], [], []
    for dy, dx in ((0, 1), (1, 0), (1, 1), (1, -1)):
        a = idx[max(0, -dy):15 - max(0, dy), max(0, -dx):17 - max(0, dx)]
        b = idx[max(0, dy):15 + min(0, dy) or None, max(0, dx):17 + min(0, dx) or None]
        diff = img.reshape(-1)[a.ravel()] - img.reshape(-1)[b.ravel()]
        rows.append(a.ravel())
        cols.append(b.ravel())
        costs.append(np.sqrt(dy * dy + dx * dx + 0.25 * diff**2))
    graph = coo_matrix((np.concatenate(costs), (np.concatenate(rows), np.concatenate(cols))), shape=(idx.size,) * 2)
    exact = dijkstra(graph, directed=False, indices=idx[seeds | more]).min(axis=0).reshape(seeds.shape)
    assert np.all(grown >= exact - 1e-3)
