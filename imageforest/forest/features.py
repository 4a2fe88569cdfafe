"""The feature-family interface the trainer and `apply` talk to.

A feature family is the weak learner's feature map phi(v) with its random parameter source (Criminisi et al.
2012, sec. 2.3.3):
the trainer draws rho candidate parameter rows per node with `sample`, asks `responses` for the responses of the
node's points to those rows, and stores the winning row. It never knows whether the data are vectors, images or
depth maps; a family for images implements the same three methods over its own data object.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from imageforest.forest.leaf_models import tree_average
from imageforest.forest.storage import ForestArrays


class FeatureFamily(ABC):
    """Random feature parameters plus batched responses.

    Attributes
    ----------
    name : str
        Identifier stored in model metadata.
    param_width : int
        Length of one parameter row.
    n_features : int
        Number of input dimensions importances are reported over.
    """

    name: str
    param_width: int
    n_features: int

    @abstractmethod
    def sample(self, rng: np.random.Generator, n_sets: int, n_candidates: int) -> np.ndarray:
        """Draw candidate parameter rows, shape (n_sets, n_candidates, param_width), float64."""

    def sample_draws(self, n_candidates: int) -> int | None:
        """The 64-bit generator draws `sample` takes per set when sets can be drawn in pieces (`sample(rng, a + b,
        rho)` equals `sample(rng, a, rho)` then `sample(rng, b, rho)`), so that the trainer draws a large level's
        candidates chunk by chunk; None (the default) when they cannot."""
        return None

    def training_data(self, data: Any) -> Any:
        """The layout of `data` that `responses` reads fastest; called once per fit (default: unchanged)."""
        return data

    @abstractmethod
    def responses(
        self, data: Any, params: np.ndarray, samples: np.ndarray, pos_set: np.ndarray
    ) -> np.ndarray:
        """Responses of points to their set's candidates.

        Parameters
        ----------
        data : family-specific training data
        params : (n_sets, rho, param_width) float64
        samples : (M,) int32 point index of each position
        pos_set : (M,) int32 which parameter set (node) each position belongs to

        Returns
        -------
        (rho, M) float32, candidate-major
        """

    def response_matrix(self, data: Any) -> np.ndarray | None:
        """When every response is one entry F[row, point] of a matrix of `training_data`, that matrix F.

        Shape (n_rows, n_points) float32, C-contiguous. The trainer then searches splits in one fused pass instead
        of materialising response tables. None (the default) when responses are computed.
        """
        return None

    def point_matrix(self, data: Any) -> np.ndarray | None:
        """`response_matrix`'s transpose, (n_points, n_rows) float32 C-contiguous, when the data as given to the fit
        (before `training_data`) already is it; None (the default) makes the trainer transpose the matrix."""
        return None

    def response_rows(self, params: np.ndarray) -> np.ndarray:
        """The row of `response_matrix` each parameter row reads: (n_sets, rho) int64 from (n_sets, rho, width)."""
        raise NotImplementedError(f"{type(self).__name__} has no response matrix")

    def sample_rows(self, rng: np.random.Generator, n_sets: int, n_candidates: int) -> np.ndarray:
        """``response_rows(sample(rng, n_sets, n_candidates))`` from the same draws, (n_sets, rho) integers; a
        family may draw them without building the parameter rows (a deep level has millions of sets)."""
        return self.response_rows(self.sample(rng, n_sets, n_candidates))

    def row_params(self, rows: np.ndarray) -> np.ndarray:
        """The parameter rows, (m, param_width) float64, of candidates that read `rows` (m,) of the matrix."""
        raise NotImplementedError(f"{type(self).__name__} has no response matrix")

    def prepare_apply(self, forest: ForestArrays) -> None:
        """Build (and cache on `forest`) the traversal table `apply` reads; called at load and at the end of a fit
        (once its working tables are freed). Without the call, the first apply builds it."""
        forest.packed()

    def leaf_average(self, data: Any, forest: ForestArrays, leaf_table: np.ndarray) -> np.ndarray:
        """Mean over trees of the leaf_table rows the points reach: (n_points, k) float64 from (n_leaves, k).

        The default applies, then averages; a family may fuse the two.
        """
        return tree_average(self.apply(data, forest), leaf_table)

    @abstractmethod
    def apply(self, data: Any, forest: ForestArrays) -> np.ndarray:
        """Leaf ids reached by every point in every tree, shape (n_points, n_trees), int32."""

    @abstractmethod
    def importance_dims(self, params: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Input dimensions each parameter row reads and their shares: two (n_rows, k) arrays."""

    @abstractmethod
    def to_spec(self) -> tuple[dict, dict[str, np.ndarray]]:
        """JSON-able description plus arrays needed to rebuild the family from a model file."""
