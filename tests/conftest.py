"""Shared test configuration, and the depth-body renderer for the tests that need renders."""

import importlib
import os
import sys
from pathlib import Path

import pytest

# Keep numba's thread pool small and predictable in CI (2 cores); tests that need other counts set n_jobs.
os.environ.setdefault("NUMBA_NUM_THREADS", "2")


RENDERER = Path(__file__).resolve().parents[1] / "data_scripts" / "render_bodies.py"


@pytest.fixture(scope="session")
def render_bodies():
    """`data_scripts/render_bodies.py` as a module, imported by name from its folder (not from a file spec):
    numba's cache finds its kernels again that way."""
    sys.path.insert(0, str(RENDERER.parent))
    try:
        return importlib.import_module("render_bodies")
    finally:
        sys.path.remove(str(RENDERER.parent))
