"""Overlay PNG for review: for every organ found, axial, coronal and sagittal slices through its box centre with
the box (the scan's central slices when nothing is found), each cut to the body in its plane.

Drawn on the working grid (isotropic voxels, so no aspect correction), in radiological display: patient left on the
image's right for axial and coronal views, head at the top for coronal and sagittal views; each panel at least
512 pixels wide with its orientation letters (R/L, A/P, S/I), a 50 mm scale bar, and a soft-tissue CT window
(width 400, level 40 HU).
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from imageforest.apps.localize.results import Localization
from imageforest.forest.serialization import atomic_write

COLOURS = ["#e6194b", "#3cb44b", "#4363d8", "#f58231", "#911eb4", "#42d4f4", "#f032e6", "#bfef45", "#fabed4",
           "#469990"]
VIEWS = ("axial", "coronal", "sagittal")
WINDOW_HU = (-160.0, 240.0)  # soft tissue: level 40, width 400
PANEL_INCHES, DPI = 6.8, 80  # 544 pixels a panel
SCALE_MM = 50.0
# Orientation letters per view: (left edge, right edge, top, bottom) of the displayed slice.
EDGES = {"axial": ("R", "L", "A", "P"), "coronal": ("R", "L", "S", "I"), "sagittal": ("A", "P", "S", "I")}


BODY_HU = -500.0  # voxels above this are the body (air and a masked outside lie below)
BODY_MARGIN_MM = 10.0


def body_box(plane: np.ndarray, mm: tuple[float, float], labels: np.ndarray | None = None) -> tuple[slice, slice]:
    """(row, column) slices of a plane's body (and labelled pixels), widened by BODY_MARGIN_MM, so that a panel
    shows the anatomy rather than the scan's empty field of view; `mm` the pixel size along rows and columns; the
    whole plane when nothing is above BODY_HU and nothing is labelled."""
    body = plane > BODY_HU
    if labels is not None:
        body |= labels > 0
    if not body.any():
        return slice(None), slice(None)
    box = []
    for axis in (0, 1):
        along = np.flatnonzero(body.any(axis=1 - axis))
        pad = int(np.ceil(BODY_MARGIN_MM / float(mm[axis])))
        box.append(slice(max(0, along[0] - pad), min(plane.shape[axis], along[-1] + pad + 1)))
    return box[0], box[1]


def _with_boxes(cut: tuple[slice, slice], boxes, a: int, b: int, shape: tuple[int, int]) -> tuple[slice, slice]:
    """A panel's (row, column) slices widened to hold the boxes drawn on it (their index axes `a` across, `b` up),
    within the plane's `shape`."""
    (r0, r1), (c0, c1) = ((s.start or 0, shape[k] if s.stop is None else s.stop) for k, s in enumerate(cut))
    for lo, hi, *_ in boxes:
        r0, r1 = min(r0, int(np.floor(lo[b]))), max(r1, int(np.ceil(hi[b])) + 1)
        c0, c1 = min(c0, int(np.floor(lo[a]))), max(c1, int(np.ceil(hi[a])) + 1)
    return slice(max(r0, 0), min(r1, shape[0])), slice(max(c0, 0), min(c1, shape[1]))


def _to_index(work, points_mm: np.ndarray) -> np.ndarray:
    return work.physical_to_index(points_mm)  # continuous (x, y, z) indices


def _slice(vol: np.ndarray, view: str, centre: np.ndarray) -> tuple[np.ndarray, tuple[int, int], str]:
    """The 2-D slice of `vol` (z, y, x) through `centre` (x, y, z) for a view, its (across, up) index axes among
    (x, y, z) and the imshow origin."""
    if view == "axial":  # x across, y down
        return vol[centre[2]], (0, 1), "upper"
    if view == "coronal":  # x across, z up
        return vol[:, centre[1], :], (0, 2), "lower"
    return vol[:, :, centre[0]], (1, 2), "lower"  # sagittal: y across (anterior left), z up


def panel(ax, img: np.ndarray, origin: str, view: str, spacing_mm: float, title: str, aspect: float = 1.0) -> None:
    """One reviewable panel: the slice in a soft-tissue window, orientation letters and a scale bar; `spacing_mm`
    is the voxel size across the panel, `aspect` the voxels' height over their width."""
    ax.imshow(img, cmap="gray", vmin=WINDOW_HU[0], vmax=WINDOW_HU[1], origin=origin, interpolation="nearest",
              aspect=aspect)
    ax.set_title(title, color="white", fontsize=11)
    left, right, top, bottom = EDGES[view]
    rows, cols = img.shape
    up = origin == "lower"  # row index grows upwards on screen

    def row_at(share: float) -> float:  # a height on screen (0 bottom, 1 top) as a row coordinate
        return share * rows if up else (1.0 - share) * rows

    style = {"color": "yellow", "fontsize": 12, "fontweight": "bold"}
    ax.text(0.02 * cols, row_at(0.5), left, ha="left", va="center", **style)
    ax.text(0.98 * cols, row_at(0.5), right, ha="right", va="center", **style)
    ax.text(0.5 * cols, row_at(0.98), top, ha="center", va="top", **style)
    ax.text(0.5 * cols, row_at(0.02), bottom, ha="center", va="bottom", **style)
    bar = SCALE_MM / spacing_mm  # voxels
    x1 = 0.96 * cols
    ax.plot([x1 - bar, x1], [row_at(0.05), row_at(0.05)], color="yellow", linewidth=3)
    ax.text(x1 - bar / 2, row_at(0.07), f"{SCALE_MM:g} mm", color="yellow", ha="center", va="bottom", fontsize=10)


def write_overlay(result: Localization, path: str | Path, truth: np.ndarray | None = None,
                  title: str = "", organs: list[str] | None = None) -> None:
    """Draw the organs judged present (or only `organs`); `truth` (n_organs, 6) mm adds dashed true boxes."""
    # A Figure of its own, not pyplot's: no backend or global figure state, and 0.3 s less to import
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    work = result.work
    vol = work.array  # (z, y, x)
    spacing = float(work.spacing[0])  # isotropic working grid
    wanted = set(organs) if organs else None
    rows = [(k, o) for k, o in enumerate(result.organs) if o.present and (wanted is None or o.name in wanted)]
    n_rows = max(1, len(rows))
    fig = Figure(figsize=(3 * PANEL_INCHES, PANEL_INCHES * n_rows))
    axes = fig.subplots(n_rows, 3, squeeze=False)
    fig.patch.set_facecolor("black")
    for ax in axes.ravel():
        ax.set_axis_off()
    if not rows:  # still show the scan: the reviewer judges whether "nothing found" is right
        centre = np.array(vol.shape[::-1]) // 2
        for c, view in enumerate(VIEWS):
            img, _, origin = _slice(vol, view, centre)
            panel(axes[0, c], img[body_box(img, (spacing, spacing))], origin, view, spacing,
                  f"no organ found - central {view} slice")
    for r, (k, est) in enumerate(rows):
        colour = COLOURS[k % len(COLOURS)]
        lo = _to_index(work, est.box_mm[[0, 2, 4]][None])[0]
        hi = _to_index(work, est.box_mm[[1, 3, 5]][None])[0]
        lo, hi = np.minimum(lo, hi), np.maximum(lo, hi)
        centre = np.clip(np.round(0.5 * (lo + hi)).astype(int), 0, np.array(vol.shape[::-1]) - 1)
        boxes = [(lo, hi, colour, "-")]
        if truth is not None and not np.isnan(truth[k, 0]):
            tlo = _to_index(work, truth[k, [0, 2, 4]][None])[0]
            thi = _to_index(work, truth[k, [1, 3, 5]][None])[0]
            boxes.append((np.minimum(tlo, thi), np.maximum(tlo, thi), "white", "--"))
        for c, view in enumerate(VIEWS):
            ax = axes[r, c]
            img, (a, b), origin = _slice(vol, view, centre)
            rows_cut, cols_cut = _with_boxes(body_box(img, (spacing, spacing)), boxes, a, b, img.shape)
            panel(ax, img[rows_cut, cols_cut], origin, view, spacing,
                  f"{est.name} {view}" + (f" (p={est.probability:.2f})" if c == 0 else ""))
            for blo, bhi, col, style in boxes:  # in the cut panel's pixels
                ax.add_patch(Rectangle((blo[a] - (cols_cut.start or 0) - 0.5, blo[b] - (rows_cut.start or 0) - 0.5),
                                       bhi[a] - blo[a] + 1, bhi[b] - blo[b] + 1, fill=False, edgecolor=col,
                                       linestyle=style, linewidth=2))
    save_figure(fig, path, n_rows, title + ("   solid: found, dashed: truth" if title and truth is not None else ""))


def save_figure(fig, path: str | Path, n_rows: int, title: str) -> None:
    """Title, margins and an atomic PNG write of a figure of `n_rows` rows of panels."""
    # Fixed margins in inches rather than tight_layout, which draws the whole figure once more to measure it (0.5 s
    # of a 21-panel overlay); the panels have no ticks, only a title line above each
    height = PANEL_INCHES * n_rows
    if title:
        fig.suptitle(title, color="white", fontsize=13, y=1.0 - 0.1 / height)
    fig.subplots_adjust(left=0.004, right=0.996, bottom=0.05 / height, top=1.0 - (0.7 if title else 0.3) / height,
                        wspace=0.02, hspace=0.35 / (PANEL_INCHES - 0.35))
    buf = io.BytesIO()
    # zlib level 1: a third of the default level's time on these 6-megapixel pictures, files about a third larger
    fig.savefig(buf, format="png", dpi=DPI, facecolor=fig.get_facecolor(), pil_kwargs={"compress_level": 1})
    atomic_write(path, lambda fh: fh.write(buf.getvalue()))
