"""Overlay PNG for review: for every contoured organ, axial, coronal and sagittal planes through its centre with
its contour drawn thick and the other organs' thin (the scan's central planes when no organ was found), each cut to
the body in its plane so that the anatomy fills the panel.

Drawn in radiological display on the scan's voxels reoriented to LPS (patient left on the image's right in axial
and coronal views, head at the top), with the voxels' true aspect, orientation letters, a 50 mm scale bar and a
soft-tissue window (the localizer's overlay's conventions).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import SimpleITK as sitk

from imageforest.apps.contour.model import Contours
from imageforest.apps.localize.overlay import COLOURS, PANEL_INCHES, VIEWS, body_box, panel, save_figure
from imageforest.imaging.io import Image


def _lps(image: Image) -> tuple[np.ndarray, np.ndarray]:
    """(array (z, y, x), spacing (x, y, z)) of the image's voxels permuted and flipped to LPS axes."""
    if np.allclose(image.direction, np.eye(3), atol=1e-3):
        return image.array, np.asarray(image.spacing)
    oriented = sitk.DICOMOrient(image.to_sitk(), "LPS")
    return sitk.GetArrayFromImage(oriented), np.asarray(oriented.GetSpacing())


def _plane(vol: np.ndarray, view: str, centre) -> np.ndarray:
    if view == "axial":
        return vol[centre[2]]  # rows y (anterior at the top), columns x
    if view == "coronal":
        return vol[:, centre[1], :]  # rows z, columns x
    return vol[:, :, centre[0]]  # rows z, columns y


def _mm(view: str, spacing: np.ndarray) -> tuple[float, float]:
    """A plane's pixel size along its rows and columns (spacing (x, y, z) mm)."""
    across, up = {"axial": (0, 1), "coronal": (0, 2), "sagittal": (1, 2)}[view]
    return float(spacing[up]), float(spacing[across])


def _panel(ax, img: np.ndarray, view: str, spacing: np.ndarray, title: str) -> None:
    """The localizer's panel with the voxels' true aspect (spacing (x, y, z) mm)."""
    up_mm, across_mm = _mm(view, spacing)
    panel(ax, img, "upper" if view == "axial" else "lower", view, across_mm, title, aspect=up_mm / across_mm)


def write_overlay(contours: Contours, organ_names, path: str | Path, scan: Image, title: str = "",
                  organs: list[str] | None = None, truth: np.ndarray | None = None) -> None:
    """Draw the contoured organs (or only `organs`) over `scan`; `truth` (z, y, x) labels add dashed white
    reference contours."""
    from matplotlib.figure import Figure

    vol, spacing = _lps(scan)
    labels, _ = _lps(contours.labels)
    ref = None if truth is None else _lps(Image(truth, scan.spacing, scan.origin, scan.direction))[0]
    wanted = set(organs) if organs else None
    rows = [(k, name) for k, name in enumerate(organ_names)
            if (labels == k + 1).any() and (wanted is None or name in wanted)]
    fig = Figure(figsize=(3 * PANEL_INCHES, PANEL_INCHES * max(1, len(rows))))
    axes = fig.subplots(max(1, len(rows)), 3, squeeze=False)
    fig.patch.set_facecolor("black")
    for ax in axes.ravel():
        ax.set_axis_off()
    if not rows:
        centre = np.array(vol.shape[::-1]) // 2
        for c, view in enumerate(VIEWS):
            img = _plane(vol, view, centre)
            _panel(axes[0, c], img[body_box(img, _mm(view, spacing))], view, spacing,
                   f"no organ contoured - central {view}")
    for r, (k, name) in enumerate(rows):
        zz, yy, xx = np.nonzero(labels == k + 1)
        centre = np.array([int(np.median(xx)), int(np.median(yy)), int(np.median(zz))])
        volume = zz.size * float(np.prod(spacing)) / 1000.0
        for c, view in enumerate(VIEWS):
            ax = axes[r, c]
            ct, plane = _plane(vol, view, centre), _plane(labels, view, centre)
            cut = body_box(ct, _mm(view, spacing), plane)  # the panel: body and organs
            plane = plane[cut]
            _panel(ax, ct[cut], view, spacing,
                   f"{name} {view}" + (f" ({volume:.1f} mL)" if c == 0 else ""))
            for j in np.unique(plane[plane > 0]):
                ax.contour((plane == j).astype(np.float32), levels=[0.5], colors=[COLOURS[(j - 1) % len(COLOURS)]],
                           linewidths=2.5 if j == k + 1 else 1.0)
            if ref is not None:
                truth_plane = _plane(ref, view, centre)[cut] == k + 1
                if truth_plane.any():
                    ax.contour(truth_plane.astype(np.float32), levels=[0.5], colors=["white"], linewidths=1.2,
                               linestyles="dashed")
    save_figure(fig, path, max(1, len(rows)),
                title + ("   solid: contoured, dashed: reference" if title and truth is not None else ""))
