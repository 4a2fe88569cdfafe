"""Pixel-pair tests inside a patch of a multi-channel image: the weak learner of Hough forests.

A test reads one channel c at two pixels of the square patch centred on the reference pixel, f = I_c(p + u) -
I_c(p + v), and compares f with a threshold (Gall and Lempitsky, "Class-specific Hough forests for object
detection", CVPR 2009). Offsets u, v are whole pixels within the patch; pixels beyond the image border read the
nearest border pixel. Channels are float32 (`hough_channels` gives 32 of them), read lazily inside training and
`apply` like every image family.
"""

from __future__ import annotations

import numpy as np

from imageforest.exceptions import InvalidInputError, ModelFormatError
from imageforest.forest.features import FeatureFamily
from imageforest.forest.storage import ForestArrays
from imageforest.forest.threads import run_ranges
from imageforest.imaging.features import ImageStack
from imageforest.kernels import njit

PAIR_WIDTH = 5  # [channel, uy, ux, vy, vx]


def stack_channels(images: list[np.ndarray]) -> ImageStack:
    """Channel images (C, h, w) stacked into one flat float32 table (an `ImageStack` of planar images)."""
    if not images:
        raise InvalidInputError("no images given")
    n_ch = images[0].shape[0]
    total = sum(int(im.size) for im in images)
    table = np.empty(total, dtype=np.float32)
    base = np.empty((len(images), n_ch), dtype=np.int64)
    shape = np.empty((len(images), 3), dtype=np.int64)
    offset = 0
    for k, im in enumerate(images):
        if im.ndim != 3 or im.shape[0] != n_ch:
            raise InvalidInputError(f"channel image {k} has shape {im.shape}; expected ({n_ch}, height, width)")
        plane = im.shape[1] * im.shape[2]
        table[offset:offset + im.size] = np.asarray(im, dtype=np.float32).ravel()
        base[k] = offset + plane * np.arange(n_ch)
        shape[k] = (1, im.shape[1], im.shape[2])
        offset += im.size
    return ImageStack(table, base, shape, np.ones((len(images), 3)), integral=False)


@njit(cache=True, inline="always")
def _read(table, b, ny, nx, y, x):  # pragma: no cover - numba
    y = 0 if y < 0 else (ny - 1 if y >= ny else y)
    x = 0 if x < 0 else (nx - 1 if x >= nx else x)
    return table[b + y * nx + x]


@njit(cache=True, inline="always")
def _pair_response(row, table, base, shape, img, y, x):  # pragma: no cover - numba
    b = base[img, int(row[0])]
    ny = shape[img, 1]
    nx = shape[img, 2]
    return (_read(table, b, ny, nx, y + int(row[1]), x + int(row[2]))
            - _read(table, b, ny, nx, y + int(row[3]), x + int(row[4])))


@njit(cache=True, nogil=True)
def _pair_responses_range(m0, m1, table, base, shape, points, params, samples, pos_set, out):  # pragma: no cover
    for m in range(m0, m1):
        p = samples[m]
        s = pos_set[m]
        img, y, x = points[p, 0], points[p, 2], points[p, 3]
        for c in range(params.shape[1]):
            out[c, m] = np.float32(_pair_response(params[s, c], table, base, shape, img, y, x))


@njit(cache=True, nogil=True)
def _pair_apply_range(i0, i1, table, base, shape, points, packed, tree_root, out):  # pragma: no cover - numba
    for i in range(i0, i1):
        img, y, x = points[i, 0], points[i, 2], points[i, 3]
        for t in range(tree_root.shape[0]):
            node = tree_root[t]
            while packed[node, 0] >= 0.0:
                f = np.float64(np.float32(_pair_response(packed[node, 4:], table, base, shape, img, y, x)))
                go_left = f > packed[node, 2] and f <= packed[node, 3]
                node = int(packed[node, 0]) if go_left else int(packed[node, 1])
            out[i, t] = -int(packed[node, 0]) - 1


class PixelPairs(FeatureFamily):
    """f = I_c(p + u) - I_c(p + v) for two pixels of a patch_size x patch_size patch centred on p.

    Parameters
    ----------
    n_channels : int
        Channels per image (32 for `hough_channels`).
    patch_size : int
        Side of the patch in pixels: offsets lie in [-patch_size // 2, (patch_size - 1) // 2].
    """

    name = "pixel_pairs"
    param_width = PAIR_WIDTH

    def __init__(self, n_channels: int = 32, patch_size: int = 16) -> None:
        if not 1 <= int(n_channels) <= 4096 or not 2 <= int(patch_size) <= 256:
            raise InvalidInputError("n_channels must lie in [1, 4096] and patch_size in [2, 256]")
        self.n_channels = int(n_channels)
        self.patch_size = int(patch_size)
        self.n_features = self.n_channels

    def prepare(self, channel_images: list[np.ndarray]) -> ImageStack:
        stack = stack_channels(list(channel_images))
        if stack.n_channels != self.n_channels:
            raise InvalidInputError(f"the feature family expects {self.n_channels} channels, images give "
                                    f"{stack.n_channels}")
        return stack

    def sample(self, rng, n_sets, n_candidates):
        lo = -(self.patch_size // 2)
        hi = (self.patch_size - 1) // 2
        out = np.empty((n_sets, n_candidates, PAIR_WIDTH))
        out[..., 0] = rng.integers(0, self.n_channels, (n_sets, n_candidates))
        out[..., 1:] = rng.integers(lo, hi + 1, (n_sets, n_candidates, 4))
        return out

    def responses(self, data, params, samples, pos_set):
        stack, points = data
        out = np.empty((params.shape[1], samples.shape[0]), dtype=np.float32)
        run_ranges(_pair_responses_range, samples.shape[0], stack.table, stack.base, stack.shape, points, params,
                   samples, pos_set, out, min_per_thread=256)
        return out

    def apply(self, data, forest: ForestArrays) -> np.ndarray:
        stack, points = data
        used = forest.__dict__.get("_max_pair_channel")
        if used is None:
            used = forest.__dict__["_max_pair_channel"] = int(forest.params[:, 0].max()) if forest.params.size else 0
        if used >= stack.n_channels:  # the kernels index channels unchecked
            raise ModelFormatError(f"the model reads image channel {used}, the images have {stack.n_channels}")
        table, roots = forest.packed()
        out = np.empty((points.shape[0], roots.shape[0]), dtype=np.int32)
        run_ranges(_pair_apply_range, points.shape[0], stack.table, stack.base, stack.shape, points, table, roots,
                   out, min_per_thread=256)
        return out

    def importance_dims(self, params):
        return params[:, :1].astype(np.int64), np.ones((params.shape[0], 1))

    def to_spec(self):
        return {"name": self.name, "n_channels": self.n_channels, "patch_size": self.patch_size}, {}

    @classmethod
    def from_spec(cls, spec, arrays):
        return cls(spec["n_channels"], spec["patch_size"])

    def validate_params(self, params: np.ndarray) -> bool:
        if params.shape[1] != PAIR_WIDTH or not np.all(np.isfinite(params)):
            return False
        # offsets beyond the patch would still read clamped pixels; they only mark a file as foreign
        return bool(np.all((params[:, 0] >= 0) & (params[:, 0] < self.n_channels))
                    and np.all(np.abs(params[:, 1:]) <= self.patch_size))
