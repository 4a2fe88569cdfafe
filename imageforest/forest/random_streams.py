"""Small per-tree random generators for compiled growth code (splitmix64).

A kernel that grows a tree or a subtree on its own draws from a generator seeded for that tree, so what it grows
does not depend on which thread runs it or in what order.
"""

from __future__ import annotations

import numpy as np

from imageforest.kernels import njit


@njit(cache=True, nogil=True)
def _next_u64(state):  # pragma: no cover - numba
    """splitmix64: the next 64 random bits of a tree's own generator (state: (1,) uint64)."""
    state[0] += np.uint64(0x9E3779B97F4A7C15)
    z = state[0]
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(cache=True, nogil=True)
def _uniform(state):  # pragma: no cover - numba
    """A float in [0, 1) with 53 random bits."""
    return float(_next_u64(state) >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@njit(cache=True, nogil=True)
def _below(state, n):  # pragma: no cover - numba
    """An integer uniform in {0, ..., n - 1} (n >= 1)."""
    return min(int(_uniform(state) * n), n - 1)
