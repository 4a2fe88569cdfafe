"""Where the reference contours of tube-like organs stop, and what that does to a lower-wall error.

    python benchmarks/localize/contour_ends.py ../shared/data/openkbp-hn [--predictions P.npz] [--png F.png]

The spinal cord and the esophagus run on below any head-and-neck scan, so the lower wall of their reference box is
where the clinician stopped contouring, not an edge in the image. For each case and each such organ this measures
the gap (mm) between the contour's lowest slice and the lowest slice in which the scan still covers the organ's
column (tissue denser than -500 HU within 2 voxels of the centre of the contour's last cross-section). A gap near
zero means the contour runs to the end of the scanned body; a large gap means it stopped while the organ went on.

With `--predictions` (the file `benchmarks/localize/cross_validate.py --predictions` writes) the forest's
lower-wall error is broken down by gap, which separates the error against anatomy from the error against a
contouring choice.
`--png` draws sagittal slices through cases with large gaps: the contour, its lower end, the forest's held-out
lower wall.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from imageforest.imaging.ct import BODY_HU, read_scan
from imageforest.imaging.ct_organs import Case, openkbp_cases
from imageforest.imaging.io import read_image

GAP_CLASSES_MM = ((0.0, 5.0), (5.0, 20.0), (20.0, np.inf))


def contour_end_gap(ct: np.ndarray, labels: np.ndarray, value: int, slice_mm: float) -> tuple[float, int]:
    """Gap (mm) below the organ's lowest contoured slice in which the scan still covers its column.

    Parameters
    ----------
    ct, labels : (z, y, x) arrays on the same grid, z ascending with slice index
    value : the organ's label
    slice_mm : slice spacing (mm)

    Returns the gap (NaN if the organ is not contoured) and the lowest contoured slice index.
    """
    zz, yy, xx = np.nonzero(labels == value)
    if zz.size == 0:
        return np.nan, -1
    z0 = int(zz.min())
    last = zz == z0
    y0, x0 = int(np.median(yy[last])), int(np.median(xx[last]))
    column = ct[:, max(0, y0 - 2):y0 + 3, max(0, x0 - 2):x0 + 3].max(axis=(1, 2)) > BODY_HU
    z = z0
    while z > 0 and column[z - 1]:
        z -= 1
    return (z0 - z) * slice_mm, z0


def _load_pair(case: Case) -> tuple[np.ndarray, np.ndarray, object]:
    scan = read_scan(case.scan)
    if case.labels is None:
        raise SystemExit(f"{case.name}: no label map")
    labels = read_image(case.labels)
    if labels.array.shape != scan.array.shape:
        raise SystemExit(f"{case.name}: label map and scan are on different grids")
    if not np.allclose(np.abs(scan.direction[:, 2]), [0.0, 0.0, 1.0], atol=1e-3) or scan.direction[2, 2] < 0:
        raise SystemExit(f"{case.name}: slices must be axial with z ascending along the slice index")
    return scan.array, np.asarray(labels.array), scan


def draw(png: Path, picks: list[tuple[Case, int, str, float, float, float]]) -> None:
    """Sagittal slices through each pick: (case, label value, organ name, gap mm, contour end mm, forest end mm)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = 3
    rows = -(-len(picks) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 4.4 * rows), squeeze=False)
    for ax in axes.ravel()[len(picks):]:
        ax.axis("off")
    for ax, (case, value, organ, gap, end_mm, forest_mm) in zip(axes.ravel()[:len(picks)], picks, strict=True):
        ct, labels, scan = _load_pair(case)
        _, _, xx = np.nonzero(labels == value)
        x0 = int(np.median(xx))
        near = (labels[:, :, max(0, x0 - 1):x0 + 2] == value).any(axis=2)
        lo = scan.index_to_physical(np.array([[0.0, -0.5, -0.5]]))[0]
        hi = scan.index_to_physical(np.array([[0.0, ct.shape[1] - 0.5, ct.shape[0] - 0.5]]))[0]
        extent = [min(lo[1], hi[1]), max(lo[1], hi[1]), lo[2], hi[2]]
        ax.imshow(np.clip(ct[:, :, x0], -250, 350), cmap="gray", origin="lower", extent=extent)
        ax.imshow(np.ma.masked_where(~near, near.astype(float)), cmap="autumn", alpha=0.55, origin="lower",
                  extent=extent)
        ax.axhline(end_mm, color="lime", lw=1.2, label="contour's lower end")
        if np.isfinite(forest_mm):
            ax.axhline(forest_mm, color="magenta", lw=1.2, ls=":", label="forest, held out")
        ax.set_title(f"{case.name}: {organ}\ncontour stops {gap:.0f} mm above the scanned column's end", fontsize=9)
        ax.set_xlabel("y (mm, LPS; anterior left)", fontsize=8)
        ax.set_ylabel("z (mm)", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0, 0].legend(fontsize=7, loc="upper right")
    fig.suptitle("Reference contours of tubes stop where the clinician stopped; the organ goes on below", fontsize=10)
    fig.tight_layout()
    tmp = png.with_name(png.name + ".tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    tmp.replace(png)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cases_dir", type=Path)
    ap.add_argument("--organs", default="SpinalCord,Esophagus", help="comma-separated organ names")
    ap.add_argument("--predictions", type=Path, help="per-scan boxes from cross_validate.py --predictions")
    ap.add_argument("--png", type=Path, help="sagittal slices through cases whose contour stops early")
    ap.add_argument("--max-cases", type=int, help="use only the first N cases (quick runs)")
    args = ap.parse_args()

    cases, organs = openkbp_cases(args.cases_dir)
    cases = cases[:args.max_cases] if args.max_cases else cases
    chosen = [o for o in args.organs.split(",") if o]
    unknown = [o for o in chosen if o not in organs]
    if unknown:
        raise SystemExit(f"unknown organ(s) {', '.join(unknown)}; the folder has {', '.join(organs)}")
    index = [organs.index(o) for o in chosen]

    gaps = np.full((len(cases), len(chosen)), np.nan)
    for i, case in enumerate(cases):
        ct, labels, scan = _load_pair(case)
        for k, o in enumerate(index):
            gaps[i, k] = contour_end_gap(ct, labels, o + 1, float(scan.spacing[2]))[0]

    forest_lo = truth_lo = None
    if args.predictions is not None:
        with np.load(args.predictions, allow_pickle=False) as p:
            row = {str(c): j for j, c in enumerate(p["case"])}
            if list(p["organs"]) != organs:
                raise SystemExit(f"{args.predictions}: organs {list(p['organs'])} differ from the folder's")
            forest_lo = np.full(gaps.shape, np.nan)
            truth_lo = np.full(gaps.shape, np.nan)
            for i, case in enumerate(cases):
                j = row.get(case.name)
                if j is None:
                    continue
                for k, o in enumerate(index):
                    truth_lo[i, k] = p["truth_mm"][j, o, 4]
                    if p["forest_present"][j, o]:
                        forest_lo[i, k] = p["forest_mm"][j, o, 4]

    print(f"{len(cases)} cases; gap = contour's lowest slice above the lowest slice that still covers its column")
    for k, organ in enumerate(chosen):
        g = gaps[:, k][np.isfinite(gaps[:, k])]
        if g.size == 0:
            print(f"{organ}: not contoured in any case")
            continue
        q = np.percentile(g, [25, 50, 75, 90])
        print(f"{organ:12s} n={g.size:3d}  gap quartiles {q[0]:.0f} / {q[1]:.0f} / {q[2]:.0f} mm, 90th {q[3]:.0f} mm;"
              f" stops > 20 mm early in {np.mean(g > 20):.0%} of the cases")
        if forest_lo is not None:
            err = np.abs(forest_lo[:, k] - truth_lo[:, k])
            ok = np.isfinite(err) & np.isfinite(gaps[:, k])
            print(f"{'':12s} forest lower-wall error (held out) {err[ok].mean():.2f} mm over {ok.sum()} cases,"
                  " of which")
            for lo, hi in GAP_CLASSES_MM:
                s = ok & (gaps[:, k] >= lo) & (gaps[:, k] < hi)
                if s.any():
                    share = err[s].sum() / err[ok].sum()
                    print(f"{'':14s} gap {lo:3.0f}-{hi:<4.0f} mm: {s.sum():3d} cases, error {err[s].mean():6.2f} mm"
                          f" ({share:.0%} of the total)")

    if args.png is not None:
        picks = []
        for k, organ in enumerate(chosen):
            late = np.flatnonzero(gaps[:, k] > 20)
            late = late[np.argsort(gaps[late, k])]
            for i in late[[len(late) * 3 // 4, len(late) // 2, len(late) // 4]] if late.size >= 3 else late:
                forest = forest_lo[i, k] if forest_lo is not None else np.nan
                picks.append((cases[i], index[k] + 1, organ, gaps[i, k], cases[i].boxes[index[k], 4], forest))
        if picks:
            draw(args.png, picks)
            print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
