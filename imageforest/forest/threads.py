"""Parallel loops of the fit and predict paths: serial numba kernels over index ranges, run on Python threads.

numba's ``parallel=True`` compiles a kernel about three times slower than the same loop written serially (the parfor
passes and the generated gufunc), and the first fit in a new environment paid that for every kernel it touched. The
kernels of the common paths are therefore serial, release the GIL (``nogil=True``) and take the range of the outer
loop they cover, ``kernel(i0, i1, *args)``; `run_ranges` splits ``[0, n)`` into one contiguous range per thread
(the static schedule ``prange`` used) and runs them at once. Every kernel writes disjoint slots, so the results,
and a model's bytes, do not depend on the thread count.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numba

_pool: ThreadPoolExecutor | None = None
_pool_workers = 0
_pool_lock = threading.Lock()


def _executor(workers: int) -> ThreadPoolExecutor:
    """The shared pool, grown when a call wants more workers than it has."""
    global _pool, _pool_workers
    with _pool_lock:
        if _pool is None or _pool_workers < workers:
            _pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="imageforest")
            _pool_workers = workers
        return _pool


def n_threads() -> int:
    """Threads a parallel loop may use: numba's setting for this thread (`numba_threads(n_jobs)` sets it)."""
    return max(1, int(numba.get_num_threads()))


def run_ranges(kernel: Callable[..., Any], n: int, *args: Any, min_per_thread: int = 1,
               chunks_per_thread: int = 1) -> None:
    """Run ``kernel(i0, i1, *args)`` over ``[0, n)`` split into contiguous ranges, on every thread at once.

    Parameters
    ----------
    kernel : a ``nogil`` numba kernel looping over ``range(i0, i1)``
    n : iterations of the loop
    min_per_thread : fewest iterations worth a thread of their own (below it a second thread costs more than it
        saves)
    chunks_per_thread : 1 gives each thread one range (the static schedule ``prange`` used); more cut the loop
        into that many ranges per thread, each taken by whichever thread is free next, for loops whose iterations
        differ in cost (a thread held up by the machine then no longer holds the other one up). Which thread runs
        a range never changes what it writes.
    """
    threads = min(n_threads(), max(1, n // max(1, min_per_thread)))
    if threads <= 1:
        if n > 0:
            kernel(0, n, *args)
        return
    n_chunks = min(n, threads * max(1, chunks_per_thread))
    bounds = [c * n // n_chunks for c in range(n_chunks + 1)]
    taken = itertools.count()  # next() on it is atomic under the GIL

    def work() -> None:
        for c in taken:
            if c >= n_chunks:
                return
            kernel(bounds[c], bounds[c + 1], *args)

    pool = _executor(threads - 1)
    futures = [pool.submit(work) for _ in range(1, threads)]
    try:
        work()  # the calling thread works too
    finally:
        for f in futures:
            f.result()
