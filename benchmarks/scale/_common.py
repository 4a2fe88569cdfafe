"""What the scale benchmarks share: the archive's scan list, a local cluster, and peak memory of a process tree."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import psutil


def archive_scans(data: Path, n: int) -> list[Path]:
    """The first `n` `*_ct.nii.gz` scans of `data` (sorted), repeated when the folder holds fewer."""
    scans = sorted(Path(data).glob("*_ct.nii.gz"))
    if not scans:
        raise SystemExit(f"{data}: no *_ct.nii.gz scans (see ../shared/data/README.md)")
    return [scans[k % len(scans)] for k in range(n)]


class TreeMemory:
    """Peak resident memory of this process and all its descendants (Dask workers included), sampled."""

    def __init__(self, interval: float = 0.2) -> None:
        self.interval, self.peak, self._done = interval, 0, threading.Event()

    def _total(self) -> int:
        me = psutil.Process()
        total = 0
        for p in [me, *me.children(recursive=True)]:
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
        return total

    def _run(self) -> None:
        while not self._done.is_set():
            self.peak = max(self.peak, self._total())
            time.sleep(self.interval)

    def __enter__(self) -> TreeMemory:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()
