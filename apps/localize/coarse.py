"""The localizer's first stage: every voter of the working grid votes, through the first-stage forest's leaves,
for every organ's six walls; each organ's walls are the medians of its most confident votes, combined with the
body-edge prior where training scans showed that wall at the body's edge, and its presence is judged from the
leaves' organ shares and how well the votes agree.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import numba
import numpy as np

from imageforest.apps.localize.results import OrganEstimate
from imageforest.estimators.base import numba_threads
from imageforest.imaging.ct import WorkingGrid, inside, visible_share
from imageforest.imaging.ct_organs import WALL_AXIS
from imageforest.imaging.features import ImageStack
from imageforest.voting import Votes, ranked_medians

if TYPE_CHECKING:
    from imageforest.apps.localize.model import OrganLocalizer

SPREAD_SCALE_MM = 5.0  # width of the logistic step of the vote-agreement factor around max_spread_mm


def first_stage_leaves(model: OrganLocalizer, grid: WorkingGrid) -> np.ndarray:
    """(n_voters, T) the first-stage leaf each voter of `grid` reaches in each tree."""
    stack = ImageStack.from_images([grid.work], integral=True)
    with numba_threads(model.n_jobs):
        return model.family_.apply((stack, np.c_[np.zeros(len(grid.points)), grid.points].astype(np.int32)),
                                   model.forest_)


def coarse_vote(model: OrganLocalizer, grid: WorkingGrid, leaves: np.ndarray) -> list[OrganEstimate]:
    """Every organ's estimate from the voters' `leaves` (`first_stage_leaves`)."""
    votes = Votes.group(leaves)
    slot = votes.slots(model.forest_.n_leaves)
    with numba_threads(model.n_jobs):
        n_threads = min(numba.get_num_threads(), len(model.organs))
    # The organs' votes are independent and their kernel runs without the GIL: one thread per core (the
    # answers do not depend on the thread count).
    with ThreadPoolExecutor(n_threads) as pool:
        return list(pool.map(lambda o: organ_vote(model, o, votes, slot, grid), range(len(model.organs))))


def organ_vote(model: OrganLocalizer, o: int, votes: Votes, slot: np.ndarray, grid: WorkingGrid
               ) -> OrganEstimate:
    """Organ o's estimate from the first stage's `votes` of the grid's voters (`slot`: each leaf's place among
    the reached ones)."""
    pos, extent, edges = grid.positions, grid.extent, grid.edges
    name = model.organs[o]
    uniq, counts = votes.uniq, votes.counts
    probability = float(np.dot(model.leaf_share_[uniq, o], counts) / counts.sum())
    valid = model._votes[uniq, o]
    n_valid = int(counts[valid].sum())
    nan6 = np.full(6, np.nan)
    if n_valid == 0:  # no leaf reached knows where the organ's walls are: no box, so no presence either
        return OrganEstimate(name, False, 0.0, nan6, nan6, 0)
    # Each wall is voted by the leaves most certain about that wall (smallest variance of its displacement):
    # a voxel at the bottom of the neck knows where the cord ends better than where the brainstem's sides are.
    # Leaves are taken in that order until they hold the wanted share of the votes (the last one whole).
    keep = max(1, round(model.vote_fraction * n_valid))
    keep_presence = max(1, round(model.presence_fraction * n_valid))
    (box, view_box), (spread, view_spread) = ranked_medians(  # view_*: the broader vote that judges presence
        model._wall_order[o], model._wall_mean[o], votes, slot, pos, WALL_AXIS, (keep, keep_presence))
    for k in range(6):
        if model._edge_prior[o, k]:
            box[k], spread[k] = with_edge_prior(model, o, k, box[k], spread[k], edges[k])
    box = inside(box, extent)
    visible = visible_share(view_box, extent)
    # Votes of an organ that is there agree (median spread ~6-13 mm on head-and-neck CT); outside the anatomy
    # the model knows (e.g. an abdominal scan) leaves still claim the organ but their votes scatter (45-95
    # mm). The presence probability is the leaf share times a logistic agreement factor of the spread.
    agreement = 1.0 / (1.0 + np.exp((float(np.mean(view_spread)) - float(model.max_spread_mm)) / SPREAD_SCALE_MM))
    probability = probability * agreement if visible >= float(model.min_visible) else 0.0
    return OrganEstimate(name, probability >= 0.5, probability, box, spread, keep)

def with_edge_prior(model: OrganLocalizer, o: int, k: int, vote: float, spread: float, edge: float
                    ) -> tuple[float, float]:
    """Wall k of organ o from its vote (median, robust spread, mm) and the training scans' offsets of that
    wall from the body's edge: each training offset placed at this scan's edge is weighted by a Gaussian
    of its distance to the vote (sigma: the spread, at least one working voxel); the weighted median and
    its robust spread are returned. A vote no training offset explains is kept as it is."""
    offsets = model.edge_offsets_[:, o, k]
    atoms = np.sort(edge + offsets[~np.isnan(offsets)].astype(np.float64))
    sigma = max(spread, float(model.spacing_mm))
    weight = np.exp(-0.5 * ((atoms - vote) / sigma) ** 2)
    total = weight.sum()
    if not total > 1e-12:
        return vote, spread
    cumulative = np.cumsum(weight)
    wall = float(atoms[np.searchsorted(cumulative, 0.5 * total)])
    deviation = np.abs(atoms - wall)
    order = np.argsort(deviation, kind="stable")
    mad = float(deviation[order][np.searchsorted(np.cumsum(weight[order]), 0.5 * total)])
    return wall, 1.4826 * mad
