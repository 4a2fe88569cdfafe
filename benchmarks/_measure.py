"""Timing and peak-memory helpers shared by the benchmarks (not a test: numbers are printed, not asserted)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    """Resident set size of this process, from /proc (numba's allocations are invisible to tracemalloc)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * _PAGE


def measure(fn: Callable[[], Any], interval: float = 0.005) -> tuple[Any, float, int]:
    """Run fn(); return (result, seconds, peak RSS growth in bytes above the level at the start)."""
    base = rss_bytes()
    peak = [base]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], rss_bytes())
            time.sleep(interval)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.perf_counter()
    try:
        result = fn()
    finally:
        elapsed = time.perf_counter() - t0
        done.set()
        sampler.join()
    peak[0] = max(peak[0], rss_bytes())
    return result, elapsed, peak[0] - base


def mib(n_bytes: float) -> str:
    return f"{n_bytes / 2**20:7.1f}"


def write_results(path, args, results: dict) -> None:
    """A benchmark's results as JSON: its command-line arguments (as strings) and `results`."""
    import json

    path.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "results": results}, indent=1))
