"""The numba Gaussian filters, L*a*b* conversion and grid cut against scipy, scikit-image and brute force."""

import itertools

import numpy as np
import pytest
from scipy import ndimage

from imageforest.exceptions import InvalidInputError
from imageforest.imaging.gaussian import gaussian_filter, gaussian_kernel, gaussian_laplace
from imageforest.imaging.maxflow import grid_min_cut


@pytest.mark.parametrize("shape", [(7, 5), (40, 33), (6, 9, 11), (1, 30, 20), (20, 1, 9)])
@pytest.mark.parametrize("sigma", [0.7, 2.0, 8.0, "per-axis"])
def test_gaussian_filters_give_scipys_values(shape, sigma):
    rng = np.random.default_rng(0)
    a = (rng.normal(size=shape) * 100).astype(np.float32)
    if sigma == "per-axis":
        sigma = (3.0, 1.0, 0.5)[-len(shape):]
    scale = np.abs(a).max()
    for axis in range(len(shape)):  # every first and second derivative, and smoothing (kernels reach past small axes)
        for order in (0, 1, 2):
            orders = [0] * len(shape)
            orders[axis] = order
            ours = gaussian_filter(a, sigma, orders)
            assert ours.dtype == np.float32 and ours.shape == shape
            assert np.abs(ours - ndimage.gaussian_filter(a, sigma, order=orders)).max() < 5e-6 * scale
    assert np.abs(gaussian_laplace(a, sigma) - ndimage.gaussian_laplace(a, sigma)).max() < 5e-6 * scale


def test_gaussian_kernel_and_bad_input():
    w = gaussian_kernel(2.0)
    assert w.size == 2 * 8 + 1 and abs(w.sum() - 1) < 1e-6
    assert abs(gaussian_kernel(2.0, 1).sum()) < 1e-6
    ramp = np.tile(np.arange(40, dtype=np.float32), (5, 1))
    assert np.allclose(gaussian_filter(ramp, 2.0, (0, 1))[:, 10:30], 1.0, atol=1e-3)  # d/dx of x, away from the ends
    with pytest.raises(InvalidInputError):
        gaussian_kernel(1.0, 3)
    with pytest.raises(InvalidInputError):
        gaussian_filter(np.zeros(5), 1.0)
    flat = np.full((6, 7), 3.0, np.float32)
    assert np.allclose(gaussian_filter(flat, 4.0), 3.0) and np.allclose(gaussian_filter(flat, 4.0, (1, 0)), 0.0,
                                                                         atol=1e-6)


def _cut_value(sink_side, source, sink, forward, backward):
    """Capacity of the cut: source edges of sink-side nodes, sink edges of source-side nodes, and the edges from the
    source side to the sink side."""
    value = source[sink_side].sum() + sink[~sink_side].sum()
    for axis in range(3):
        if forward[axis] is None:
            continue
        near = [slice(None)] * 3
        near[axis] = slice(0, -1)
        far = [slice(None)] * 3
        far[axis] = slice(1, None)
        p, q = sink_side[tuple(near)], sink_side[tuple(far)]
        value += np.sum(forward[axis][tuple(near)] * (~p & q))
        if backward[axis] is not None:
            value += np.sum(backward[axis][tuple(near)] * (p & ~q))
    return value


@pytest.mark.parametrize("seed", range(6))
def test_grid_cut_is_the_minimum_over_every_labelling(seed):
    rng = np.random.default_rng(seed)
    shape = [(1, 3, 4), (2, 2, 3), (1, 2, 6), (3, 1, 4), (1, 4, 3), (2, 3, 2)][seed]
    source = rng.exponential(1.0, shape) * (rng.random(shape) < 0.7)
    sink = rng.exponential(1.0, shape) * (rng.random(shape) < 0.7)
    forward = [rng.exponential(0.8, shape) for _ in range(3)]
    backward = [rng.exponential(0.8, shape) if seed % 2 else forward[a] for a in range(3)]
    cut, flow = grid_min_cut(source, sink, forward, backward)
    assert cut.shape == shape and cut.dtype == bool
    assert np.isclose(_cut_value(cut, source, sink, forward, backward), flow)
    best = min(_cut_value(np.array(bits, bool).reshape(shape), source, sink, forward, backward)
               for bits in itertools.product([False, True], repeat=int(np.prod(shape))))
    assert np.isclose(flow, best)


def test_grid_cut_on_larger_grids_is_a_cut_of_its_flow_and_rejects_negative_capacities():
    rng = np.random.default_rng(7)
    for shape in [(1, 60, 70), (12, 15, 18)]:
        source, sink = rng.exponential(1.0, shape), rng.exponential(1.0, shape)
        edges = [rng.exponential(2.0, shape) if n > 1 else None for n in shape]
        cut, flow = grid_min_cut(source, sink, edges, edges)
        assert np.isclose(_cut_value(cut, source, sink, edges, edges), flow)
        # flipping any single node cannot lower a minimum cut
        for _ in range(20):
            other = cut.copy()
            index = tuple(rng.integers(0, n) for n in shape)
            other[index] = ~other[index]
            assert _cut_value(other, source, sink, edges, edges) >= flow - 1e-9
    with pytest.raises(InvalidInputError):
        grid_min_cut(-np.ones((1, 2, 2)), np.ones((1, 2, 2)), [None] * 3, [None] * 3)


def test_rgb_to_lab_gives_scikit_images_values():
    from skimage.color import rgb2lab

    from imageforest.imaging.lab import rgb_to_lab

    rng = np.random.default_rng(5)
    picture = rng.integers(0, 256, (40, 50, 3)).astype(np.uint8)
    picture[:4, :4] = 0
    picture[4:8, :4] = 255
    picture[8:12, :4] = 5  # dark enough for the sRGB curve's linear part
    lab = rgb_to_lab(picture, 255.0)
    assert lab.dtype == np.float32 and lab.shape == picture.shape
    assert np.abs(lab - rgb2lab(picture / 255.0)).max() < 1e-4
    wide = picture.astype(np.float64) * 4.0  # values past 1 are clipped after scaling, as before
    assert np.allclose(rgb_to_lab(wide, 255.0)[4:8, :4], rgb2lab(np.ones((4, 4, 3))), atol=1e-4)
    with pytest.raises(InvalidInputError):
        rgb_to_lab(picture[..., :2], 255.0)
