"""Small pages for a fit's fresh tables.

numpy asks the kernel to back every array of 4 MB or more with transparent huge pages (madvise). Where huge pages
must first be made by compacting memory (the kernel's "defrag = madvise", common on virtual machines), the first
touch of each such page stalls, and the stalls do not overlap across threads. A fit writes hundreds of MB of node
and leaf tables once: on a 2-core virtual machine whose huge pages were never available, placing a 10-class
forest's subtree nodes took 0.44 s with the advice and 0.13 s without (`benchmarks/engine/fit_phases.py`).

`small_pages()` turns the advice off while a fit allocates, and back on when the last concurrent fit ends. A user's
own choice (the NUMPY_MADVISE_HUGEPAGE environment variable) is left alone.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

try:  # numpy >= 2
    from numpy._core.multiarray import _set_madvise_hugepage
except ImportError:  # pragma: no cover - numpy 1.x
    try:
        from numpy.core.multiarray import _set_madvise_hugepage
    except ImportError:
        _set_madvise_hugepage = None

_lock = threading.Lock()
_depth = 0
_saved = True


@contextmanager
def small_pages() -> Iterator[None]:
    """Allocate numpy arrays without the huge-page advice inside the block (nested and concurrent blocks share one
    setting: the advice comes back when the last one ends)."""
    global _depth, _saved
    if _set_madvise_hugepage is None or "NUMPY_MADVISE_HUGEPAGE" in os.environ:
        yield
        return
    with _lock:
        if _depth == 0:
            _saved = _set_madvise_hugepage(False)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                _set_madvise_hugepage(_saved)
