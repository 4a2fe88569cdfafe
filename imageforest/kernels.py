"""numba's ``njit`` with the project's settings, and one line on stderr when kernels are being compiled.

Every kernel of the library and the applications is declared with ``@njit(...)`` from here: machine code is cached
on disk (``cache=True``), so compilation happens once per install. That once can take seconds, and a user who sees
nothing happen thinks the program hangs; the first compilation of one of the project's kernels in a process prints
``imageforest: compiling kernels, once per install ...`` (never when the cache serves them).
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
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


def _writable(folder: Path) -> bool:
    """Whether files can be made in `folder` (or in its nearest existing parent, which would hold it)."""
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return os.access(folder, os.W_OK | os.X_OK)


def cache_folder(package_writable: bool, user_cache: Path | None) -> Path | None:
    """Where numba should cache kernels when its own choices fail: None when the installed package's folder or the
    user's cache folder takes them (numba's defaults), else a private folder under the system's temporary one.
    Without it, a package installed read-only for a user with no home folder stops at its first kernel with
    numba's "cannot cache function" error."""
    if package_writable or (user_cache is not None and _writable(user_cache)):
        return None
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    return Path(tempfile.gettempdir()) / f"imageforest-numba-{uid}"


def _ensure_cache_folder() -> None:
    if numba.config.CACHE_DIR:  # NUMBA_CACHE_DIR: the user chose
        return
    try:
        from numba.misc.appdirs import user_cache_dir

        user = Path(user_cache_dir("numba"))
    except Exception:  # no home folder to derive it from
        user = None
    folder = cache_folder(_writable(Path(__file__).resolve().parent / "__pycache__"), user)
    if folder is not None:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        numba.config.CACHE_DIR = str(folder)


_ensure_cache_folder()

# numba's OpenMP threads spin while they wait for work by default: on a machine whose cores are busy with other
# processes, a spinning thread takes the core its partner needs, and the default two threads ran a body-parts frame
# slower than one (busy 2-core machine, a busy loop on one core: 60-70 ms against 52-72 with one thread; waiting
# passively 46-55 against 49-56). Set before the OpenMP runtime starts; a user's own setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def njit(*args: Any, **options: Any) -> Callable:
    """``numba.njit`` with ``cache=True`` unless told otherwise; used as ``@njit`` or ``@njit(parallel=True)``."""
    options.setdefault("cache", True)
    if args and callable(args[0]):
        return numba.njit(**options)(args[0])
    return numba.njit(*args, **options)
