"""Slice-wise x/y walls for elongated organs (the spinal cord, the esophagus): the last stage of the cascade.

A tube's box is the union of its axial cross-sections, so its x/y walls are set by the slices where it bends
furthest: the cord's posterior wall by its lowest contoured slice, where the spine turns back into the thorax,
often 10-20 cm from most of the organ's voxels. Voting such a wall directly (`refine.py`) asks voxels
near the skull where the cord ends up at the shoulders. Here each fine-grid voxel instead votes for the organ's
cross-section in its own axial slice (displacements to that slice's x/y extent, which it can see); the votes of a
slice are combined (median of the most confident, as for box walls), the per-slice walls smoothed along z (a
running median), and the box's x/y walls are the extremes over the slices inside the z range the cascade found.
Its z walls stay the cascade's.

Which organs: those whose median training box is at least `elongation` times longer in z than its narrower side
in x or y (on openkbp-hn the cord 8.3, the esophagus 2.8; the brainstem 1.8, parotids 1.5, larynx 0.9, mandible
0.7). The default, 4, takes the cord only: on four held-out folds the stage lowered the cord's mean wall error from
6.16 to 5.77 mm (measured; benchmarks/RESULTS.md), while on the esophagus it was worse, 7.75 -> 7.92
(estimated; its collapsed lumen gives slices less to see), and on fold 0 it made every compact organ worse (a
compact organ's walls lie where its voxels can see them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from imageforest.apps.localize.refine import (
    FineRegion,
    FineSource,
    WallRefiner,
    grown_box,
    region_points,
    region_positions,
)
from imageforest.apps.localize.results import OrganEstimate
from imageforest.estimators.base import numba_threads
from imageforest.imaging.ct import WorkingGrid, inside
from imageforest.imaging.features import ImageStack
from imageforest.imaging.io import Image
from imageforest.kernels import njit
from imageforest.voting import median_and_spread, select_kth

if TYPE_CHECKING:
    from imageforest.apps.localize.model import OrganLocalizer

SLICE_AXIS = np.array([0, 0, 1, 1])  # cross-section wall k lies along physical axis SLICE_AXIS[k] (x, x, y, y)
VOTERS_PER_SLICE = 400  # at most this many voxels per fine slice vote (evenly spaced)


class SliceWallRefiner(WallRefiner):
    """One elongated organ's slice-wise forest: displaced-box features on a fine region, leaves hold the mean and
    variance of the displacements from a voxel to the organ's x/y extent in the voxel's own axial slice,
    [x_lo, x_hi, y_lo, y_hi] (a diagonal Gaussian over 4 walls). Parameters as for `WallRefiner`."""

    task = "organ-slice-walls"
    n_walls = 4

    def walls(self, region: Image, stack: ImageStack, box: np.ndarray, margin_mm: float, fraction: float,
              window: int) -> tuple[np.ndarray, np.ndarray]:
        """x/y walls (4,) and their robust spreads (4,) in mm of an organ the cascade put at `box` (6,) mm.

        Voters: fine voxels within margin_mm of the box in x and y and inside its z range, at most
        `VOTERS_PER_SLICE` per slice. `fraction`: share of a slice's votes kept per wall, the most confident
        first; `window`: slices of the running median along z. NaN spreads when no slice has a vote.
        """
        self.check_fitted()
        voters = grown_box(box, margin_mm)
        voters[4:] = np.minimum(box[4], box[5]), np.maximum(box[4], box[5])
        zyx = region_points(region, voters, 10**9)  # every voxel of a block, ordered by z
        if len(zyx) == 0:
            return np.asarray(box[:4], dtype=np.float64).copy(), np.full(4, np.nan)
        first_z = zyx[0, 0]
        n_slices = int(zyx[-1, 0] - first_z + 1)
        if len(zyx) > VOTERS_PER_SLICE * n_slices:
            zyx = zyx[np.linspace(0, len(zyx) - 1, VOTERS_PER_SLICE * n_slices).round().astype(np.int64)]
        with numba_threads(self.n_jobs):
            leaves = self.family_.apply((stack, np.c_[np.zeros(len(zyx)), zyx].astype(np.int32)), self.forest_)
        pos = region_positions(region, zyx)[:, SLICE_AXIS]  # (n, 4) the voxel's coordinate along each wall's axis
        values = (pos[:, None, :] + self._wall_mean[leaves]).reshape(-1, 4)
        variances = np.where(self._valid[leaves][..., None], self._var[leaves], np.inf).reshape(-1, 4)
        slice_of = (zyx[:, 0] - first_z).astype(np.int64)  # non-decreasing
        per_slice, spread = slice_medians(np.repeat(slice_of, leaves.shape[1]), values, variances, n_slices,
                                          float(fraction))
        seen = ~np.isnan(per_slice[:, 0])
        if not seen.any():
            return np.asarray(box[:4], dtype=np.float64).copy(), np.full(4, np.nan)
        per_slice, spread = per_slice[seen], spread[seen]
        if window > 1:
            per_slice = running_median(per_slice, int(window))
        pick = np.array([per_slice[:, 0].argmin(), per_slice[:, 1].argmax(), per_slice[:, 2].argmin(),
                         per_slice[:, 3].argmax()])
        return per_slice[pick, np.arange(4)], spread[pick, np.arange(4)]

    def _derive(self) -> None:
        super()._derive()
        self._var = np.ascontiguousarray(self.leaf_var_, dtype=np.float64)


def running_median(a: np.ndarray, window: int) -> np.ndarray:
    """Running median of `window` rows along axis 0 of a (n, m) array, edges repeated: the same values as
    scipy.ndimage.median_filter(a, size=(window, 1), mode="nearest") (the rank-window // 2 element), without
    importing scipy.ndimage on the command's path (~0.1 s)."""
    lo = window // 2
    padded = np.pad(a, ((lo, window - 1 - lo), (0, 0)), mode="edge")
    return np.partition(sliding_window_view(padded, window, axis=0), lo, axis=-1)[..., lo]


@njit(cache=True)
def slice_medians(slice_of, values, variances, n_slices, fraction):  # pragma: no cover - numba
    """Per slice and wall, the median and robust spread (1.4826 MAD) of the `fraction` most confident votes
    (smallest leaf variance; ties in vote order).

    slice_of : (m,) int64 slice of each vote, non-decreasing; values, variances : (m, 4) the vote's wall position
    (mm) and its leaf's variance (inf: the leaf does not vote). Returns two (n_slices, 4) arrays, NaN where a
    slice has no vote.
    """
    # Plain loops over preallocated buffers and the shared selection: numba's np.median, np.partition,
    # np.argsort, np.full, np.zeros or slice assignments would add seconds of compilation to the command's
    # first run with an empty cache.
    m = slice_of.shape[0]
    start = np.empty(n_slices + 1, dtype=np.int64)
    for s in range(n_slices + 1):
        start[s] = 0
    for i in range(m):
        start[slice_of[i] + 1] += 1
    for s in range(n_slices):
        start[s + 1] += start[s]
    med = np.empty((n_slices, 4))
    spread = np.empty((n_slices, 4))
    var_buf = np.empty(m)
    val_buf = np.empty(m)
    work = np.empty(m)
    for s in range(n_slices):
        for k in range(4):
            n = np.int64(0)  # not the literal 0: numba would also compile select_kth for a constant n
            for i in range(start[s], start[s + 1]):
                if variances[i, k] < np.inf:
                    var_buf[n] = variances[i, k]
                    val_buf[n] = values[i, k]
                    work[n] = variances[i, k]
                    n += 1
            if n == 0:
                med[s, k] = np.nan
                spread[s, k] = np.nan
                continue
            keep = max(1, int(fraction * n + 0.5))
            # the keep smallest variances, ties in vote order (as a stable sort would take them), into `work`
            threshold = select_kth(work, n, keep - 1)
            c = 0
            for i in range(n):
                if var_buf[i] < threshold:
                    work[c] = val_buf[i]
                    c += 1
            for i in range(n):
                if c == keep:
                    break
                if var_buf[i] == threshold:
                    work[c] = val_buf[i]
                    c += 1
            med[s, k], spread[s, k] = median_and_spread(work, keep)
    return med, spread


def slice_training_region(source: FineSource, truth_box: np.ndarray, z_mm: np.ndarray, cross: np.ndarray,
                          jitter_mm: float, margin_mm: float, reach_mm: float, n_points: int,
                          rng: np.random.Generator) -> tuple[Image, np.ndarray, np.ndarray]:
    """One scan's training data for an elongated organ: the region around its true box moved by N(0, jitter_mm)
    per wall, up to n_points random voxels of the moved box grown by margin_mm whose nearest label-map slice shows
    the organ, and their displacements (n, 4) mm to that slice's x/y extent.

    z_mm (nz,) and cross (nz, 4) are the label map's slice centres and the organ's per-slice walls
    (`OrganSlices.cross_sections`)."""
    moved = truth_box + rng.normal(0.0, jitter_mm, 6)
    region = source.region(moved, margin_mm + reach_mm)
    zyx = region_points(region, grown_box(moved, margin_mm), 3 * n_points, rng)
    pos = region_positions(region, zyx)
    by_z = np.argsort(z_mm)
    z_sorted = z_mm[by_z]
    right = np.clip(np.searchsorted(z_sorted, pos[:, 2]), 1, len(z_sorted) - 1) if len(z_sorted) > 1 else \
        np.zeros(len(pos), dtype=np.int64)
    left = np.maximum(right - 1, 0)
    nearest = np.where(np.abs(z_sorted[left] - pos[:, 2]) <= np.abs(z_sorted[right] - pos[:, 2]), left, right)
    walls = cross[by_z[nearest]]
    keep = np.flatnonzero(~np.isnan(walls[:, 0]))[:n_points]
    return region, zyx[keep], walls[keep] - pos[keep][:, SLICE_AXIS]


def elongated(boxes: np.ndarray, elongation: float | None) -> np.ndarray:
    """(n_organs,) bool: organs whose median box over the training scans (boxes (n_scans, n_organs, 6) mm, NaN
    rows for absent organs) is at least `elongation` times longer in z than its narrower side in x or y; none
    when elongation is None."""
    n_org = boxes.shape[1]
    if elongation is None:
        return np.zeros(n_org, dtype=bool)
    out = np.zeros(n_org, dtype=bool)
    for o in range(n_org):
        seen = ~np.isnan(boxes[:, o, 0])
        if not seen.any():
            continue
        size = np.median(np.abs(boxes[seen, o, 1::2] - boxes[seen, o, 0::2]), axis=0)
        out[o] = size[2] >= float(elongation) * max(min(size[0], size[1]), 1e-6)
    return out


def slice_walls(model: OrganLocalizer, organs: list[OrganEstimate], fine: FineRegion, grid: WorkingGrid) -> None:
    """Replace the x/y walls of the refined organs that have a slice stage with the slice stage's (in place; the
    z walls stay the cascade's)."""
    slicers = getattr(model, "slicers_", None) or [None] * len(organs)
    for o in fine.organs:
        if slicers[o] is None:
            continue
        estimate = organs[o]
        walls, spread = slicers[o].walls(fine.region, fine.stack, estimate.box_mm, float(model.slice_margin_mm),
                                         float(model.slice_fraction), int(model.slice_window))
        if not np.all(np.isfinite(spread)):
            continue
        box, box_spread = estimate.box_mm.copy(), estimate.box_std_mm.copy()
        box[:4], box_spread[:4] = walls, spread
        estimate.box_mm = inside(box, grid.extent)
        estimate.box_std_mm = box_spread
