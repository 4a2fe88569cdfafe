"""The tables a level-wise fit writes and draws: a level's random rows (`LevelRows`), node and leaf columns written
level by level (`_Tables`), and the tests chosen for one level's nodes (`_LevelSplits`)."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np


class LevelRows:
    """A level's random table, n_rows rows of `draw(generator, n)`, as one ``draw(rng, n_rows)`` call makes it.

    With `row_draws` (the 64-bit draws one row takes; None when `draw` cannot be split into pieces) and a PCG64
    generator (numpy's default, which can jump ahead), rows are drawn as chunks ask for them and forgotten once a chunk
    starting further on asks; `rng` itself jumps past the whole table at once, so that later draws, and the model
    bytes, are those of the single call. Chunks must then ask for non-decreasing rows. A deep level of a large fit
    has hundreds of thousands of nodes: its candidates' and thresholds' tables would take gigabytes.
    """

    def __init__(self, rng: np.random.Generator, n_rows: int, draw, row_draws: int | None) -> None:
        self.n_rows, self._draw = n_rows, draw
        bits = rng.bit_generator
        # PCG64's jump counts 64-bit outputs, one per float64 uniform (Philox's counts blocks of four)
        if row_draws is not None and isinstance(bits, (np.random.PCG64, np.random.PCG64DXSM)):
            self._source = np.random.Generator(copy.deepcopy(bits))
            self._row_draws = int(row_draws)
            bits.advance(n_rows * self._row_draws)
            self._table = None
        else:
            self._source = None
            self._table = draw(rng, n_rows)
        self._first = 0  # row index of _rows[0]
        self._rows = None

    def whole(self) -> np.ndarray:
        """The whole table (when lazy, only before any `rows` call)."""
        if self._table is None:
            if self._rows is not None:
                raise RuntimeError("LevelRows.whole after rows")
            self._table = self._draw(self._source, self.n_rows)
        return self._table

    def rows(self, sets: np.ndarray) -> np.ndarray:
        """Rows `sets`, non-decreasing from one call to the next when lazy."""
        if self._table is not None:
            return self._table[sets]
        first, stop = int(sets[0]), int(sets[-1]) + 1
        if first < self._first:
            raise RuntimeError("LevelRows asked out of order")
        have = self._first if self._rows is None else self._first + self._rows.shape[0]
        keep = None if self._rows is None or first >= have else self._rows[first - self._first:]
        if first > have:  # rows nobody asks for still advance the source
            self._source.bit_generator.advance((first - have) * self._row_draws)
            have = first
        if stop > have:
            fresh = self._draw(self._source, stop - have)
            keep = fresh if keep is None else np.concatenate([keep, fresh])
        self._first, self._rows = first, keep
        return self._rows[sets - first]


class _Tables:
    """Named columns written level by level at known offsets, read back as their first n rows.

    Allocated once at an upper bound of the forest's size: pages a fit never writes are never touched, and the
    final arrays are views, not a concatenation of per-level pieces (on millions of nodes, writing every array
    twice cost about 0.5 s, mostly first-touch page faults). Columns grow by doubling should the bound be passed.
    """

    def __init__(self, capacity: int, **columns: Any) -> None:
        self.columns: dict[str, np.ndarray] = {}
        for name, spec in columns.items():
            dtype, width = spec if isinstance(spec, tuple) else (spec, None)
            shape = (capacity,) if width is None else (capacity, width)
            self.columns[name] = np.empty(shape, dtype=dtype)

    def put(self, offset: int, **values: Any) -> None:
        """Write each column's rows offset.. from `values` (arrays, or a scalar for the whole slice)."""
        n = max(np.shape(v)[0] for v in values.values() if np.ndim(v))
        for name, column in self.reserve(offset + n).items():
            column[offset:offset + n] = values[name]

    def head(self, n: int) -> dict[str, np.ndarray]:
        return {name: column[:n] for name, column in self.columns.items()}

    def reserve(self, n: int) -> dict[str, np.ndarray]:
        """The columns, grown (by doubling) to hold at least n rows, for a kernel to write in place."""
        for name, column in self.columns.items():
            if n > column.shape[0]:
                grown = np.empty((max(2 * column.shape[0], n), *column.shape[1:]), dtype=column.dtype)
                grown[:column.shape[0]] = column
                self.columns[name] = grown
        return self.columns


@dataclass
class _LevelSplits:
    """The tests chosen for one level's nodes (n_front of them): whether each splits, how many of its points
    go left, the weak learner's parameter row, the thresholds of the test thr_lo < f <= thr_hi and the gain."""

    split: np.ndarray
    n_left: np.ndarray
    params: np.ndarray
    thr_lo: np.ndarray
    thr_hi: np.ndarray
    gain: np.ndarray

    @classmethod
    def empty(cls, n_front: int, param_width: int) -> _LevelSplits:
        return cls(np.zeros(n_front, dtype=bool), np.zeros(n_front, dtype=np.int64),
                   np.zeros((n_front, param_width)), np.full(n_front, -np.inf, dtype=np.float32),
                   np.full(n_front, np.inf, dtype=np.float32), np.zeros(n_front, dtype=np.float32))

    def record(self, nodes: np.ndarray, ok: np.ndarray, n_left: np.ndarray, params: np.ndarray, lo: np.ndarray,
               hi: np.ndarray, gain: np.ndarray) -> None:
        """Store the best test of each of `nodes`; nodes where `ok` is False stay leaves."""
        self.split[nodes] = ok
        self.n_left[nodes] = n_left
        self.params[nodes] = np.where(ok[:, None], params, 0.0)
        self.thr_lo[nodes] = np.where(ok, lo, -np.inf)
        self.thr_hi[nodes] = np.where(ok, hi, np.inf)
        self.gain[nodes] = np.where(ok, gain, 0.0)
