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

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numba
import numpy as np

from imageforest.exceptions import InvalidInputError
from imageforest.imaging.gaussian import gaussian_filter, gaussian_laplace
from imageforest.imaging.io import Image
from imageforest.kernels import njit

FILTERS = ("gaussian", "laplacian_of_gaussian", "gradient_magnitude", "difference_of_gaussians",
           "structure_tensor_eigenvalues", "hessian_eigenvalues")
ILASTIK_SCALES = (0.3, 0.7, 1.0, 1.6, 3.5, 5.0, 10.0)
_MULTI = ("structure_tensor_eigenvalues", "hessian_eigenvalues")


def _sym_eigvals(tensor: list[list[np.ndarray]]) -> list[np.ndarray]:
    """Per-voxel eigenvalues (descending) of a symmetric ndim x ndim field given as nested lists of arrays, in
    closed form (a general eigensolver per voxel took most of the filter bank's time), in the fields' dtype
    (computed in float64 whatever it is)."""
    n = len(tensor)
    shape, dtype = tensor[0][0].shape, np.result_type(*[t for row in tensor for t in row])
    work = np.float32 if dtype == np.float32 else np.float64
    flat = [np.ascontiguousarray(tensor[a][b], dtype=work).ravel() for a in range(n) for b in range(a, n)]
    out = np.empty((n, flat[0].size), dtype=work)
    if n == 1:
        out[0] = flat[0]
    elif n == 2:
        _eigvals_2x2(*flat, out)
    elif n == 3:
        _eigvals_3x3(*flat, out)
    else:
        mat = np.stack([np.stack(row, axis=-1) for row in tensor], axis=-2)
        vals = np.linalg.eigvalsh(mat.astype(np.float64))[..., ::-1]
        out = np.moveaxis(vals, -1, 0).reshape(n, -1)
    return [out[k].reshape(shape).astype(dtype, copy=False) for k in range(n)]


# One thread each: the filter bank calls them from its own threads
@njit(cache=True)
def _eigvals_2x2(a, b, c, out):  # pragma: no cover - numba
    """Eigenvalues of [[a, b], [b, c]] per voxel, descending, into out (2, n), computed in float64."""
    for i in range(a.size):
        ai, bi, ci = np.float64(a[i]), np.float64(b[i]), np.float64(c[i])
        half = 0.5 * (ai + ci)
        d = np.sqrt((0.5 * (ai - ci)) ** 2 + bi * bi)
        out[0, i] = half + d
        out[1, i] = half - d


@njit(cache=True)
def _eigvals_3x3(a11, a12, a13, a22, a23, a33, out):  # pragma: no cover - numba
    """Eigenvalues of a symmetric 3 x 3 matrix per voxel, descending, into out (3, n), computed in float64: the
    trigonometric solution of the characteristic cubic (Smith, "Eigenvalues of a symmetric 3 x 3 matrix", Comm.
    ACM 1961)."""
    third = 1.0 / 3.0
    for i in range(a11.size):
        x11, x12, x13 = np.float64(a11[i]), np.float64(a12[i]), np.float64(a13[i])
        x22, x23, x33 = np.float64(a22[i]), np.float64(a23[i]), np.float64(a33[i])
        off = x12 * x12 + x13 * x13 + x23 * x23
        q = (x11 + x22 + x33) * third
        b11, b22, b33 = x11 - q, x22 - q, x33 - q
        p = np.sqrt((b11 * b11 + b22 * b22 + b33 * b33 + 2.0 * off) / 6.0)
        if p <= 1e-300 or off <= 1e-30 * (b11 * b11 + b22 * b22 + b33 * b33):  # diagonal (or all equal)
            x, y, z = x11, x22, x33
            if x < y:
                x, y = y, x
            if y < z:
                y, z = z, y
            if x < y:
                x, y = y, x
            out[0, i], out[1, i], out[2, i] = x, y, z
            continue
        inv = 1.0 / p
        c11, c22, c33 = b11 * inv, b22 * inv, b33 * inv
        c12, c13, c23 = x12 * inv, x13 * inv, x23 * inv
        r = 0.5 * (c11 * (c22 * c33 - c23 * c23) - c12 * (c12 * c33 - c23 * c13) + c13 * (c12 * c23 - c22 * c13))
        r = min(max(r, -1.0), 1.0)
        phi = np.arccos(r) * third
        top = q + 2.0 * p * np.cos(phi)
        low = q + 2.0 * p * np.cos(phi + 2.0 * np.pi * third)
        out[0, i] = top
        out[1, i] = 3.0 * q - top - low
        out[2, i] = low


def _hessian(arr: np.ndarray, sigma: float | tuple[float, ...]) -> list[list[np.ndarray]]:
    n = arr.ndim
    out = [[None] * n for _ in range(n)]
    for a in range(n):
        for b in range(a, n):
            order = [0] * n
            order[a] += 1
            order[b] += 1
            out[a][b] = out[b][a] = gaussian_filter(arr, sigma, order=order)
    return out


def _value(item):
    """A task's result: the value itself, or a future's."""
    return item.result() if hasattr(item, "result") else item


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
        ndim = arr.ndim

        def sigma_of(scale: float):
            return tuple(scale * per_mm) if spacing is not None else scale

        def shared_result(key: tuple) -> np.ndarray:
            """A result two filters read: ("grad", s, axis), a first derivative of Gaussian, or ("smooth", s)."""
            if key[0] == "smooth":
                return gaussian_filter(arr, sigma_of(key[1]))
            order = [0] * ndim
            order[key[2]] = 1
            return gaussian_filter(arr, sigma_of(key[1]), order=order)

        def filtered(name: str, scale: float) -> list[np.ndarray]:
            sigma = sigma_of(scale)
            if name == "gaussian":
                return [_value(shared[("smooth", scale)])]
            if name == "laplacian_of_gaussian":
                return [gaussian_laplace(arr, sigma)]
            if name == "difference_of_gaussians":
                return [_value(shared[("smooth", scale)]) - gaussian_filter(arr, np.multiply(0.66, sigma))]
            if name == "hessian_eigenvalues":
                return _sym_eigvals(_hessian(arr, sigma))
            if name == "gradient_magnitude":  # summed as scipy's gaussian_gradient_magnitude sums, in float32
                g = [_value(shared[("grad", scale, axis)]) for axis in range(ndim)]
                mag = g[0] * g[0]
                for comp in g[1:]:
                    mag += comp * comp
                return [np.sqrt(mag, out=mag)]
            g = [_value(shared[("grad", scale / 2, axis)]) for axis in range(ndim)]  # the tensor's inner scale
            tensor = [[None] * ndim for _ in range(ndim)]
            for i in range(ndim):
                for j in range(i, ndim):
                    tensor[i][j] = tensor[j][i] = gaussian_filter(g[i] * g[j], sigma)
            return _sym_eigvals(tensor)

        # Results two filters read are computed once and queued first: the first derivatives of Gaussian (the
        # gradient magnitude at s and the structure tensor at 2 s, whose inner scale is s) and the smoothed image
        # (the Gaussian and the difference of Gaussians at s). Then every (filter, scale) is one task, the larger
        # scales first (each costs about its scale times its number of filters), so that the threads finish
        # together; a task waits only for shared results, which were all started before it.
        grads = {s_ for s_ in self.scales if "gradient_magnitude" in self.filters}
        grads |= {s_ / 2 for s_ in self.scales if "structure_tensor_eigenvalues" in self.filters}
        smooths = {s_ for s_ in self.scales if {"gaussian", "difference_of_gaussians"} & set(self.filters)}
        first = [("grad", scale, axis) for scale in sorted(grads, reverse=True) for axis in range(ndim)]
        first += [("smooth", scale) for scale in sorted(smooths, reverse=True)]
        weight = {"gaussian": 0, "laplacian_of_gaussian": ndim, "difference_of_gaussians": 1, "gradient_magnitude": 0,
                  "hessian_eigenvalues": ndim * (ndim + 1) // 2, "structure_tensor_eigenvalues": ndim * (ndim + 1) // 2}
        jobs = sorted(((name, scale) for scale in self.scales for name in self.filters),
                      key=lambda job: -weight[job[0]] * job[1])
        workers = min(numba.get_num_threads(), len(first) + len(jobs))
        shared: dict[tuple, object] = {}
        if workers > 1:  # the Gaussian kernels release the GIL: the tasks run side by side on the threads numba may use
            with ThreadPoolExecutor(workers) as pool:
                for key in first:
                    shared[key] = pool.submit(shared_result, key)
                results = {job: pool.submit(filtered, *job) for job in jobs}
                out = [c for scale in self.scales for name in self.filters for c in results[(name, scale)].result()]
        else:
            for key in first:
                shared[key] = shared_result(key)
            out = [c for scale in self.scales for name in self.filters for c in filtered(name, scale)]
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
