"""numba's ``njit`` with the project's settings, and one line on stderr when kernels are being compiled.

Every kernel of the library and the applications is declared with ``@njit(...)`` from here: machine code is cached
on disk (``cache=True``), so compilation happens once per install. That once can take seconds, and a user who sees
nothing happen thinks the program hangs; the first compilation of one of the project's kernels in a process prints
``imageforest: compiling kernels, once per install ...`` (never when the cache serves them).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numba
from numba.core import event

NOTICE = "imageforest: compiling kernels, once per install (numba caches them) ..."


class _CompileNotice(event.Listener):
    """Prints `NOTICE` at the first compilation of a project kernel in this process."""

    def __init__(self) -> None:
        self.said = False

    def on_start(self, ev: event.Event) -> None:
        if self.said:
            return
        dispatcher = (ev.data or {}).get("dispatcher")
        module = getattr(getattr(dispatcher, "py_func", None), "__module__", "") or ""
        if module.startswith("imageforest"):
            self.said = True
            print(NOTICE, file=sys.stderr, flush=True)

    def on_end(self, ev: event.Event) -> None:
        pass


_NOTICE = _CompileNotice()
event.register("numba:compile", _NOTICE)


def njit(*args: Any, **options: Any) -> Callable:
    """``numba.njit`` with ``cache=True`` unless told otherwise; used as ``@njit`` or ``@njit(parallel=True)``."""
    options.setdefault("cache", True)
    if args and callable(args[0]):
        return numba.njit(**options)(args[0])
    return numba.njit(*args, **options)
