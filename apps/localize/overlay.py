"""Overlay PNG: for every organ found, axial, coronal and sagittal slices through its box centre with the box.

Drawn on the working grid (isotropic voxels, so no aspect correction), in radiological display: patient left on the
image's right for axial and coronal views, head at the top for coronal and sagittal views.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from imageforest.apps.localize.model import Localization
from imageforest.forest.serialization import atomic_write

COLOURS = ["#e6194b", "#3cb44b", "#4363d8", "#f58231", "#911eb4", "#42d4f4", "#f032e6", "#bfef45", "#fabed4",
           "#469990"]
VIEWS = ("axial", "coronal", "sagittal")


def _to_index(work, points_mm: np.ndarray) -> np.ndarray:
    return work.physical_to_index(points_mm)  # continuous (x, y, z) indices


def write_overlay(result: Localization, path: str | Path, truth: np.ndarray | None = None,
                  title: str = "", organs: list[str] | None = None) -> None:
    """Draw the organs judged present (or only `organs`); `truth` (n_organs, 6) mm adds dashed true boxes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    work = result.work
    vol = work.array  # (z, y, x)
    wanted = set(organs) if organs else None
    rows = [(k, o) for k, o in enumerate(result.organs) if o.present and (wanted is None or o.name in wanted)]
    n_rows = max(1, len(rows))
    fig, axes = plt.subplots(n_rows, 3, figsize=(9.6, 3.2 * n_rows), squeeze=False)
    fig.patch.set_facecolor("black")
    for ax in axes.ravel():
        ax.set_axis_off()
    if not rows:
        axes[0, 1].text(0.5, 0.5, "no organ found", color="white", ha="center", va="center")
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
            if view == "axial":  # x across, y down
                img, (a, b) = vol[centre[2]], (0, 1)
                origin = "upper"
            elif view == "coronal":  # x across, z up
                img, (a, b) = vol[:, centre[1], :], (0, 2)
                origin = "lower"
            else:  # y across (anterior left), z up
                img, (a, b) = vol[:, :, centre[0]], (1, 2)
                origin = "lower"
            ax.imshow(img, cmap="gray", vmin=-250, vmax=350, origin=origin, interpolation="nearest")
            for blo, bhi, col, style in boxes:
                ax.add_patch(Rectangle((blo[a] - 0.5, blo[b] - 0.5), bhi[a] - blo[a] + 1, bhi[b] - blo[b] + 1,
                                       fill=False, edgecolor=col, linestyle=style, linewidth=1.5))
            ax.set_title(f"{est.name} {view}" + (f" (p={est.probability:.2f})" if c == 0 else ""),
                         color="white", fontsize=9)
    if title:
        fig.suptitle(title + ("   solid: found, dashed: truth" if truth is not None else ""), color="white",
                     fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.985 if n_rows > 2 else 0.95))
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, facecolor=fig.get_facecolor())
    plt.close(fig)
    atomic_write(path, lambda fh: fh.write(buf.getvalue()))
