"""Input checks at the API boundary: bad data is stopped here with a message a user understands."""

from __future__ import annotations

import numpy as np

from imageforest.exceptions import InvalidInputError

_F32_MAX = float(np.finfo(np.float32).max)


def check_matrix(X, name: str = "X", n_features: int | None = None, order: str = "C") -> np.ndarray:
    """A finite 2-D float32 copy (or view) of X, shape (n_samples, n_features), C-contiguous (or F-contiguous
    with order="F").

    Raises
    ------
    InvalidInputError
        For non-numeric data, wrong dimensionality, no samples or features, NaN/inf, values beyond float32, or a
        feature count different from `n_features`.
    """
    try:
        arr = np.asarray(X)
        if arr.dtype == object or arr.dtype.kind in "USV":
            arr = arr.astype(np.float64)
    except (TypeError, ValueError):
        raise InvalidInputError(f"{name} must be numeric") from None
    if arr.dtype.kind not in "biuf":
        raise InvalidInputError(f"{name} must be numeric, got dtype {arr.dtype}")
    if arr.ndim == 1:
        raise InvalidInputError(f"{name} must be 2-D (n_samples, n_features), got a 1-D array; "
                                f"use X.reshape(-1, 1) for a single feature")
    if arr.ndim != 2:
        raise InvalidInputError(f"{name} must be 2-D (n_samples, n_features), got {arr.ndim}-D")
    if arr.shape[0] == 0:
        raise InvalidInputError(f"{name} has no samples")
    if arr.shape[1] == 0:
        raise InvalidInputError(f"{name} has no features")
    if n_features is not None and arr.shape[1] != n_features:
        raise InvalidInputError(f"{name} has {arr.shape[1]} features, but the forest was trained on {n_features}")
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise InvalidInputError(f"{name} contains NaN or infinity")
    # the extremes, not np.abs: that would hold a float64 copy of X
    if arr.dtype.kind in "fiu" and arr.size and max(float(arr.max()), -float(arr.min())) > _F32_MAX:
        raise InvalidInputError(f"{name} has values too large for float32")
    return np.asarray(arr, dtype=np.float32, order=order)


def check_sample_weight(sample_weight, n_samples: int) -> np.ndarray:
    """Non-negative finite float64 weights of shape (n_samples,), ones when None."""
    if sample_weight is None:
        return np.ones(n_samples)
    w = np.asarray(sample_weight, dtype=np.float64)
    if w.shape != (n_samples,):
        raise InvalidInputError(f"sample_weight must have shape ({n_samples},), got {w.shape}")
    if not np.isfinite(w).all() or (w < 0).any():
        raise InvalidInputError("sample_weight must be finite and non-negative")
    if w.sum() <= 0:
        raise InvalidInputError("sample_weight sums to zero")
    return w


def check_labels(y, n_samples: int) -> tuple[np.ndarray, np.ndarray]:
    """Class labels -> (classes (n_classes,), encoded (n_samples,) int32). Needs at least two classes."""
    arr = np.asarray(y)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1:
        raise InvalidInputError(f"y must be 1-D class labels, got shape {arr.shape}")
    if arr.shape[0] != n_samples:
        raise InvalidInputError(f"X has {n_samples} samples but y has {arr.shape[0]}")
    if arr.dtype == object:
        try:
            arr = arr.astype(str) if any(isinstance(v, str) for v in arr) else arr.astype(np.float64)
        except (TypeError, ValueError):
            raise InvalidInputError("y labels must be numbers or strings") from None
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise InvalidInputError("y contains NaN or infinity")
    classes, encoded = np.unique(arr, return_inverse=True)
    if classes.size < 2:
        raise InvalidInputError(f"y has a single class ({classes[0]!r}); a classifier needs at least two")
    return classes, encoded.astype(np.int32)


def check_targets(y, n_samples: int) -> np.ndarray:
    """Regression targets -> finite float64 (n_samples, n_outputs)."""
    try:
        arr = np.asarray(y, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidInputError("y must be numeric") from None
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise InvalidInputError(f"y must be 1-D or 2-D, got shape {arr.shape}")
    if arr.shape[0] != n_samples:
        raise InvalidInputError(f"X has {n_samples} samples but y has {arr.shape[0]}")
    if arr.shape[1] == 0:
        raise InvalidInputError("y has no outputs")
    if not np.isfinite(arr).all():
        raise InvalidInputError("y contains NaN or infinity")
    return np.ascontiguousarray(arr)
