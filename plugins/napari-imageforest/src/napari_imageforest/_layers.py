"""Which pixels of an image layer the widgets work on: single-scale layers (numpy, dask or zarr backed) as they are;
multiscale layers (an OME-Zarr pyramid, say) at full resolution when a saved model segments or the organs are
contoured, and at a coarser level when an interactive session needs every pixel's features in memory."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from napari.layers import Image as ImageLayer

# An interactive session on a multiscale layer works on its finest level of at most this many pixels (voxels): the
# features of 2048 x 2048 pixels take about 0.5 GB, of a 160^3 volume 1 GB.
SESSION_PIXELS = 1 << 22


@dataclass(frozen=True)
class Level:
    """One resolution of a layer: `level` 0 is full resolution; `scale` and `translate` place its pixels in the
    viewer's world (per spatial axis, as napari's layer scale and translate)."""

    level: int
    scale: np.ndarray
    translate: np.ndarray
    rgb: bool

    def data(self, layer: ImageLayer):
        """The level's pixels as the layer holds them (a dask or zarr array is not read: a saved model segments a
        large picture tile by tile from it)."""
        return layer.data[self.level] if layer.multiscale else layer.data

    def array(self, layer: ImageLayer) -> np.ndarray:
        """The level's pixels in memory (a dask or zarr array is read here)."""
        return np.asarray(self.data(layer))


def level_of(layer: ImageLayer, max_pixels: int | None = None) -> Level:
    """The level to work on: full resolution, or with `max_pixels` the finest level of a multiscale layer with at most
    that many spatial pixels (the coarsest when none is that small). Reads shapes only."""
    rgb = bool(layer.rgb)
    scale = np.asarray(layer.scale, dtype=np.float64)
    translate = np.asarray(layer.translate, dtype=np.float64)
    if not layer.multiscale:
        return Level(0, scale, translate, rgb)
    shapes = [tuple(level.shape[:level.ndim - (1 if rgb else 0)]) for level in layer.data]
    k = 0
    if max_pixels is not None:
        k = next((i for i, shape in enumerate(shapes) if int(np.prod(shape)) <= max_pixels), len(shapes) - 1)
    factors = np.asarray(layer.downsample_factors, dtype=np.float64)[k]
    return Level(k, scale * factors[-scale.size:], translate, rgb)
