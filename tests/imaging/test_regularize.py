"""The graph cut: exact for two labels, alpha-expansion for more, scribbles fixed."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from imageforest.imaging.regularize import UNARY_FLOOR, contrast_weights, energy, graph_cut


def _energies(every: np.ndarray, unary: np.ndarray, edges) -> np.ndarray:
    """`energy` of each of the (N, z, y, x) labellings at once: unaries plus Potts costs of the cut edges."""
    n = every.shape[0]
    total = np.take_along_axis(np.broadcast_to(unary, (n, *unary.shape)), every[..., None], axis=-1).sum(
        axis=(1, 2, 3, 4))
    for axis, w in edges:
        cut = np.zeros(every.shape, dtype=bool)
        lo = [slice(None)] * 4
        hi = [slice(None)] * 4
        lo[axis + 1] = slice(0, -1)
        hi[axis + 1] = slice(1, None)
        cut[tuple(lo)] = every[tuple(lo)] != every[tuple(hi)]
        total = total + (w * cut).sum(axis=(1, 2, 3))
    return total


@pytest.mark.parametrize("K", [2, 3])
def test_cut_reaches_the_minimum_energy_on_small_grids(K: int):
    rng = np.random.default_rng(K)
    for _ in range(6):
        shape = (1, 3, 3)
        p = rng.dirichlet(np.ones(K), size=shape)
        guide = (rng.random((*shape, 1)) * 100).astype(np.float32)
        labels = graph_cut(p, guide, np.ones(3), 1.5)
        unary = -np.log(np.clip(p, UNARY_FLOOR, 1.0))
        edges = contrast_weights(guide, np.ones(3), 1.5)
        every = np.array(list(itertools.product(range(K), repeat=9)), dtype=np.int32).reshape(-1, *shape)
        totals = _energies(every, unary, edges)
        best = float(totals.min())
        assert best == pytest.approx(energy(every[np.argmin(totals)], unary, edges))
        e = energy(labels, unary, edges)
        if K == 2:
            assert e == pytest.approx(best)  # exact
        else:
            assert e <= 2 * best + 1e-9  # alpha-expansion's bound for Potts (equal here in practice)


def test_fixed_labels_are_kept_and_zero_smoothness_is_the_argmax():
    p = np.zeros((1, 4, 4, 2))
    p[..., 0] = 0.9
    p[..., 1] = 0.1
    fixed = np.full((1, 4, 4), -1)
    fixed[0, 1, 1] = 1
    guide = np.zeros((1, 4, 4, 1), np.float32)
    assert graph_cut(p, guide, np.ones(3), 10.0, fixed)[0, 1, 1] == 1
    assert np.array_equal(graph_cut(p, guide, np.ones(3), 0.0), np.zeros((1, 4, 4)))


def test_banded_cut_follows_the_exact_cut_on_a_noisy_picture():
    """Coarse to fine: the same labels as the exact cut but for a sliver along the boundary, at an energy within a
    fraction of a percent of the minimum; a plane with no boundary keeps its one label."""
    rng = np.random.default_rng(4)
    yy, xx = np.mgrid[:121, :151]  # odd sides: the coarse plane has a half-empty last row and column
    truth = ((yy - 60) ** 2 / 40.0 ** 2 + (xx - 70) ** 2 / 55.0 ** 2) < 1  # an ellipse
    image = np.where(truth, 80.0, 30.0) + rng.normal(0, 12, truth.shape)
    p1 = np.clip(0.5 + (image - 55.0) / 60.0, 0.02, 0.98)  # a noisy, unsure posterior
    posterior = np.stack([1 - p1, p1], axis=-1)[None].astype(np.float32)
    guide = image[None, ..., None].astype(np.float32)
    exact = graph_cut(posterior, guide, np.ones(3), 10.0)
    banded = graph_cut(posterior, guide, np.ones(3), 10.0, banded=True)
    assert banded.shape == exact.shape and banded.dtype == np.int32
    assert np.mean(banded == exact) > 0.995
    assert np.mean((banded[0] == 1) == truth) > 0.97
    unary = -np.log(np.clip(posterior, UNARY_FLOOR, 1.0))
    edges = contrast_weights(guide, np.ones(3), 10.0)
    assert energy(banded, unary, edges) <= 1.005 * energy(exact, unary, edges)
    flat = np.tile(np.array([0.2, 0.8], np.float32), (1, 40, 50, 1))
    assert np.all(graph_cut(flat, guide[:, :40, :50], np.ones(3), 10.0, banded=True) == 1)
