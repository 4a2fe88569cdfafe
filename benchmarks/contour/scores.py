"""Contour scores: Dice and the 95th-percentile Hausdorff distance (mm), over the whole scan or inside the axial
extent of the reference (clinicians stop contouring the spinal cord and the oesophagus at arbitrary levels)."""

from __future__ import annotations

import numpy as np
from scipy import ndimage


def dice(a: np.ndarray, b: np.ndarray) -> float:
    """2|A and B| / (|A| + |B|); NaN when both are empty."""
    total = int(a.sum()) + int(b.sum())
    return float("nan") if total == 0 else 2.0 * float(np.logical_and(a, b).sum()) / total


def _surface(mask: np.ndarray) -> np.ndarray:
    return mask & ~ndimage.binary_erosion(mask, np.ones((3, 3, 3), dtype=bool), border_value=0)


def hd95(a: np.ndarray, b: np.ndarray, spacing_zyx) -> float:
    """95th percentile of the symmetric surface distances (mm) between masks a and b (z, y, x); NaN when either
    is empty."""
    if not a.any() or not b.any():
        return float("nan")
    zz, yy, xx = np.nonzero(a | b)  # distances within the masks' joint extent (plus a border): the same, faster
    box = tuple(slice(max(int(v.min()) - 2, 0), int(v.max()) + 3) for v in (zz, yy, xx))
    a, b = a[box], b[box]
    sa, sb = _surface(a), _surface(b)
    to_b = ndimage.distance_transform_edt(~sb, sampling=spacing_zyx)
    to_a = ndimage.distance_transform_edt(~sa, sampling=spacing_zyx)
    return float(np.percentile(np.r_[to_b[sa], to_a[sb]], 95))


def within_reference_slices(pred: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """`pred` with the slices (axis 0) outside the reference's axial extent cleared."""
    zs = np.flatnonzero(truth.any(axis=(1, 2)))
    out = np.zeros_like(pred)
    if zs.size:
        out[zs[0]:zs[-1] + 1] = pred[zs[0]:zs[-1] + 1]
    return out


def organ_scores(pred: np.ndarray, truth: np.ndarray, n_organs: int, spacing_zyx, axial_only: tuple[int, ...] = ()
                 ) -> dict[str, list[float]]:
    """Per organ k (label k + 1): Dice, HD95, and for the organs in `axial_only` also both inside the
    reference's axial extent; NaN where the organ is absent from the truth."""
    out: dict[str, list[float]] = {"dice": [], "hd95": [], "dice_axial": [], "hd95_axial": []}
    for k in range(n_organs):
        t = truth == k + 1
        p = pred == k + 1
        if not t.any():
            for key in out:
                out[key].append(float("nan"))
            continue
        out["dice"].append(dice(p, t))
        out["hd95"].append(hd95(p, t, spacing_zyx))
        pa = within_reference_slices(p, t) if k in axial_only else p
        out["dice_axial"].append(dice(pa, t))
        out["hd95_axial"].append(hd95(pa, t, spacing_zyx))
    return out
