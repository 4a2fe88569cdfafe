"""The ilastik filter bank in 2-D and 3-D: channels for box features, or feature vectors for vector weak learners.

Filters (scales sigma in pixels, as ilastik defines them, applied along every array axis):

- ``gaussian``: Gaussian smoothing;
- ``laplacian_of_gaussian``;
- ``gradient_magnitude``: Gaussian gradient magnitude;
- ``difference_of_gaussians``: G(sigma) - G(0.66 sigma);
- ``structure_tensor_eigenvalues``: eigenvalues (descending) of the structure tensor, inner scale sigma / 2 and
  outer scale sigma, one channel per dimension;
- ``hessian_eigenvalues``: eigenvalues (descending) of the Hessian of Gaussian, one channel per dimension.

A `FilterBank` is declarative (names and scales), so a model that uses it stores its spec and recomputes the same
channels on any image it is applied to.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import ndimage

from imageforest.exceptions import InvalidInputError
from imageforest.imaging.io import Image

FILTERS = ("gaussian", "laplacian_of_gaussian", "gradient_magnitude", "difference_of_gaussians",
           "structure_tensor_eigenvalues", "hessian_eigenvalues")
ILASTIK_SCALES = (0.3, 0.7, 1.0, 1.6, 3.5, 5.0, 10.0)
_MULTI = ("structure_tensor_eigenvalues", "hessian_eigenvalues")


def _sym_eigvals(tensor: list[list[np.ndarray]]) -> list[np.ndarray]:
    """Per-voxel eigenvalues (descending) of a symmetric ndim x ndim field given as nested lists of arrays."""
    n = len(tensor)
    mat = np.stack([np.stack(row, axis=-1) for row in tensor], axis=-2)  # (..., n, n)
    vals = np.linalg.eigvalsh(mat)[..., ::-1]
    return [vals[..., k] for k in range(n)]


def _hessian(arr: np.ndarray, sigma: float | tuple[float, ...]) -> list[list[np.ndarray]]:
    n = arr.ndim
    out = [[None] * n for _ in range(n)]
    for a in range(n):
        for b in range(a, n):
            order = [0] * n
            order[a] += 1
            order[b] += 1
            out[a][b] = out[b][a] = ndimage.gaussian_filter(arr, sigma, order=order)
    return out


def _structure_tensor(arr: np.ndarray, sigma: float | tuple[float, ...]) -> list[list[np.ndarray]]:
    n = arr.ndim
    grads = []
    for a in range(n):
        order = [0] * n
        order[a] = 1
        grads.append(ndimage.gaussian_filter(arr, np.divide(sigma, 2), order=order))
    out = [[None] * n for _ in range(n)]
    for a in range(n):
        for b in range(a, n):
            out[a][b] = out[b][a] = ndimage.gaussian_filter(grads[a] * grads[b], sigma)
    return out


@dataclass(frozen=True)
class FilterBank:
    """Which filters at which scales.

    Parameters
    ----------
    filters : names from `FILTERS`
    scales : sigmas in pixels (ilastik: 0.3 - 10)
    """

    filters: tuple[str, ...] = FILTERS
    scales: tuple[float, ...] = ILASTIK_SCALES

    def __post_init__(self) -> None:
        unknown = set(self.filters) - set(FILTERS)
        if unknown or not self.filters:
            raise InvalidInputError(f"unknown filters {sorted(unknown)}; choose from {FILTERS}")
        if not self.scales or any(not (s > 0) for s in self.scales):
            raise InvalidInputError("filter scales must be positive")
        object.__setattr__(self, "filters", tuple(self.filters))
        object.__setattr__(self, "scales", tuple(float(s) for s in self.scales))

    def channel_names(self, ndim: int) -> list[str]:
        """One name per output channel, in output order, for images of `ndim` spatial dimensions."""
        names = []
        for sigma in self.scales:
            for name in self.filters:
                if name in _MULTI:
                    names.extend(f"{name}[{k}]@{sigma:g}" for k in range(ndim))
                else:
                    names.append(f"{name}@{sigma:g}")
        return names

    def __call__(self, image, spacing=None) -> list[np.ndarray]:
        """Channels of a scalar 2-D or 3-D image (Image or array), float32, in `channel_names` order.

        spacing : None (scales in pixels) or mm per pixel along each array axis ((z, y, x) or (y, x)); scales are
        then in mm, so a volume of anisotropic voxels is smoothed by the same physical amount along every axis.
        """
        arr = image.array if isinstance(image, Image) else np.asarray(image)
        if arr.ndim not in (2, 3):
            raise InvalidInputError(f"the filter bank takes a scalar 2-D or 3-D image, got shape {arr.shape}")
        arr = arr.astype(np.float32)
        per_mm = np.ones(arr.ndim)
        if spacing is not None:
            sp = np.asarray(spacing, dtype=np.float64)
            if sp.shape != (arr.ndim,) or not np.all(sp > 0):
                raise InvalidInputError(f"spacing must hold {arr.ndim} positive values, got {spacing!r}")
            per_mm = 1.0 / sp
        out = []
        for scale in self.scales:
            sigma = tuple(scale * per_mm) if spacing is not None else scale
            smooth = None
            for name in self.filters:
                if name == "gaussian":
                    smooth = ndimage.gaussian_filter(arr, sigma) if smooth is None else smooth
                    out.append(smooth)
                elif name == "laplacian_of_gaussian":
                    out.append(ndimage.gaussian_laplace(arr, sigma))
                elif name == "gradient_magnitude":
                    out.append(ndimage.gaussian_gradient_magnitude(arr, sigma))
                elif name == "difference_of_gaussians":
                    smooth = ndimage.gaussian_filter(arr, sigma) if smooth is None else smooth
                    out.append(smooth - ndimage.gaussian_filter(arr, np.multiply(0.66, sigma)))
                elif name == "structure_tensor_eigenvalues":
                    out.extend(_sym_eigvals(_structure_tensor(arr, sigma)))
                else:
                    out.extend(_sym_eigvals(_hessian(arr, sigma)))
        return [np.ascontiguousarray(c, dtype=np.float32) for c in out]

    def features_at(self, image, points: np.ndarray) -> np.ndarray:
        """Filter responses at voxel indices (n, ndim) in array order ((z, y, x) or (y, x)): (n, n_channels),
        ready for the vector weak learners of `ClassificationForest`."""
        channels = self(image)
        idx = tuple(np.asarray(points, dtype=np.int64).T)
        return np.stack([c[idx] for c in channels], axis=1)

    def to_spec(self) -> dict:
        return {"filters": list(self.filters), "scales": list(self.scales)}

    @classmethod
    def from_spec(cls, spec: dict) -> FilterBank:
        return cls(tuple(spec["filters"]), tuple(spec["scales"]))
