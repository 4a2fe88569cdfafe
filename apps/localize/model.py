"""OrganLocalizer: organ bounding boxes in CT by regression voting (Criminisi et al. 2012, sec. 4.5; Criminisi
et al., "Regression forests for efficient anatomy detection and localization in computed tomography scans", 2013).

Every sampled voxel p of the scan (on an isotropic working grid) predicts, for every organ c, the displacements
d_c(p) = b_c - p from p to the organ's six walls b_c = (x_lo, x_hi, y_lo, y_hi, z_lo, z_hi). The forest is the
engine's: displaced-box features in mm on the scan's integral image (eq. 4.5), the Gaussian information gain of
eq. 4.6 summed over organs (one 6-D block per organ, blocks of scans without the organ left out). Leaves hold, per
organ, a 6-D Gaussian of the displacements and the share of their training voxels whose scan showed the organ.

At test time each organ's walls come from its most confident votes (per wall, the leaves with the smallest
variance of that wall's displacement), aggregated by medians in physical space with a robust per-wall spread.
Walls that training scans often show at the edge of the body's field of view (the spinal cord's lower end, where
clinicians stop contouring at the last slice; the brainstem's top in scans cut at the skull) are then combined with
a prior learnt from the training truth: the offsets of that wall from the body's edge, weighted by how well each
agrees with the vote (a Gaussian of the votes' spread), and the posterior median taken.
The organ's presence probability is the mean leaf share over all votes times an agreement factor of the votes'
spread. Whether the organ is in the field of view at all is judged on a broader vote (presence_fraction of the
votes per wall, without the prior): an organ of which less than min_visible of the voted extent along some axis lies
inside the scan is reported absent (a slab cut just below the parotids still has voxels that recall them).

A second, organ-centred stage (`refine.py`) then re-votes the walls of every organ found, on a 2 mm grid
around its box, with a small forest of its own per organ; a third stage of the same kind, trained on smaller
errors, does it again from the second's box with a closer look (a cascade of fine stages); the body-edge prior and
the scan's faces apply again. For elongated organs (the spinal cord) a last stage (`slices.py`) replaces
the x/y walls with the extremes of per-slice cross-sections voted over the cascade's z range.

This module holds the settings and the training; `OrganLocalizer.localize` runs the stages in order, each module
taking the previous one's result: `imageforest.imaging.ct.working_grid` (the working grid), `coarse.py` (the first
stage's vote), `refine.py` (fine stages), `slices.py` (slice stage), `snapping.py` (walls on voxel faces).
`model_files.py` reads and writes the model file.
"""

from __future__ import annotations

import os
import time
from typing import ClassVar

import numpy as np

from imageforest.apps.localize.coarse import coarse_vote, first_stage_leaves
from imageforest.apps.localize.refine import (
    COV_MAX,
    MIN_LEAF_VOTERS,
    FineSource,
    FineStage,
    PlainTrees,
    WallRefiner,
    fine_region,
    refine_walls,
    training_region,
)
from imageforest.apps.localize.results import Localization, OrganEstimate
from imageforest.apps.localize.slices import SliceWallRefiner, elongated, slice_training_region, slice_walls
from imageforest.apps.localize.snapping import snap_to_voxel_faces
from imageforest.estimators.base import BaseForest
from imageforest.estimators.params import GROWTH, Anything, Boolean, Integer, Real, Rule, check_params
from imageforest.exceptions import InvalidInputError, ModelFormatError
from imageforest.forest.objectives import Objective
from imageforest.forest.storage import ForestArrays
from imageforest.imaging.ct import (
    AIR_HU,
    body_edges,
    body_mask,
    crop_z,
    extent,
    voxel_positions,
    working_grid,
    working_image,
)
from imageforest.imaging.ct_organs import WALL_AXIS, OrganSlices
from imageforest.imaging.features import BoxFeatures, ImageStack
from imageforest.imaging.io import Image
from imageforest.voting import ranked_order

TRIU = np.triu_indices(6)
# Where the packed upper triangle keeps the six variances, and the wall pairs of the 15 covariances beside them
TRIU_DIAGONAL = TRIU[0] == TRIU[1]
TRIU_PAIRS = (TRIU[0][~TRIU_DIAGONAL], TRIU[1][~TRIU_DIAGONAL])
# Settings of the fine stages that may differ from stage to stage (a scalar applies to every stage).
FINE_STAGE_SETTINGS = ("refine_trees", "refine_min_samples_leaf", "refine_margin_mm", "refine_reach_mm",
                       "refine_jitter_mm", "refine_points")


class OrganLocalizer(PlainTrees):
    """A regression forest that votes for organ bounding boxes in CT scans.

    The defaults are the settings of the shipped model (`recipe.py`), its seed aside.

    Parameters
    ----------
    organs : list of str
        Organ names, in the order of the truth boxes / label values given to `fit`.
    spacing_mm : float
        Isotropic working spacing scans are resampled to (features and votes live on this grid).
    n_trees, max_depth, n_candidates, n_thresholds, min_samples_leaf, random_state, n_jobs
        Forest hyper-parameters (T, D, rho, K, ...), as for `RegressionForest`.
    max_offset_mm : float
        Box features look up to this far from the voxel along each axis.
    box_size_mm : (min, max)
        Edge lengths of the feature boxes.
    difference : bool
        Features are differences of two displaced boxes (Haar-like) rather than one box's mean HU.
    points_per_scan : int
        Body voxels sampled from each training scan (and from each crop).
    crops_per_scan : int
        Extra training copies of each scan cut to a random slab of slices, so that the forest sees organs leave
        the field of view (and learns to call them absent).
    vote_points : int
        Body voxels that vote at test time (a regular sub-grid of the working grid).
    vote_fraction : float
        Share of each organ's votes kept per wall, the most confident first (smallest leaf variance of the wall).
    max_spread_mm : float
        Mean per-wall vote spread at which the presence probability is halved: votes that scatter more than
        this do not locate an organ.
    edge_prior_share : float
        A wall gets the body-edge prior when at least this share of the training scans with the organ show the
        wall within 1.5 working voxels of the body's edge on that side; 1 (or more) turns the prior off.
    presence_fraction : float
        Share of each organ's votes kept per wall (most confident first) for the box that decides whether the
        organ is in view, and for the spread of the agreement factor.
    min_visible : float
        Least share of that box's extent along every axis that must lie inside the scan for the organ to be
        reported present.
    refine_spacing_mm : float
        Fine grid of the second, organ-centred stage (`refine.py`); 0 turns the stage off.
    refine_trees, refine_depth, refine_min_samples_leaf
        T, D and leaf size of each organ's fine-stage forests.
    refine_margin_mm, refine_reach_mm
        Voxels within the margin of the previous stage's box vote; their features reach this far.
    refine_jitter_mm
        Training regions sit around the true box moved by N(0, jitter) per wall (the previous stage's error).
    refine_points, refine_votes
        Voxels per training scan and organ; most voxels that vote per organ at test time.
    refine_fraction, refine_passes
        Share of the fine-stage votes kept per wall; how many times each stage re-centres on its own box.
    slice_elongation : float or None
        Organs whose median training box is at least this many times longer in z than its narrower side get a
        last, slice-wise stage for their x/y walls (`slices.py`; needs label maps and the fine
        stages); None turns it off.
    slice_trees, slice_min_samples_leaf, slice_margin_mm, slice_reach_mm, slice_points
        T, leaf size, voter margin, feature reach and training voxels per scan of that stage's forests (their
        training boxes are jittered by the last fine stage's jitter).
    slice_fraction, slice_window
        Share of a slice's votes kept per wall (most confident first); slices in the running median along z.

    The fine stages form a cascade: `refine_trees`, `refine_min_samples_leaf`, `refine_margin_mm`,
    `refine_reach_mm`, `refine_jitter_mm` and `refine_points` may be tuples with one entry per stage (a scalar
    serves every stage); each stage starts from the box of the one before, and later stages are trained on smaller
    jitters, so they learn to correct smaller errors from a closer look.
    """

    task = "organ-localization"
    # CT box means cluster (air near -1000, fat, soft tissue near 0-80 HU, bone): thresholds drawn from the node's
    # own responses land inside the clusters, where uniform draws over [min, max] would mostly fall between them.
    threshold_sampling = "data"

    # What each hyper-parameter accepts; `_check_settings` adds the rules that relate several of them.
    parameter_constraints: ClassVar[dict[str, Rule]] = {
        **GROWTH, "organs": Anything(), "spacing_mm": Real(0.5, 20.0), "max_offset_mm": Real(0.0, 500.0, low_open=True),
        "box_size_mm": Anything(), "difference": Boolean(), "points_per_scan": Integer(1, 1_000_000),
        "crops_per_scan": Integer(0, 100), "vote_points": Integer(1, 10_000_000),
        "vote_fraction": Real(0.0, 1.0, low_open=True), "max_spread_mm": Real(0.0, 1000.0, low_open=True),
        "edge_prior_share": Real(0.0, 1.0),
        "presence_fraction": Real(0.0, 1.0, low_open=True), "min_visible": Real(0.0, 1.0),
        "refine_spacing_mm": Real(0.0, 20.0), "refine_trees": Anything(), "refine_depth": Integer(0, allow_none=True),
        "refine_min_samples_leaf": Anything(), "refine_margin_mm": Anything(), "refine_reach_mm": Anything(),
        "refine_jitter_mm": Anything(), "refine_points": Anything(), "refine_votes": Integer(1, 10_000_000),
        "refine_fraction": Real(0.0, 1.0, low_open=True), "refine_passes": Integer(1, 100),
        "slice_elongation": Real(0.0, allow_none=True), "slice_trees": Integer(1), "slice_min_samples_leaf": Integer(1),
        "slice_margin_mm": Real(0.0, 500.0), "slice_reach_mm": Real(0.0, 500.0), "slice_points": Integer(1, 1_000_000),
        "slice_fraction": Real(0.0, 1.0, low_open=True), "slice_window": Integer(1, 1001)}

    def __init__(self, organs: list[str] | tuple[str, ...] = (), *, spacing_mm: float = 4.0, n_trees: int = 10,
                 max_depth: int | None = 12, n_candidates: int = 60, n_thresholds: int | None = 12,
                 min_samples_leaf: int = 20, max_offset_mm: float = 80.0, box_size_mm=(4.0, 40.0),
                 difference: bool = False, points_per_scan: int = 800, crops_per_scan: int = 1,
                 vote_points: int = 20_000, vote_fraction: float = 0.02, max_spread_mm: float = 35.0,
                 edge_prior_share: float = 0.25, presence_fraction: float = 0.3, min_visible: float = 0.5,
                 refine_spacing_mm: float = 2.0, refine_trees: int | tuple = 4, refine_depth: int | None = 12,
                 refine_min_samples_leaf: int | tuple = (50, 30), refine_margin_mm: float | tuple = (10.0, 6.0),
                 refine_reach_mm: float | tuple = (30.0, 20.0), refine_jitter_mm: float | tuple = (6.0, 3.0),
                 refine_points: int | tuple = 600, refine_votes: int = 2000, refine_fraction: float = 0.05,
                 refine_passes: int = 1, slice_elongation: float | None = 4.0, slice_trees: int = 4,
                 slice_min_samples_leaf: int = 30, slice_margin_mm: float = 10.0, slice_reach_mm: float = 20.0,
                 slice_points: int = 800, slice_fraction: float = 0.1, slice_window: int = 5, random_state=None,
                 n_jobs: int | None = None) -> None:
        self.organs = organs
        self.spacing_mm = spacing_mm
        self.n_trees = n_trees
        self.max_depth = max_depth
        self.n_candidates = n_candidates
        self.n_thresholds = n_thresholds
        self.min_samples_leaf = min_samples_leaf
        self.max_offset_mm = max_offset_mm
        self.box_size_mm = box_size_mm
        self.difference = difference
        self.points_per_scan = points_per_scan
        self.crops_per_scan = crops_per_scan
        self.vote_points = vote_points
        self.vote_fraction = vote_fraction
        self.max_spread_mm = max_spread_mm
        self.edge_prior_share = edge_prior_share
        self.presence_fraction = presence_fraction
        self.min_visible = min_visible
        self.refine_spacing_mm = refine_spacing_mm
        self.refine_trees = refine_trees
        self.refine_depth = refine_depth
        self.refine_min_samples_leaf = refine_min_samples_leaf
        self.refine_margin_mm = refine_margin_mm
        self.refine_reach_mm = refine_reach_mm
        self.refine_jitter_mm = refine_jitter_mm
        self.refine_points = refine_points
        self.refine_votes = refine_votes
        self.refine_fraction = refine_fraction
        self.refine_passes = refine_passes
        self.slice_elongation = slice_elongation
        self.slice_trees = slice_trees
        self.slice_min_samples_leaf = slice_min_samples_leaf
        self.slice_margin_mm = slice_margin_mm
        self.slice_reach_mm = slice_reach_mm
        self.slice_points = slice_points
        self.slice_fraction = slice_fraction
        self.slice_window = slice_window
        self.random_state = random_state
        self.n_jobs = n_jobs

    # -- training -----------------------------------------------------------------------------------------
    def _features(self) -> BoxFeatures:
        return BoxFeatures(max_offset_mm=float(self.max_offset_mm), box_size_mm=tuple(self.box_size_mm),
                           difference=bool(self.difference), fill=AIR_HU)

    def _check_settings(self) -> None:
        check_params(self)
        if not self.organs or len(set(self.organs)) != len(self.organs):
            raise InvalidInputError("organs must be a non-empty list of distinct names")
        if not (isinstance(self.spacing_mm, (int, float)) and 0.5 <= self.spacing_mm <= 20):
            raise InvalidInputError(f"spacing_mm must lie in [0.5, 20] mm, got {self.spacing_mm!r}")
        for name in ("vote_fraction", "presence_fraction"):
            if not 0 < getattr(self, name) <= 1:
                raise InvalidInputError(f"{name} must lie in (0, 1], got {getattr(self, name)!r}")
        if not 0 <= self.min_visible <= 1:
            raise InvalidInputError(f"min_visible must lie in [0, 1], got {self.min_visible!r}")
        for name in ("points_per_scan", "vote_points"):
            if int(getattr(self, name)) < 1:
                raise InvalidInputError(f"{name} must be >= 1")
        if int(self.crops_per_scan) < 0:
            raise InvalidInputError("crops_per_scan must be >= 0")
        if not (self.refine_spacing_mm == 0 or 0.5 <= self.refine_spacing_mm <= 20):
            raise InvalidInputError(f"refine_spacing_mm must be 0 (off) or lie in [0.5, 20] mm, "
                                    f"got {self.refine_spacing_mm!r}")
        if not 0 < self.refine_fraction <= 1:
            raise InvalidInputError(f"refine_fraction must lie in (0, 1], got {self.refine_fraction!r}")
        for name in ("refine_votes", "refine_passes"):
            if int(getattr(self, name)) < 1:
                raise InvalidInputError(f"{name} must be >= 1")
        if self.slice_elongation is not None and not (isinstance(self.slice_elongation, (int, float))
                                                      and self.slice_elongation >= 0):
            raise InvalidInputError(f"slice_elongation must be None (off) or >= 0, got {self.slice_elongation!r}")
        if not 0 < self.slice_fraction <= 1:
            raise InvalidInputError(f"slice_fraction must lie in (0, 1], got {self.slice_fraction!r}")
        for name in ("slice_trees", "slice_min_samples_leaf", "slice_points", "slice_window"):
            if int(getattr(self, name)) < 1:
                raise InvalidInputError(f"{name} must be >= 1")
        if min(self.slice_margin_mm, self.slice_reach_mm) < 0:
            raise InvalidInputError("slice_margin_mm and slice_reach_mm must be >= 0")
        for stage in self.fine_stages():
            if min(stage.trees, stage.min_samples_leaf, stage.points) < 1:
                raise InvalidInputError("refine_trees, refine_min_samples_leaf and refine_points must be >= 1")
            if min(stage.margin_mm, stage.reach_mm, stage.jitter_mm) < 0:
                raise InvalidInputError("refine_margin_mm, refine_reach_mm and refine_jitter_mm must be >= 0")
            if max(stage.margin_mm, stage.reach_mm, stage.jitter_mm) > 500:
                raise InvalidInputError("refine_margin_mm, refine_reach_mm and refine_jitter_mm must be <= 500 mm")
            if stage.points > 1_000_000:
                raise InvalidInputError("refine_points must be <= 1,000,000")

    def fine_stages(self) -> list[FineStage]:
        """Each fine stage's settings, from `FINE_STAGE_SETTINGS` (tuples give one entry per stage, scalars
        serve all)."""
        values = {name: np.atleast_1d(np.asarray(getattr(self, name), dtype=np.float64)).tolist()
                  for name in FINE_STAGE_SETTINGS}
        n = max(len(v) for v in values.values())
        odd = [name for name, v in values.items() if len(v) not in (1, n)]
        if odd:
            raise InvalidInputError(f"{', '.join(odd)}: give one value per fine stage ({n}) or a single value")
        at = {name: [v[0] if len(v) == 1 else v[s] for s in range(n)] for name, v in values.items()}
        return [FineStage(int(at["refine_trees"][s]), int(at["refine_min_samples_leaf"][s]), at["refine_margin_mm"][s],
                          at["refine_reach_mm"][s], at["refine_jitter_mm"][s], int(at["refine_points"][s]))
                for s in range(n)]

    def fit(self, scans: list[Image], truths: list, progress=None, run_jobs=None) -> OrganLocalizer:
        """Grow the forest on CT scans and their organ truth.

        Parameters
        ----------
        scans : list of Image
            CT volumes in HU (LPS, as `read_scan` returns them).
        truths : list of OrganSlices or (n_organs, 6) arrays
            Per scan, the organs' label map summary (`OrganSlices`, needed for exact boxes of crops) or boxes
            in mm with NaN rows for absent organs.
        progress : callable(str), optional
            Receives one line per stage.
        run_jobs : callable, optional
            Runs the independent forests: takes a list of ``(function, args)`` and returns ``[function(*args),
            ...]`` in order (default: here, one after another; `imageforest.cluster.dask_jobs` runs
            them as Dask tasks). The model is the same either way.
        """
        self._check_settings()
        if len(scans) != len(truths) or not scans:
            raise InvalidInputError(f"give one truth per scan ({len(scans)} scans, {len(truths)} truths)")
        say = progress or (lambda _msg: None)
        rng = np.random.default_rng(self.random_state)
        # The fine stages draw from their own stream, so changing their settings leaves the first stage as it was;
        # the slice stage from a third (spawning does not advance `rng`).
        fine_rng = rng.spawn(1)[0]
        slice_rng = rng.spawn(1)[0]
        tree_rng = rng.spawn(1)[0]  # the first stage's per-tree seeds
        works, targets, points, known, edge_offsets, fulls = [], [], [], [], [], []
        n_org = len(self.organs)
        refining = float(self.refine_spacing_mm) > 0
        t0 = time.perf_counter()
        for k, (scan, truth) in enumerate(zip(scans, truths, strict=True)):
            work = working_image(scan, float(self.spacing_mm))
            nz = work.array.shape[0]
            slabs = [(0, nz)]
            for _ in range(int(self.crops_per_scan)):
                length = int(rng.integers(max(4, nz // 4), max(5, nz * 3 // 4)))
                start = int(rng.integers(0, nz - length + 1))
                slabs.append((start, start + length))
            full = boxes_in_view(truth, work, n_org)
            edge_offsets.append(full - body_edges(body_mask(work), work)[None, :])
            fulls.append(full)
            for z0, z1 in slabs:
                whole = (z0, z1) == (0, nz)
                piece = work if whole else crop_z(work, z0, z1)
                boxes = full if whole else boxes_in_view(truth, piece, n_org)
                # An organ the full scan shows but the slab does not is known to be absent; one the scan's
                # truth lacks altogether may simply not have been contoured, so its presence stays unknown.
                scan_known = ~np.isnan(full[:, 0])
                pts = _sample_body(piece, int(self.points_per_scan), rng)
                if pts.shape[0] == 0:
                    continue
                pos = voxel_positions(piece, pts)
                targets.append((boxes[None, :, :] - pos[:, WALL_AXIS][:, None, :]).reshape(len(pts), 6 * n_org))
                points.append(np.c_[np.full(len(pts), len(works)), pts])
                known.append(np.broadcast_to(scan_known, (len(pts), n_org)))
                works.append(piece)
            if (k + 1) % 20 == 0 or k + 1 == len(scans):
                elapsed = time.perf_counter() - t0
                say(f"prepared {k + 1}/{len(scans)} scans ({len(works)} volumes with crops, {elapsed:.0f} s; "
                    f"{remaining(elapsed, k + 1, len(scans))} for this step)")
        if not works:
            raise InvalidInputError("no scan has any body voxel (HU > -500)")
        Y = np.concatenate(targets)
        if np.all(np.isnan(Y)):
            raise InvalidInputError("no organ is present in any training scan")
        pts = np.ascontiguousarray(np.concatenate(points), dtype=np.int32)
        # Every forest below grows from its own data and seed: they are independent jobs (`run_jobs` runs them
        # here one after another, or e.g. as Dask tasks), and the model's bytes do not depend on where they ran.
        # The first stage grows tree by tree, each tree from its own seed, so that its trees can be jobs too.
        # The first stage's trees grow before the fine stages' data is cut: the working volumes' integral images
        # and the fine regions are never held at once (203 scans held together would peak near 12.5 GB).
        stack = self._features().prepare(works)
        known_all = np.concatenate(known)
        first_jobs = [(_grow_first_stage_tree, (self, stack, pts, Y, known_all, n_org, int(seed)))
                      for seed in tree_rng.integers(2**31, size=int(self.n_trees))]
        n_volumes = len(works)
        del stack, works, known_all
        say(f"growing the first stage's {self.n_trees} trees on {len(pts)} voxels of {n_volumes} volumes")
        trees = run_jobs(first_jobs) if run_jobs is not None else _run_here(first_jobs, say)
        del first_jobs
        jobs, places = self._fine_stage_jobs(scans, fulls, fine_rng) if refining else ([], [])
        slice_jobs = self._slice_stage_jobs(scans, truths, slice_rng) if refining else []
        jobs.extend(job for _, job in slice_jobs)
        if jobs:
            say(f"growing {len(places)} fine-stage and {len(slice_jobs)} slice-stage forests")
        results = (run_jobs(jobs) if run_jobs is not None else _run_here(jobs, say)) if jobs else []
        fitted = results
        self.family_ = self._features()
        self.forest_ = ForestArrays.concatenate([t[0] for t in trees])
        self.family_.prepare_apply(self.forest_)
        self.n_features_in_ = self.family_.n_features
        self.leaf_share_, self.leaf_count_, self.leaf_mean_, cov = (np.concatenate([t[1][k] for t in trees])
                                                                     for k in range(4))
        say(f"grown: {self.forest_.n_leaves} first-stage leaves ({time.perf_counter() - t0:.0f} s)")
        self.leaf_var_, self.leaf_corr_ = pack_covariance(cov)  # as a model file holds them
        self.edge_offsets_ = np.array(edge_offsets, dtype=np.float32)
        self.refiners_ = [None] * n_org
        for (o, s), refiner in zip(places, fitted[:len(places)], strict=True):
            self.refiners_[o] = [*(self.refiners_[o] or []), refiner]
            say(f"fine stage {s + 1}, {self.organs[o]}: {refiner.forest_.n_leaves} leaves")
        self.slicers_ = [None] * n_org
        for (o, _), slicer in zip(slice_jobs, fitted[len(places):], strict=True):
            self.slicers_[o] = slicer
            say(f"slice stage, {self.organs[o]}: {slicer.forest_.n_leaves} leaves")
        self._derive()
        self.training_summary_ = {"scans": len(scans), "volumes": n_volumes, "voxels": len(pts)}
        return self

    def _fine_stage_jobs(self, scans: list[Image], fulls: list[np.ndarray], rng: np.random.Generator
                         ) -> tuple[list[tuple], list[tuple[int, int]]]:
        """The fine stages' forests to grow, as ``(function, args)`` jobs, and each job's (organ, stage): training
        regions cut from every scan around its organs' boxes `fulls` (drawn from `rng`, scan after scan), then one
        forest per organ the training scans show and per fine stage."""
        n_org = len(self.organs)
        stages = self.fine_stages()
        fine = [[([], [], []) for _ in stages] for _ in range(n_org)]  # per organ and stage: regions, points, targets
        for scan, full in zip(scans, fulls, strict=True):
            self._refine_training(scan, full, fine, rng, stages)
        jobs, places = [], []
        for o in range(n_org):
            if not fine[o][0][0]:  # no training scan shows the organ: no fine stages for it
                continue
            for s, stage in enumerate(stages):
                regions, pts_o, y_o = fine[o][s]
                seed = int(rng.integers(2**31))
                refiner = self._fine_forest(WallRefiner, seed, stage.trees, stage.min_samples_leaf, stage.reach_mm)
                jobs.append((_fit_refiner, (refiner, regions, np.concatenate(pts_o), np.concatenate(y_o))))
                places.append((o, s))
                fine[o][s] = ([], [], [])
        return jobs, places

    def _fine_forest(self, kind: type[WallRefiner], seed: int, n_trees, min_samples_leaf, reach_mm) -> WallRefiner:
        """An unfitted forest of the fine grid (a fine stage's `WallRefiner` or the slice stage's
        `SliceWallRefiner`): T, leaf size and feature reach (mm) of its stage, the rest shared."""
        return kind(spacing_mm=float(self.refine_spacing_mm), n_trees=int(n_trees), max_depth=self.refine_depth,
                    n_candidates=self.n_candidates, n_thresholds=self.n_thresholds,
                    min_samples_leaf=int(min_samples_leaf), reach_mm=float(reach_mm),
                    box_size_mm=(float(self.refine_spacing_mm), 20.0), random_state=seed, n_jobs=self.n_jobs)

    def _refine_training(self, scan: Image, boxes: np.ndarray, fine: list, rng: np.random.Generator,
                         stages: list[FineStage]) -> None:
        """Add one scan's regions for every fine stage in `stages` (around each contoured organ's box, jittered
        by the stage's jitter) to `fine`."""
        source = FineSource(scan, float(self.refine_spacing_mm))
        for o in np.flatnonzero(~np.isnan(boxes[:, 0])):
            for s, stage in enumerate(stages):
                region, zyx, y = training_region(source, boxes[o], stage.jitter_mm, stage.margin_mm, stage.reach_mm,
                                                 stage.points, rng)
                _add_region(fine[o][s], region, zyx, y)

    def _slice_stage_jobs(self, scans: list[Image], truths: list, rng: np.random.Generator) -> list[tuple]:
        """The slice-stage forests to grow, as ``(organ, (function, args))``: one for every elongated organ
        (`slice_elongation`) that some training scan contours, when every truth is a label map (`OrganSlices`)
        and the fine stages are on. Training regions sit around the true box (of the whole scan) jittered by the
        last fine stage's jitter."""
        n_org = len(self.organs)
        if float(self.refine_spacing_mm) <= 0 or not all(isinstance(t, OrganSlices) for t in truths):
            return []
        tubes = elongated(np.array([t.boxes() for t in truths]), self.slice_elongation)
        jitter = self.fine_stages()[-1].jitter_mm
        data = [([], [], []) for _ in range(n_org)]  # per organ: regions, points, targets
        for scan, truth in zip(scans, truths, strict=True):
            boxes = boxes_in_view(truth, scan, n_org)
            source = FineSource(scan, float(self.refine_spacing_mm))
            for o in np.flatnonzero(tubes & ~np.isnan(boxes[:, 0])):
                z_mm, cross = truth.cross_sections(int(o))
                region, zyx, y = slice_training_region(source, boxes[o], z_mm, cross, jitter,
                                                       float(self.slice_margin_mm), float(self.slice_reach_mm),
                                                       int(self.slice_points), rng)
                if len(zyx):
                    _add_region(data[o], region, zyx, y)
        jobs = []
        for o in np.flatnonzero(tubes):
            regions, pts, targets = data[o]
            if not regions:
                continue
            slicer = self._fine_forest(SliceWallRefiner, int(rng.integers(2**31)), self.slice_trees,
                                       self.slice_min_samples_leaf, self.slice_reach_mm)
            jobs.append((int(o), (_fit_refiner, (slicer, regions, np.concatenate(pts), np.concatenate(targets)))))
            data[o] = ([], [], [])
        return jobs

    @property
    def leaf_cov_(self) -> np.ndarray:
        """(n_leaves, n_organs, 21) float16: each first-stage leaf's covariance of the wall displacements (mm^2,
        packed upper triangle in `TRIU` order), rebuilt from `leaf_var_` and `leaf_corr_` (voting reads only
        the variances, so it is built on request)."""
        return unpack_covariance(self.leaf_var_, self.leaf_corr_)

    def _floor(self) -> float:
        return float(self.spacing_mm) ** 2

    def _derive(self) -> None:
        """What voting reads: whether enough voxels with the organ reached each leaf; per organ and wall, the
        leaves by increasing variance of that wall's displacement (the 6-D Gaussian's diagonal); leaf means in
        float64; and which walls get the body-edge prior."""
        self._votes = self.leaf_count_ >= MIN_LEAF_VOTERS
        wall_var = self.leaf_var_  # the one-voxel floor added to every leaf changes no order
        # Per organ and wall, all leaves in order of confidence (the variance is the leaf's, not the scan's):
        # voting then walks this order instead of sorting the reached leaves of every scan.
        self._wall_order = np.stack([ranked_order(wall_var[:, o], self._votes[:, o])
                                     for o in range(self.leaf_count_.shape[1])])
        self._wall_mean = np.ascontiguousarray(self.leaf_mean_.transpose(1, 0, 2), dtype=np.float64)  # (organ, L, 6)
        seen = ~np.isnan(self.edge_offsets_)
        at_edge = seen & (np.abs(np.nan_to_num(self.edge_offsets_, nan=np.inf)) <= 1.5 * float(self.spacing_mm))
        share = at_edge.sum(axis=0) / np.maximum(seen.sum(axis=0), 1)
        self._edge_prior = share >= float(self.edge_prior_share)  # (n_organs, 6)

    # -- localizing: the stages, each taking the previous one's result ----------------------------------------
    def localize(self, scan: Image) -> Localization:
        """Presence and box of every organ in `scan` (an Image in HU, LPS): the working grid
        (`imageforest.imaging.ct`), the first stage's vote (`coarse.py`), the fine stages (`refine.py`) and the
        slice stage (`slices.py`) on one fine region, and the walls moved to the scan's voxel faces
        (`snapping.py`)."""
        self.check_fitted()
        t0 = time.perf_counter()
        grid = working_grid(scan, float(self.spacing_mm), int(self.vote_points))
        t1 = time.perf_counter()
        if grid.points.shape[0] == 0:
            organs = [OrganEstimate(name, False, 0.0, np.full(6, np.nan), np.full(6, np.nan), 0, np.full(6, np.nan))
                      for name in self.organs]
            return Localization(organs, grid.work, {"prepare": t1 - t0, "vote": 0.0})
        leaves = first_stage_leaves(self, grid)
        t2 = time.perf_counter()
        organs = coarse_vote(self, grid, leaves)
        t3 = time.perf_counter()
        fine = fine_region(self, grid, organs)
        if fine is not None:
            refine_walls(self, organs, fine, grid)
            slice_walls(self, organs, fine, grid)
        snap_to_voxel_faces(organs, scan)
        t4 = time.perf_counter()
        return Localization(organs, grid.work, {"prepare": t1 - t0, "apply": t2 - t1, "vote": t3 - t2,
                                                "refine": t4 - t3})

    # -- model files --------------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> None:
        """Write the model, every stage's forest by name, to `path` (atomic; `model_files.py`)."""
        from imageforest.apps.localize.model_files import write_localizer

        write_localizer(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> OrganLocalizer:
        """Read a model `save` wrote (or one in the older single-record layout); ModelFormatError if damaged."""
        from imageforest.apps.localize.model_files import read_localizer

        return read_localizer(path)

    def named_forests(self) -> dict[str, BaseForest]:
        """Every fitted stage's forest under its name in the model file (this first stage included)."""
        from imageforest.apps.localize.model_files import named_forests

        return named_forests(self)

    def leaf_arrays(self) -> dict[str, np.ndarray]:
        """The first stage's leaves (its record in the model file; the later stages are forests of their own)."""
        return {"leaf.share": self.leaf_share_, "leaf.count": self.leaf_count_, "leaf.mean": self.leaf_mean_,
                "leaf.var": self.leaf_var_, "leaf.corr": self.leaf_corr_, "edge.offsets": self.edge_offsets_}

    def extra_metadata(self) -> dict:
        return {"organs": list(self.organs), "model_card": getattr(self, "model_card_", {}),
                "training_summary": getattr(self, "training_summary_", {})}

    def restore_leaves(self, meta: dict, arrays: dict[str, np.ndarray]) -> None:
        self._check_loaded_family()
        n_leaves = self.forest_.n_leaves
        n_org = len(meta["organs"])
        shapes = {"leaf.share": (n_leaves, n_org), "leaf.count": (n_leaves, n_org),
                  "leaf.mean": (n_leaves, n_org, 6)}
        # Older files hold the packed covariance itself (`leaf.cov`, float16, 21 per leaf and organ).
        if "leaf.cov" in arrays:
            shapes["leaf.cov"] = (n_leaves, n_org, 21)
        else:
            shapes.update({"leaf.var": (n_leaves, n_org, 6), "leaf.corr": (n_leaves, n_org, 15)})
        for key, shape in shapes.items():
            if key not in arrays or arrays[key].shape != shape:
                raise ModelFormatError(f"leaf array {key} is missing or has the wrong shape")
            if arrays[key].dtype.kind not in ("f" if key != "leaf.corr" else "i"):
                raise ModelFormatError(f"leaf array {key} has dtype {arrays[key].dtype}")
            if not np.all(np.isfinite(arrays[key])):
                raise ModelFormatError(f"leaf array {key} holds NaN or infinite values")
        if np.any(arrays["leaf.share"] < 0) or np.any(arrays["leaf.share"] > 1) or np.any(arrays["leaf.count"] < 0):
            raise ModelFormatError("leaf shares must lie in [0, 1] and leaf counts be >= 0")
        # Files written before the body-edge prior existed have no offsets: they load with the prior off.
        offsets = arrays.get("edge.offsets", np.zeros((0, n_org, 6), dtype=np.float32))
        if offsets.ndim != 3 or offsets.shape[1:] != (n_org, 6) or offsets.dtype.kind != "f" or np.isinf(offsets).any():
            raise ModelFormatError("array edge.offsets has the wrong shape or holds infinities")
        self.edge_offsets_ = offsets
        self.organs = list(meta["organs"])
        self.leaf_share_ = arrays["leaf.share"]
        self.leaf_count_ = arrays["leaf.count"]
        self.leaf_mean_ = arrays["leaf.mean"]
        if "leaf.cov" in arrays:
            self.leaf_var_, self.leaf_corr_ = pack_covariance(arrays["leaf.cov"])
        else:
            if arrays["leaf.corr"].dtype != np.int8 or np.any(arrays["leaf.corr"] == -128):
                raise ModelFormatError("leaf array leaf.corr must hold int8 correlations in [-127, 127]")
            if arrays["leaf.var"].dtype != np.float16 or np.any(arrays["leaf.var"] < 0):
                raise ModelFormatError("leaf array leaf.var must hold non-negative float16 variances")
            self.leaf_var_, self.leaf_corr_ = arrays["leaf.var"], arrays["leaf.corr"]
        self.model_card_ = meta.get("model_card", {})
        self.training_summary_ = meta.get("training_summary", {})
        # the later stages are forests of their own in the file: `read_localizer` attaches them
        self.refiners_ = [None] * n_org
        self.slicers_ = [None] * n_org
        self._derive()

    def check_loaded_parameters(self) -> None:
        self._check_settings()

    @classmethod
    def from_hyper_parameters(cls, hyper: dict, meta: dict) -> OrganLocalizer:
        hyper = dict(hyper)
        hyper["box_size_mm"] = tuple(hyper.get("box_size_mm", (4.0, 40.0)))
        for name in FINE_STAGE_SETTINGS:  # JSON gives lists back for per-stage tuples
            if isinstance(hyper.get(name), list):
                hyper[name] = tuple(hyper[name])
        return cls(**hyper)


def _run_here(jobs: list[tuple], say=None) -> list:
    """Run ``(function, args)`` jobs in this process, in order, dropping each job's data once it has run; `say`
    hears after each job how many are done and about how long the rest will take."""
    results = []
    t0 = time.perf_counter()
    for k, (function, args) in enumerate(jobs):
        jobs[k] = None
        results.append(function(*args))
        if say is not None:
            elapsed = time.perf_counter() - t0
            say(f"grew forest {k + 1}/{len(jobs)} ({elapsed:.0f} s; {remaining(elapsed, k + 1, len(jobs))})")
    return results


def remaining(elapsed: float, done: int, total: int) -> str:
    """"about N s left" at the mean pace so far (forests and scans differ in cost: a rough guide)."""
    if done >= total:
        return "done"
    left = elapsed / max(done, 1) * (total - done)
    return f"about {left / 60:.0f} min left" if left >= 120 else f"about {left:.0f} s left"


def _grow_first_stage_tree(model: OrganLocalizer, stack: ImageStack, pts: np.ndarray, Y: np.ndarray,
                           known: np.ndarray, n_org: int, seed: int) -> tuple:
    """Grow one tree of the first stage (`model`'s settings, seed `seed`) on the working volumes' integral
    `stack`; returns (ForestArrays of the tree, (leaf_share, leaf_count, leaf_mean, leaf_cov)). A job: `model` is
    only read (it may be a copy on another machine)."""
    tree = model.__class__(**{**model.get_params(), "n_trees": 1, "random_state": seed})
    family = tree._features()
    # Within one scan the two walls of an axis move together (their difference is the organ's size), so a
    # leaf of one scan's voxels has a nearly singular covariance; a floor of one working voxel squared per
    # wall keeps such leaves from looking infinitely certain, in the gain and in the vote ranking.
    objective = Objective.regression(Y, "gaussian", block_size=6, variance_floor=tree._floor())
    grown = tree.grow(family, (stack, pts), len(pts), objective, np.ones(len(pts)))
    return grown.forest, _organ_leaves(grown, Y, known, n_org)


def _fit_refiner(refiner: WallRefiner, regions: list[Image], pts: np.ndarray, y: np.ndarray) -> WallRefiner:
    """Fit a fine-stage or slice-stage forest (a job)."""
    return refiner.fit(regions, pts, y)


def _add_region(bucket: tuple[list, list, list], region: Image, zyx: np.ndarray, y: np.ndarray) -> None:
    """Append one training region to a fine forest's (regions, points, targets) lists: its points (n, 3) z, y, x
    become (n, 4) rows led by the region's index, as `WallRefiner.fit` takes them."""
    regions, points, targets = bucket
    points.append(np.c_[np.full(len(zyx), len(regions)), zyx])
    targets.append(y)
    regions.append(region)


def boxes_in_view(truth, piece: Image, n_org: int) -> np.ndarray:
    """Boxes (n_org, 6) of the organs inside `piece` (a scan or a slab of it)."""
    if isinstance(truth, OrganSlices):
        # Slices of the label map whose centres lie inside the piece's z extent.
        zc = truth.slice_z_mm()
        lo, hi = extent(piece)[:, 2]
        inside = np.flatnonzero((zc >= lo) & (zc <= hi))
        if inside.size == 0:
            return np.full((n_org, 6), np.nan)
        return truth.boxes((int(inside.min()), int(inside.max()) + 1))
    boxes = np.array(truth, dtype=np.float64).reshape(n_org, 6)
    lo, hi = extent(piece)[:, 2]
    out = boxes.copy()
    out[:, 4] = np.maximum(boxes[:, 4], lo)
    out[:, 5] = np.minimum(boxes[:, 5], hi)
    out[~(out[:, 5] > out[:, 4])] = np.nan
    return out


def _sample_body(work: Image, n: int, rng: np.random.Generator) -> np.ndarray:
    """Up to n random body voxels (z, y, x) of a working-grid volume, int64."""
    zz, yy, xx = np.nonzero(body_mask(work))
    if zz.size == 0:
        return np.zeros((0, 3), dtype=np.int64)
    pick = rng.choice(zz.size, size=min(n, zz.size), replace=False)
    pick.sort()
    return np.c_[zz[pick], yy[pick], xx[pick]]


def pack_covariance(cov: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A model file's form of leaf covariances (..., 21) (packed upper triangle, `TRIU` order, mm^2): the six
    variances (..., 6) as float16 and the 15 correlations (..., 15) as int8 steps of 1/127. Only the variances
    rank votes; the correlations complete each leaf's 6-D Gaussian in 27 bytes per leaf and organ instead of 42."""
    cov = np.asarray(cov, dtype=np.float64)
    variance = np.maximum(cov[..., TRIU_DIAGONAL], 0.0)
    sd = np.sqrt(variance)
    scale = sd[..., TRIU_PAIRS[0]] * sd[..., TRIU_PAIRS[1]]
    corr = np.where(scale > 0, cov[..., ~TRIU_DIAGONAL] / np.where(scale > 0, scale, 1.0), 0.0)
    return variance.astype(np.float16), np.clip(np.round(corr * 127), -127, 127).astype(np.int8)


def unpack_covariance(variance: np.ndarray, correlation: np.ndarray) -> np.ndarray:
    """Leaf covariances (..., 21) float16 (packed upper triangle) from `pack_covariance`'s arrays."""
    var = np.asarray(variance, dtype=np.float64)
    sd = np.sqrt(var)
    cov = np.empty((*var.shape[:-1], 21))
    cov[..., TRIU_DIAGONAL] = var
    cov[..., ~TRIU_DIAGONAL] = correlation.astype(np.float64) / 127 * sd[..., TRIU_PAIRS[0]] * sd[..., TRIU_PAIRS[1]]
    return np.clip(cov, -COV_MAX, COV_MAX).astype(np.float16)


def _organ_leaves(grown, Y: np.ndarray, known: np.ndarray, n_org: int):
    """Per leaf and organ: the share of voxels whose scan showed the organ among those whose scan's status is
    known (`known`: the organ is contoured in the full scan), the count of voxels with the organ, and the mean (6)
    and covariance (21, packed upper triangle; both float16) of their wall displacements. Leaves without any known
    voxel get the organ's overall share."""
    n_leaves = grown.leaf_start.size
    seg, positions = grown.leaf_members()
    pts = grown.order[positions]
    w = grown.wts[positions]
    share = np.zeros((n_leaves, n_org), dtype=np.float32)
    count = np.zeros((n_leaves, n_org), dtype=np.float32)
    mean = np.zeros((n_leaves, n_org, 6), dtype=np.float16)  # mm; float16 steps are <= 0.25 mm below 512 mm
    cov = np.zeros((n_leaves, n_org, 21), dtype=np.float16)
    for o in range(n_org):
        y = Y[:, 6 * o:6 * o + 6]
        has = ~np.isnan(y[:, 0])
        c, m, full = grown.leaf_moments(np.where(has[:, None], y, 0.0), np.where(has[grown.order], grown.wts, 0.0),
                                        "full")
        k = np.bincount(seg, weights=np.where(known[pts, o], w, 0.0), minlength=n_leaves)
        prior = c.sum() / max(k.sum(), 1e-300)
        share[:, o] = np.where(k > 0, c / np.maximum(k, 1e-300), prior)
        count[:, o] = c
        mean[:, o] = m
        cov[:, o] = np.clip(full[:, TRIU[0], TRIU[1]], -COV_MAX, COV_MAX)
    return share, count, mean, cov
