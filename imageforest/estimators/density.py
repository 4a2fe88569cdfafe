"""DensityForest: density estimation and sampling, Criminisi et al. 2012, ch. 5, on the shared engine.

Training is the engine's Gaussian log-det objective with the inputs as their own targets (eq. 5.2): no new trainer.
Each leaf l of tree t keeps the Gaussian (mu_l, Lambda_l) of its points and their share pi_l, and

    p_t(v) = pi_l(v) N(v; mu_l, Lambda_l) / Z_t,   Z_t = sum_l pi_l m_l,   m_l = mass of N(mu_l, Lambda_l) in cell l

(eq. 5.3-5.5), p(v) = mean over trees (eq. 5.6). For axis-aligned trees every cell is a box and m_l is a
multivariate normal box probability (`gaussian_boxes.box_masses`: exact for one dimension and diagonal
covariances, otherwise Genz's separation of variables on a lattice, in numba); for oblique and conic cells m_l is a
Monte Carlo estimate. Either way the standard error of Z_t is reported in `partition_error_`.

That is the leaf support "cell": each leaf's Gaussian lives in its own cell. With the support "space" each leaf's
Gaussian spreads over the whole input space, and every tree is a Gaussian mixture of its leaves,

    p_t(v) = sum_l pi_l N(v; mu_l, Lambda_l),

normalised by construction (Z_t = 1, no masses to compute). The tree's partition still places the components, but
the density no longer jumps at the cells' walls, and a held-out point just outside a small cell is not given the
cell's truncated tail. "auto" (the default) scores both on the held-out fifth that chooses the depth. On that
support `mixture_steps` EM steps may then refit each tree's leaves together as one mixture of the training points
(`leaf_mixtures`): the partition places the components, the likelihood of the whole tree fits them.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
from scipy import stats

from imageforest.estimators.base import UnsupervisedForestBase, numba_threads
from imageforest.estimators.gaussian_boxes import box_masses
from imageforest.estimators.leaf_mixtures import refit_leaf_mixtures
from imageforest.estimators.params import GROWTH, Either, Integer, Options, Real, Rule, check_params
from imageforest.exceptions import InvalidInputError, ModelFormatError
from imageforest.forest.objectives import Objective
from imageforest.forest.storage import ForestArrays
from imageforest.forest.threads import run_ranges
from imageforest.kernels import njit
from imageforest.validation import check_matrix

MC_SAMPLES = 4000  # per leaf, for the partition function of oblique and conic cells

# Choosing the depth D, the leaf support and the variance floor from the training data ("auto"): small forests of
# AUTO_TREES trees grow on a random VALIDATION_SHARE-less part of the points and are scored by the mean
# log-likelihood of the rest, one forest under both supports; each support's depths are tried from 1 up until
# AUTO_PATIENCE depths in a row fail to beat its best, and the better support is kept. Then the floor at its depth
# in tenfold steps from DEFAULT_FLOOR (down while the score rises, else up), and, when the floor moved, the depths
# one either side at the new floor. On "space" leaves, last, the EM steps (0 and MIXTURE_STEPS) and, when some
# win, the depths one either side with them. The forest itself then grows on every point with the winners. 8 trees
# keep the choice within 3x the fit of the final forest (16 took 2.4-4.1x, with choices no better on four
# benchmark sets).
AUTO_TREES = 8
AUTO_MAX_DEPTH = 20
AUTO_PATIENCE = 2
VALIDATION_SHARE = 0.2
DEFAULT_FLOOR = 1e-3  # relative variance floor (share of the data's mean per-feature variance) the search starts at
FLOOR_RANGE = (1e-7, 0.1)
LEAF_SUPPORTS = ("cell", "space")
# EM steps that refit a "space" tree's leaves as one mixture, scored after each of these on the chosen small forest
MIXTURE_STEPS = (1, 2, 4, 8)
# A "space" leaf whose log term lies this far below the best one found for the point in its tree adds less than
# e^-40 of it and is left out; its quadratic form stops accumulating as soon as it passes that bound.
NEGLIGIBLE_LOG = 40.0


def _log_density(leaf_ids, X, mean, chol_inv, log_norm):
    """log p(v) = log mean_t exp(log_norm_l - 0.5 |L_l^-1 (v - mu_l)|^2) for leaves l = leaf_ids[i, t]: (n,)."""
    out = np.empty(leaf_ids.shape[0])
    run_ranges(_log_density_range, leaf_ids.shape[0], leaf_ids, X, mean, chol_inv, log_norm, out)
    return out


@njit(cache=True, nogil=True)
def _log_density_range(i0, i1, leaf_ids, X, mean, chol_inv, log_norm, out):  # pragma: no cover - numba
    n_trees = leaf_ids.shape[1]
    d = X.shape[1]
    terms = np.empty(n_trees)
    for i in range(i0, i1):
        for t in range(n_trees):
            leaf = leaf_ids[i, t]
            q = 0.0
            for a in range(d):
                acc = 0.0
                for b in range(a + 1):
                    acc += chol_inv[leaf, a, b] * (X[i, b] - mean[leaf, b])
                q += acc * acc
            terms[t] = log_norm[leaf] - 0.5 * q
        top = terms.max()
        s = 0.0
        for t in range(n_trees):
            s += math.exp(terms[t] - top)
        out[i] = top + math.log(s / n_trees)


def _space_log_density(leaf_ids, X, mean, chol_inv, log_norm, tree_start):
    """log p(v) = log mean_t sum_{l in tree t} exp(log_norm_l - 0.5 |L_l^-1 (v - mu_l)|^2): (n,). Leaves are
    numbered tree by tree (tree t's are tree_start[t]:tree_start[t + 1]); v's own leaf leaf_ids[i, t] is scored
    first, so that the bound on negligible leaves is tight from the start."""
    out = np.empty(leaf_ids.shape[0])
    run_ranges(_space_log_density_range, leaf_ids.shape[0], leaf_ids, X, mean, chol_inv, log_norm, tree_start,
               NEGLIGIBLE_LOG, out)
    return out


@njit(cache=True, nogil=True)
def _space_log_density_range(i0, i1, leaf_ids, X, mean, chol_inv, log_norm, tree_start, negligible,
                             out):  # pragma: no cover - numba
    n_trees = leaf_ids.shape[1]
    d = X.shape[1]
    terms = np.empty(n_trees)
    for i in range(i0, i1):
        for t in range(n_trees):
            own = leaf_ids[i, t]
            q = 0.0
            for a in range(d):
                acc = 0.0
                for b in range(a + 1):
                    acc += chol_inv[own, a, b] * (X[i, b] - mean[own, b])
                q += acc * acc
            top = log_norm[own] - 0.5 * q
            s = 1.0  # sum of exp(term - top) over the leaves scored so far
            for leaf in range(tree_start[t], tree_start[t + 1]):
                if leaf == own or log_norm[leaf] == -np.inf:  # the second: a leaf of zero weight
                    continue
                limit = 2.0 * (log_norm[leaf] - top + negligible)  # q beyond which the leaf is negligible
                if limit <= 0.0:
                    continue
                # the quadratic forms are written out in these kernels: a shared helper made scoring 2x slower
                q = 0.0
                for a in range(d):
                    acc = 0.0
                    for b in range(a + 1):
                        acc += chol_inv[leaf, a, b] * (X[i, b] - mean[leaf, b])
                    q += acc * acc
                    if q > limit:
                        break
                if q > limit:
                    continue
                term = log_norm[leaf] - 0.5 * q
                if term > top:
                    s = s * math.exp(top - term) + 1.0
                    top = term
                else:
                    s += math.exp(term - top)
            terms[t] = top + math.log(s)
        top = terms.max()
        s = 0.0
        for t in range(n_trees):
            s += math.exp(terms[t] - top)
        out[i] = top + math.log(s / n_trees)


def axis_cells(forest: ForestArrays, n_features: int) -> tuple[np.ndarray, np.ndarray]:
    """Box of every leaf's cell for axis-aligned, one-sided trees: lower and upper bounds (n_leaves, d).

    A point goes left when v[k] <= t, so the left child's cell gets upper bound t on axis k and the right child's
    lower bound t. Open sides are +-inf. Computed top-down, one vectorised step per level.
    """
    lo = np.full((forest.n_nodes, n_features), -np.inf)
    hi = np.full((forest.n_nodes, n_features), np.inf)
    split = np.flatnonzero(forest.child >= 0)
    depth = forest.depth[split]
    for d in range(forest.max_depth + 1):
        nodes = split[depth == d]
        left = forest.child[nodes]
        k = forest.params[nodes, 0].astype(np.int64)
        thr = forest.thr_hi[nodes].astype(np.float64)
        for child in (left, left + 1):
            lo[child] = lo[nodes]
            hi[child] = hi[nodes]
        hi[left, k] = np.minimum(hi[left, k], thr)
        lo[left + 1, k] = np.maximum(lo[left + 1, k], thr)
    return lo[forest.leaf_node], hi[forest.leaf_node]


class DensityForest(UnsupervisedForestBase):
    """A density forest (Criminisi et al. 2012, ch. 5): unsupervised Gaussian gain, piece-wise Gaussian leaves,
    sampling.

    Parameters
    ----------
    max_depth : int, None or "auto"
        D, the main smoothness control (Fig. 5.4-5.6). "auto" (the default) chooses it from the training data by
        held-out log-likelihood (module notes); `depths_` holds the chosen depth of every tree.
    variance_floor : float or "auto"
        Added to every leaf Gaussian's variances (and to the split gain's), as a share of the data's mean
        per-feature variance: a leaf of few points otherwise gets a spiky Gaussian. "auto" chooses it after the
        depth (module notes); `variance_floor_` holds the value used.
    leaf_support : "auto", "cell" or "space"
        Where each leaf's Gaussian lives (module notes): its own cell (the monograph's eq. 5.3), or the whole
        space, each tree then a Gaussian mixture of its leaves. "auto" (the default) chooses with the depth, by
        held-out log-likelihood; `leaf_support_` holds the one used.
    mixture_steps : int >= 0 or "auto"
        On the "space" support, EM steps that refit each tree's leaf Gaussians and shares together as one mixture
        of all the training points (module notes); 0 keeps each leaf fitted to its own cell's points. "auto" (the
        default) scores 0 and 1, 2, 4, 8 steps on the held-out fifth; `mixture_steps_` holds the number used (0
        on cells).
    n_thresholds : int or None
        K, random thresholds tried per feature and node; 2 (strongly randomised trees, whose average is smoother)
        was the best or within 0.004 of it on the internal validation splits of four benchmark sets, against 1, 4
        and 16.
    n_trees, weak_learner, n_candidates, bootstrap, max_samples, min_samples_split, min_samples_leaf, min_gain,
    random_state, n_jobs
        As for `ClassificationForest`.

    Attributes
    ----------
    depths_ : (n_trees,) int, each tree's chosen depth D (the one given, or chosen)
    variance_floor_ : float, the relative variance floor used
    leaf_support_ : str, "cell" or "space"
    mixture_steps_ : int, EM steps applied to every tree's leaves
    selection_ : dict, validation mean log-likelihoods of the candidates tried: {"depth": {D: ll}, "floor":
        {floor: ll}}, and with both supports tried their depths' scores apart ("depth:cell", "depth:space");
        empty for settings that were given
    """

    task = "density"
    _estimator_kind = "density_estimator"
    parameter_constraints: ClassVar[dict[str, Rule]] = {
        **GROWTH, "max_depth": Either(rules=(Integer(0, allow_none=True), Options(choices=("auto",)))),
        "variance_floor": Either(rules=(Real(0.0, 1.0, low_open=True), Options(choices=("auto",)))),
        "leaf_support": Options(choices=("auto", *LEAF_SUPPORTS)),
        "mixture_steps": Either(rules=(Integer(0), Options(choices=("auto",))))}

    def __init__(self, n_trees: int = 100, *, max_depth: int | str | None = "auto", variance_floor="auto",
                 leaf_support: str = "auto", mixture_steps: int | str = "auto", weak_learner: str = "axis",
                 n_candidates="all", n_thresholds: int | None = 2, bootstrap: bool = False, max_samples=None,
                 min_samples_split: int = 10, min_samples_leaf: int = 5, min_gain: float = 0.0, random_state=None,
                 n_jobs: int | None = None) -> None:
        self.n_trees = n_trees
        self.max_depth = max_depth
        self.variance_floor = variance_floor
        self.leaf_support = leaf_support
        self.mixture_steps = mixture_steps
        self.weak_learner = weak_learner
        self.n_candidates = n_candidates
        self.n_thresholds = n_thresholds
        self.bootstrap = bootstrap
        self.max_samples = max_samples
        self.min_samples_split = min_samples_split
        self.min_samples_leaf = min_samples_leaf
        self.min_gain = min_gain
        self.random_state = random_state
        self.n_jobs = n_jobs


    def fit(self, X, y=None, sample_weight=None) -> DensityForest:
        """Grow the forest on unlabelled X (n_samples, n_features); `y` is ignored. With "auto" settings, small
        forests on four fifths of X choose them first (`selection_`)."""
        X, sw = self._prepare_fit(X, sample_weight)
        check_params(self)
        if self.leaf_support == "cell" and self.mixture_steps not in ("auto", 0):
            raise InvalidInputError("mixture_steps refits leaves that spread over the whole space; it needs "
                                    "leaf_support='space' or 'auto'")
        depth, floor, support, steps, selection = self._choose_settings(X, sw)
        self._fit_with(X, sw, depth, floor, support, steps)
        self.depths_ = np.full(self.forest_.n_trees, -1 if depth is None else depth, dtype=np.int64)
        self.variance_floor_ = float(floor)
        self.selection_ = selection
        return self

    def _choose_settings(self, X: np.ndarray, sw: np.ndarray) -> tuple[int | None, float, str, int, dict]:
        """(depth, relative variance floor, leaf support, EM steps, validation scores) for the final forest."""
        auto_depth, auto_floor = self.max_depth == "auto", self.variance_floor == "auto"
        floor = DEFAULT_FLOOR if auto_floor else float(self.variance_floor)
        supports = LEAF_SUPPORTS if self.leaf_support == "auto" else (self.leaf_support,)
        auto_steps = self.mixture_steps == "auto"
        given_steps = 0 if auto_steps else int(self.mixture_steps)
        if not (auto_depth or auto_floor or len(supports) > 1 or (auto_steps and "space" in supports)):
            return self.max_depth, floor, supports[0], given_steps if supports[0] == "space" else 0, {}
        n = X.shape[0]
        n_val = max(1, round(VALIDATION_SHARE * n))
        if n - n_val < 2 * self.min_samples_leaf:
            raise InvalidInputError(f"choosing the depth needs more than {2 * self.min_samples_leaf + n_val} points "
                                    f"(got {n}); give max_depth and variance_floor")
        rng = np.random.default_rng(self.random_state)
        perm = rng.permutation(n)
        val, fit = perm[:n_val], perm[n_val:]
        seed = int(rng.integers(2**31))

        def small_forest(depth: int | None, rel_floor: float, support: str) -> DensityForest:
            probe = DensityForest(min(int(self.n_trees), AUTO_TREES), max_depth=depth, variance_floor=rel_floor,
                                  leaf_support=support, mixture_steps=0,
                                  **{k: getattr(self, k) for k in ("weak_learner", "n_candidates", "n_thresholds",
                                                                   "bootstrap", "max_samples", "min_samples_split",
                                                                   "min_samples_leaf", "min_gain", "n_jobs")},
                                  random_state=seed)
            return probe.fit(X[fit], sample_weight=sw[fit])

        def held_out(probe: DensityForest, kind: str, leaves: np.ndarray | None = None) -> float:
            return float(np.average(probe._score_as(X[val], kind, leaves), weights=sw[val]))

        def score(depth: int | None, rel_floor: float, kinds: tuple[str, ...]) -> tuple[dict[str, float], int]:
            """Validation mean log-likelihood of a small forest under each leaf support in `kinds` (one forest
            serves them all), and the depth its trees reached."""
            probe = small_forest(depth, rel_floor, "cell" if "cell" in kinds else "space")
            leaves = probe._apply_checked(X[val])
            return {kind: held_out(probe, kind, leaves) for kind in kinds}, int(probe.forest_.depth.max())

        def mixture_scores(depth: int | None, rel_floor: float, upto: int) -> dict[int, float]:
            """Validation log-likelihood of a small "space" forest after 0 and each of MIXTURE_STEPS EM steps
            (those up to `upto`)."""
            probe = small_forest(depth, rel_floor, "space")
            scores = {0: held_out(probe, "space")}
            for k in range(1, upto + 1):
                probe._refit_mixtures(X[fit], sw[fit], 1)
                if k in MIXTURE_STEPS or k == upto:
                    scores[k] = held_out(probe, "space")
            return scores

        selection: dict = {}
        if auto_depth:  # each support's depths from 1 up until it was worse twice, or the trees stopped growing
            tried: dict[str, dict[int, float]] = {kind: {} for kind in supports}
            since = dict.fromkeys(supports, 0)
            active = supports
            for d in range(1, AUTO_MAX_DEPTH + 1):
                lls, reached = score(d, floor, active)
                for kind, ll in lls.items():
                    since[kind] = 0 if ll > max(tried[kind].values(), default=-np.inf) else since[kind] + 1
                    tried[kind][d] = ll
                active = tuple(kind for kind in supports if since[kind] < AUTO_PATIENCE)
                if not active or reached < d:
                    break
            depths = {kind: max(tried[kind], key=tried[kind].get) for kind in supports}
        else:
            lls = score(self.max_depth, floor, supports)[0]
            tried = {kind: {-1 if self.max_depth is None else self.max_depth: lls[kind]} for kind in supports}
            depths = dict.fromkeys(supports, self.max_depth)
        support = max(supports, key=lambda kind: max(tried[kind].values()))
        depth = depths[support]
        floors = {floor: max(tried[support].values())}
        if auto_floor:  # tenfold steps from the default, down while the score rises, else up while it rises
            for step in (0.1, 10.0):
                current = floor
                while FLOOR_RANGE[0] <= current * step <= FLOOR_RANGE[1]:
                    floors[current * step] = score(depth, current * step, (support,))[0][support]
                    if floors[current * step] <= floors[current]:
                        break
                    current *= step
                if current != floor:
                    break
            chosen = max(floors, key=floors.get)
            if auto_depth and chosen != floor:  # the depth again at the new floor, one step either way
                tried_again = {depth: floors[chosen]}
                for d in (depth + 1, depth - 1):
                    if d >= 1:
                        tried_again[d] = score(d, chosen, (support,))[0][support]
                depth = max(tried_again, key=tried_again.get)
                selection["depth_at_floor"] = tried_again
            floor = chosen
        steps = given_steps if support == "space" else 0
        if support == "space" and auto_steps:  # EM steps at the chosen depth and floor, then the depth again
            by_steps = mixture_scores(depth, floor, max(MIXTURE_STEPS))
            steps = max(by_steps, key=by_steps.get)
            selection["mixture_steps"] = by_steps
            if steps and auto_depth:
                again = {depth: by_steps[steps]}
                for d in (depth + 1, depth - 1):
                    if d >= 1:
                        again[d] = mixture_scores(d, floor, steps)[steps]
                depth = max(again, key=again.get)
                selection["depth_with_mixture"] = again
        if auto_depth:
            selection["depth"] = tried[support]
        if auto_floor:
            selection["floor"] = floors
        if len(supports) > 1:
            selection.update({f"depth:{kind}": tried[kind] for kind in supports})
        return depth, floor, support, steps, selection

    def _fit_with(self, X: np.ndarray, sw: np.ndarray, depth: int | None, floor: float, support: str,
                  steps: int = 0) -> None:
        """Grow the trees at `depth` with the relative variance `floor` and set the leaves' densities with their
        Gaussians on `support`, refitted by `steps` EM steps on "space"."""
        X64 = X.astype(np.float64)
        objective = Objective.regression(X64, "gaussian", relative_floor=floor)
        given = self.max_depth
        self.max_depth = depth  # the growth settings read it
        try:
            grown = self._grow(X, objective, sw)
        finally:
            self.max_depth = given
        mean, cov = self._input_gaussians(grown, X64, objective)
        f = self.forest_
        if grown.position_weights is None:
            leaf_w = (grown.leaf_end - grown.leaf_start).astype(np.float64)
        else:
            csum = np.concatenate([[0.0], np.cumsum(grown.position_weights, dtype=np.float64)])
            leaf_w = csum[grown.leaf_end] - csum[grown.leaf_start]
        tree_w = np.bincount(f.leaf_tree, weights=leaf_w, minlength=f.n_trees)
        self.leaf_mean_ = mean
        self.leaf_cov_ = cov
        self.leaf_share_ = leaf_w / tree_w[f.leaf_tree]
        self.leaf_support_ = support
        self._floor = float(objective.reg[0])  # the floor in the data's units, for EM steps
        self._set_partition()
        self.mixture_steps_ = steps if support == "space" else 0
        if self.mixture_steps_:
            self._refit_mixtures(X, sw, self.mixture_steps_)

    def _tree_start(self) -> np.ndarray:
        """(T + 1,) int64: tree t's leaves are tree_start[t]:tree_start[t + 1] (leaves are numbered tree by tree)."""
        return np.searchsorted(self.forest_.leaf_tree, np.arange(self.forest_.n_trees + 1)).astype(np.int64)

    def _refit_mixtures(self, X: np.ndarray, sw: np.ndarray, steps: int) -> None:
        """`steps` EM steps on every tree's leaves ("space" support) over the checked training points X."""
        own = self._apply_checked(X)
        with numba_threads(self.n_jobs):
            refit_leaf_mixtures(np.ascontiguousarray(X, dtype=np.float64), np.asarray(sw, dtype=np.float64), own,
                                self.leaf_mean_, self.leaf_cov_, self.leaf_share_, self._tree_start(), self._floor,
                                steps)
        self._prepare_density()

    # -- partition function -------------------------------------------------------------------------------
    def _set_partition(self) -> None:
        """Each leaf's Gaussian mass in its cell and each tree's normaliser Z_t (both 1 on the "space" support)."""
        f = self.forest_
        d = self.n_features_in_
        if self.weak_learner == "axis":
            self.cell_lo_, self.cell_hi_ = axis_cells(f, d)
        if self.leaf_support_ == "space":
            mass, mass_se = np.ones(f.n_leaves), np.zeros(f.n_leaves)
        elif self.weak_learner == "axis":
            with numba_threads(self.n_jobs):
                mass, mass_se = box_masses(self.leaf_mean_, self.leaf_cov_, self.cell_lo_, self.cell_hi_)
        else:
            mass, mass_se = self._monte_carlo_mass(np.random.default_rng(self.random_state))
        z = np.bincount(f.leaf_tree, weights=self.leaf_share_ * mass, minlength=f.n_trees)
        if self.leaf_support_ == "space":
            z = np.ones(f.n_trees)  # the shares' sum, exactly
        self.leaf_mass_ = mass
        self.partition_ = z
        self.partition_error_ = np.sqrt(np.bincount(f.leaf_tree, weights=(self.leaf_share_ * mass_se) ** 2,
                                                    minlength=f.n_trees))
        self._prepare_density()

    def _monte_carlo_mass(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Share of each leaf's Gaussian that falls in its own cell, from MC_SAMPLES draws per leaf. A leaf's draws
        descend its own tree only, tree by tree, so memory follows one tree's leaves (all draws through all trees
        would take n_leaves x MC_SAMPLES x T leaf ids: 25 GB for 100 trees of 170 leaves)."""
        f = self.forest_
        d = self.n_features_in_
        chol = np.linalg.cholesky(self.leaf_cov_)
        mass = np.empty(f.n_leaves)
        for t in range(f.n_trees):
            own = np.flatnonzero(f.leaf_tree == t)
            z = rng.standard_normal((own.size, MC_SAMPLES, d))
            pts = self.leaf_mean_[own][:, None, :] + np.einsum("lab,lmb->lma", chol[own], z)
            flat = np.ascontiguousarray(pts.reshape(-1, d), dtype=np.float32)
            with numba_threads(self.n_jobs):
                reached = self.family_.apply(flat, f, trees=np.array([t]))[:, 0]
            mass[own] = (reached.reshape(own.size, MC_SAMPLES) == own[:, None]).mean(axis=1)
        return mass, np.sqrt(mass * (1 - mass) / MC_SAMPLES)

    def _prepare_density(self) -> None:
        chol = np.linalg.cholesky(self.leaf_cov_)
        self._chol_inv = np.ascontiguousarray(np.linalg.inv(chol))
        self._logdet = 2 * np.log(np.diagonal(chol, axis1=1, axis2=2)).sum(axis=1)

    def _log_norm(self, support: str) -> np.ndarray:
        """log(pi_l / Z_t) - 0.5 log det Lambda_l - d/2 log(2 pi) per leaf, on `support` (Z_t = 1 on "space")."""
        z = 0.0 if support == "space" else np.log(self.partition_[self.forest_.leaf_tree])
        with np.errstate(divide="ignore"):
            return (np.log(self.leaf_share_) - z - 0.5 * self._logdet
                    - 0.5 * self.n_features_in_ * math.log(2 * math.pi))

    # -- queries ------------------------------------------------------------------------------------------
    def score_samples(self, X) -> np.ndarray:
        """log p(v) per sample, shape (n_samples,) (eq. 5.6)."""
        return self._score_as(self._checked_input(X), self.leaf_support_)

    def _score_as(self, X: np.ndarray, support: str, leaves: np.ndarray | None = None) -> np.ndarray:
        """log p(v) of checked X with the leaves' Gaussians on `support` ("space" needs no masses; "cell" needs
        the forest's own); `leaves`: X's leaf in every tree, when known."""
        leaves = self._apply_checked(X) if leaves is None else leaves
        X64 = np.ascontiguousarray(X, dtype=np.float64)
        with numba_threads(self.n_jobs):
            if support == "cell":
                return _log_density(leaves, X64, self.leaf_mean_, self._chol_inv, self._log_norm("cell"))
            return _space_log_density(leaves, X64, self.leaf_mean_, self._chol_inv, self._log_norm("space"),
                                      self._tree_start())

    def score(self, X, y=None) -> float:
        """Mean log-likelihood of X."""
        return float(np.mean(self.score_samples(X)))

    def sample(self, n_samples: int = 1, random_state=None) -> np.ndarray:
        """Draw (n_samples, n_features) points from p(v).

        Alg. 5.1 with the exact leaf probabilities: a tree uniformly, then leaf l with probability
        pi_l m_l / Z_t (the leaf's share of p_t), then its Gaussian truncated to the cell (by rejection); on the
        "space" support (m_l = Z_t = 1) the leaf by pi_l, then its Gaussian.
        """
        self.check_fitted()
        if not isinstance(n_samples, (int, np.integer)) or n_samples < 1:
            raise InvalidInputError(f"n_samples must be a positive integer, got {n_samples!r}")
        rng = np.random.default_rng(random_state)
        f = self.forest_
        weight = self.leaf_share_ * self.leaf_mass_ / self.partition_[f.leaf_tree]
        trees = rng.integers(0, f.n_trees, n_samples)
        # Leaves are numbered tree by tree, so "tree index + cumulative weight within the tree" rises monotonically
        # over all leaves, and one search places every draw in its tree's leaf.
        tree_total = np.bincount(f.leaf_tree, weights=weight, minlength=f.n_trees)
        within = np.cumsum(weight) - np.repeat(np.cumsum(tree_total) - tree_total, np.bincount(f.leaf_tree,
                                                                                            minlength=f.n_trees))
        key = f.leaf_tree + within / np.maximum(tree_total[f.leaf_tree], 1e-300)
        leaves = np.searchsorted(key, trees + rng.random(n_samples), side="right")
        leaves = np.minimum(leaves, np.searchsorted(f.leaf_tree, trees, side="right") - 1)
        return self._draw_in_cells(leaves, rng)

    def _draw_in_cells(self, leaves: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        chol = np.linalg.cholesky(self.leaf_cov_)
        out = np.empty((leaves.size, self.n_features_in_))
        todo = np.arange(leaves.size)
        for _ in range(10_000):  # rejection rounds; leaves are chosen by in-cell mass, so acceptance is high
            z = rng.standard_normal((todo.size, self.n_features_in_))
            cand = self.leaf_mean_[leaves[todo]] + np.einsum("nab,nb->na", chol[leaves[todo]], z)
            ok = self._in_cell(cand, leaves[todo])
            out[todo[ok]] = cand[ok]
            todo = todo[~ok]
            if todo.size == 0:
                return out
        raise RuntimeError("sampling did not converge: a leaf cell holds almost none of its Gaussian")

    def _in_cell(self, pts: np.ndarray, leaves: np.ndarray) -> np.ndarray:
        if self.leaf_support_ == "space":  # the leaf's Gaussian is not truncated
            return np.ones(pts.shape[0], dtype=bool)
        if self.weak_learner == "axis":
            return np.all((pts > self.cell_lo_[leaves]) & (pts <= self.cell_hi_[leaves]), axis=1)
        reached = self._apply_checked(np.ascontiguousarray(pts, dtype=np.float32))
        return reached[np.arange(pts.shape[0]), self.forest_.leaf_tree[leaves]] == leaves

    # -- marginals ------------------------------------------------------------------------------------------
    def score_marginal(self, X, dims) -> np.ndarray:
        """log p(v_S) of the features S = `dims`, the others integrated out: shape (n_samples,).

        Parameters
        ----------
        X : (n_samples, len(dims)) values of those features, in the order of `dims`
        dims : distinct feature indices

        On "space" leaves each leaf's Gaussian marginal is exact (its sub-mean and sub-covariance). In axis-aligned
        cells a leaf adds its Gaussian's marginal where v_S lies in the cell's sides along S, times the mass the
        conditional Gaussian of the other features puts between the cell's other sides (box masses, as for the
        cells' normalisers): one per (point, leaf) pair whose cell the point's v_S falls in, so a cell forest's
        marginal costs far more than a "space" forest's (3,000 points of a 6-D, 100-tree forest of depth 7, two
        features kept: 37 s against 0.2 s). Oblique and conic cells have no such sides (InvalidInputError).
        """
        self.check_fitted()
        d = self.n_features_in_
        keep = np.asarray(dims)
        if (keep.ndim != 1 or keep.size == 0 or keep.dtype.kind not in "iu" or np.any(keep < 0) or np.any(keep >= d)
                or np.unique(keep).size != keep.size):
            raise InvalidInputError(f"dims must be distinct feature indices in 0..{d - 1}, got {dims!r}")
        X64 = check_matrix(X, n_features=keep.size).astype(np.float64)
        rest = np.setdiff1d(np.arange(d), keep)
        if rest.size == 0:
            full = np.empty_like(X64)
            full[:, keep] = X64
            return self.score_samples(full)
        if self.leaf_support_ != "space" and self.weak_learner != "axis":
            raise InvalidInputError("marginals need axis-aligned cells (weak_learner='axis') or leaves on the "
                                    "whole space (leaf_support='space')")
        f = self.forest_
        mu_s = np.ascontiguousarray(self.leaf_mean_[:, keep])
        cov_ss = self.leaf_cov_[:, keep][:, :, keep]
        chol = np.linalg.cholesky(cov_ss)
        chol_inv = np.ascontiguousarray(np.linalg.inv(chol))
        logdet = 2 * np.log(np.diagonal(chol, axis1=1, axis2=2)).sum(axis=1)
        z = 0.0 if self.leaf_support_ == "space" else np.log(self.partition_[f.leaf_tree])
        with np.errstate(divide="ignore"):
            log_base = np.log(self.leaf_share_) - z - 0.5 * logdet - 0.5 * keep.size * math.log(2 * math.pi)
        if self.leaf_support_ == "space":
            tree_start = self._tree_start()  # each tree's first leaf starts the bound: any leaf will do
            first = np.broadcast_to(tree_start[:-1], (X64.shape[0], f.n_trees))
            with numba_threads(self.n_jobs):
                return _space_log_density(np.ascontiguousarray(first), X64, mu_s, chol_inv, log_base, tree_start)
        return self._cell_marginal(X64, keep, rest, mu_s, chol_inv, log_base)

    def _cell_marginal(self, X64, keep, rest, mu_s, chol_inv, log_base, chunk: int = 256) -> np.ndarray:
        """`score_marginal` in axis-aligned cells, points in chunks (a chunk's (point, leaf) pairs at once);
        `chol_inv` is the inverse Cholesky factor of the kept features' covariances, so Sigma_SS^-1 = L^-T L^-1."""
        cov = self.leaf_cov_
        cov_rs = cov[:, rest][:, :, keep]
        gain = np.einsum("lrk,lmk,lmj->lrj", cov_rs, chol_inv, chol_inv)  # Sigma_RS Sigma_SS^-1
        cond_cov = cov[:, rest][:, :, rest] - np.einsum("lrk,lqk->lrq", gain, cov_rs)
        cond_cov = 0.5 * (cond_cov + cond_cov.transpose(0, 2, 1))
        lo_s, hi_s = self.cell_lo_[:, keep], self.cell_hi_[:, keep]
        def log_sum(x: np.ndarray, point: np.ndarray, leaf: np.ndarray, base: np.ndarray) -> np.ndarray:
            """log of the sum over the (point, leaf) pairs of each point's terms (its base term times the leaf's
            conditional mass): (len(x),)."""
            diff = x[point] - mu_s[leaf]
            with numba_threads(self.n_jobs):
                mass, _ = box_masses(self.leaf_mean_[leaf][:, rest] + np.einsum("prk,pk->pr", gain[leaf], diff),
                                     cond_cov[leaf], self.cell_lo_[leaf][:, rest], self.cell_hi_[leaf][:, rest])
            with np.errstate(divide="ignore"):
                term = base + np.log(mass)
            top = np.full(x.shape[0], -np.inf)
            np.maximum.at(top, point, term)
            finite = np.isfinite(top)
            total = np.zeros(x.shape[0])
            np.add.at(total, point, np.exp(term - np.where(finite, top, 0.0)[point]))
            with np.errstate(divide="ignore"):
                return np.where(finite, top + np.log(np.maximum(total, 1e-300)), -np.inf)

        out = np.empty(X64.shape[0])
        for c0 in range(0, X64.shape[0], chunk):
            x = X64[c0:c0 + chunk]
            inside = np.all((x[:, None, :] > lo_s[None]) & (x[:, None, :] <= hi_s[None]), axis=2)
            point, leaf = np.nonzero(inside)
            q = np.einsum("pab,pb->pa", chol_inv[leaf], x[point] - mu_s[leaf])
            base = log_base[leaf] - 0.5 * np.sum(q * q, axis=1)  # a term before its mass (<= 1): a bound
            best = np.full(x.shape[0], -np.inf)
            np.maximum.at(best, point, base)
            # Masses only where the bound is within NEGLIGIBLE_LOG of the point's best; a point whose terms then
            # all fall far below that best (its best leaves' conditional masses vanish) takes every pair.
            near = base >= best[point] - NEGLIGIBLE_LOG
            got = log_sum(x, point[near], leaf[near], base[near])
            redo = np.flatnonzero(got < best - 0.5 * NEGLIGIBLE_LOG)
            if redo.size:
                again = np.isin(point, redo)
                got[redo] = log_sum(x, point[again], leaf[again], base[again])[redo]
            out[c0:c0 + chunk] = got
        return out - math.log(self.forest_.n_trees)

    # -- conditionals (axis-aligned forests, eq. 5.10, Alg. 5.3) ----------------------------------------------
    def _conditional_parts(self, x_values, y_dim: int):
        """Per query and leaf: weight, conditional mean and sd, and the cell's y-interval.

        The weight is the leaf's share of the joint density along the line {x = x*}:
        pi_l / Z_t * N(x*; mu_x, Sigma_xx), nonzero only where x* lies in the cell.
        """
        self.check_fitted()
        space = self.leaf_support_ == "space"
        if self.weak_learner != "axis" and not space:
            raise InvalidInputError("conditionals need axis-aligned cells (weak_learner='axis') or leaves on the "
                                    "whole space (leaf_support='space')")
        d = self.n_features_in_
        if not 0 <= y_dim < d or d < 2:
            raise InvalidInputError(f"y_dim must index one of the {d} features, and there must be at least two")
        xs = [k for k in range(d) if k != y_dim]
        x = np.atleast_2d(np.asarray(x_values, dtype=np.float64))
        if x.shape[1] != len(xs) or not np.all(np.isfinite(x)):
            raise InvalidInputError(f"x_values must be finite with {len(xs)} columns (every feature but y_dim)")
        mu, cov = self.leaf_mean_, self.leaf_cov_
        sxx = cov[:, xs][:, :, xs]
        sxy = cov[:, xs, y_dim]
        gain = np.linalg.solve(sxx, sxy[..., None])[..., 0]                      # (L, dx)
        sd = np.sqrt(np.maximum(cov[:, y_dim, y_dim] - np.einsum("lk,lk->l", gain, sxy), 1e-300))
        diff = x[:, None, :] - mu[None, :, xs]                                    # (m, L, dx)
        cond_mean = mu[None, :, y_dim] + np.einsum("mlk,lk->ml", diff, gain)
        chol = np.linalg.cholesky(sxx)
        z = np.linalg.solve(chol[None], diff[..., None])[..., 0]
        log_marg = (-0.5 * np.sum(z * z, axis=-1) - np.log(np.diagonal(chol, axis1=1, axis2=2)).sum(1)
                    - 0.5 * len(xs) * math.log(2 * math.pi))
        if space:  # every leaf's Gaussian reaches every point
            lo = np.full((mu.shape[0], d), -np.inf)
            hi = np.full((mu.shape[0], d), np.inf)
        else:
            lo, hi = self.cell_lo_, self.cell_hi_
        inside = np.all((x[:, None, :] > lo[None, :, xs]) & (x[:, None, :] <= hi[None, :, xs]), axis=2)
        share = self.leaf_share_ / self.partition_[self.forest_.leaf_tree]
        weight = np.where(inside, share[None] * np.exp(log_marg), 0.0)
        return weight, cond_mean, sd, lo[:, y_dim], hi[:, y_dim]

    def conditional_pdf(self, x_values, y_grid, y_dim: int = -1) -> np.ndarray:
        """p(y | x = x*) of an axis-aligned density forest (eq. 5.10), conditioning on every feature but `y_dim`.

        Parameters
        ----------
        x_values : (m, n_features - 1) values of the other features
        y_grid : (G,) values of feature `y_dim`

        Returns
        -------
        (m, G) conditional densities; rows integrate to 1
        """
        y_dim = y_dim % self.n_features_in_
        w, mean, sd, lo, hi = self._conditional_parts(x_values, y_dim)
        mass = stats.norm.cdf(hi[None], mean, sd) - stats.norm.cdf(lo[None], mean, sd)
        z = np.sum(w * mass, axis=1, keepdims=True)
        y = np.asarray(y_grid, dtype=np.float64)
        inside = (y[None, None, :] > lo[None, :, None]) & (y[None, None, :] <= hi[None, :, None])
        dens = np.where(inside, stats.norm.pdf(y[None, None, :], mean[..., None], sd[None, :, None]), 0.0)
        return np.einsum("ml,mlg->mg", w, dens) / np.maximum(z, 1e-300)

    def sample_conditional(self, x_values, n_samples: int, y_dim: int = -1, random_state=None) -> np.ndarray:
        """Draw y ~ p(y | x = x*) (Alg. 5.3): a leaf by its share of the conditional, then its Gaussian
        conditional truncated to the cell, by inverse CDF. Returns (m, n_samples)."""
        y_dim = y_dim % self.n_features_in_
        w, mean, sd, lo, hi = self._conditional_parts(x_values, y_dim)
        rng = np.random.default_rng(random_state)
        c_lo = stats.norm.cdf(lo[None], mean, sd)
        c_hi = stats.norm.cdf(hi[None], mean, sd)
        p = w * (c_hi - c_lo)
        if np.any(p.sum(axis=1) <= 0):
            raise InvalidInputError("an x value lies where the forest has no density")
        p /= p.sum(axis=1, keepdims=True)
        out = np.empty((p.shape[0], n_samples))
        for i in range(p.shape[0]):  # one vectorised draw per query point
            leaves = rng.choice(p.shape[1], size=n_samples, p=p[i])
            u = c_lo[i, leaves] + rng.random(n_samples) * (c_hi[i, leaves] - c_lo[i, leaves])
            out[i] = mean[i, leaves] + sd[leaves] * stats.norm.ppf(np.clip(u, 1e-300, 1 - 1e-16))
        return out

    # -- model files --------------------------------------------------------------------------------------
    def leaf_arrays(self) -> dict[str, np.ndarray]:
        arrays = {"leaf.mean": self.leaf_mean_, "leaf.cov": self.leaf_cov_, "leaf.share": self.leaf_share_,
                  "leaf.mass": self.leaf_mass_, "tree.partition": self.partition_,
                  "tree.partition_error": self.partition_error_}
        if self.weak_learner == "axis":
            arrays.update({"leaf.cell_lo": self.cell_lo_, "leaf.cell_hi": self.cell_hi_})
        arrays["tree.chosen_depth"] = self.depths_
        return arrays

    def extra_metadata(self) -> dict:
        return {"variance_floor": self.variance_floor_, "leaf_support": self.leaf_support_,
                "mixture_steps": self.mixture_steps_,
                "selection": {kind: [[k, v] for k, v in scores.items()] for kind, scores in self.selection_.items()}}

    def restore_leaves(self, meta: dict, arrays: dict[str, np.ndarray]) -> None:
        L, T, d = self.forest_.n_leaves, self.forest_.n_trees, self.n_features_in_
        shapes = {"leaf.mean": (L, d), "leaf.cov": (L, d, d), "leaf.share": (L,), "leaf.mass": (L,),
                  "tree.partition": (T,), "tree.partition_error": (T,)}
        if self.weak_learner == "axis":
            shapes.update({"leaf.cell_lo": (L, d), "leaf.cell_hi": (L, d)})
        for key, shape in shapes.items():
            if key not in arrays or arrays[key].shape != shape:
                raise ModelFormatError(f"array '{key}' is missing or has the wrong shape")
        self.leaf_mean_ = np.ascontiguousarray(arrays["leaf.mean"], np.float64)
        self.leaf_cov_ = np.ascontiguousarray(arrays["leaf.cov"], np.float64)
        self.leaf_share_ = arrays["leaf.share"].astype(np.float64)
        self.leaf_mass_ = arrays["leaf.mass"].astype(np.float64)
        self.partition_ = arrays["tree.partition"].astype(np.float64)
        self.partition_error_ = arrays["tree.partition_error"].astype(np.float64)
        if self.weak_learner == "axis":
            self.cell_lo_, self.cell_hi_ = arrays["leaf.cell_lo"], arrays["leaf.cell_hi"]
        depths = arrays.get("tree.chosen_depth")
        if depths is None:  # a file from before the depth was chosen: each tree's depth as grown
            depths = np.zeros(T, dtype=np.int64)
            np.maximum.at(depths, self.forest_.leaf_tree, self.forest_.depth[self.forest_.leaf_node])
        elif depths.shape != (T,) or depths.dtype.kind != "i":
            raise ModelFormatError("array 'tree.chosen_depth' must hold one integer per tree")
        self.depths_ = depths.astype(np.int64)
        floor = meta.get("variance_floor", DEFAULT_FLOOR)
        if not isinstance(floor, (int, float)) or not 0 < floor <= 1:
            raise ModelFormatError(f"variance_floor must be a number in (0, 1], got {floor!r}")
        self.variance_floor_ = float(floor)
        support = meta.get("leaf_support", "cell")  # files from before the support was chosen: cells
        if support not in LEAF_SUPPORTS:
            raise ModelFormatError(f"leaf_support must be one of {LEAF_SUPPORTS}, got {support!r}")
        if support == "space" and (not np.all(self.leaf_mass_ == 1.0) or not np.all(self.partition_ == 1.0)):
            raise ModelFormatError("leaves on the whole space have unit masses and normalisers")
        self.leaf_support_ = support
        steps = meta.get("mixture_steps", 0)  # files from before the EM steps: none
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0 or (steps and support != "space"):
            raise ModelFormatError(f"mixture_steps must be a count >= 0, and 0 unless leaves spread over the whole "
                                   f"space, got {steps!r}")
        self.mixture_steps_ = steps
        selection = meta.get("selection", {})
        try:
            self.selection_ = {str(kind): {k: float(v) for k, v in pairs} for kind, pairs in selection.items()}
        except (AttributeError, TypeError, ValueError):
            raise ModelFormatError("selection must map each setting to [value, score] pairs") from None
        self._prepare_density()

