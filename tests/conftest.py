"""Shared test configuration, and the depth-body renderer for the tests that need renders."""

import importlib
import os

import pytest

# Keep numba's thread pool small and predictable in CI (2 cores); tests that need other counts set n_jobs.
os.environ.setdefault("NUMBA_NUM_THREADS", "2")


@pytest.fixture(scope="session")
def render_bodies():
    """The body-parts application's depth-body renderer (`imageforest.apps.bodyparts.renderer`)."""
    return importlib.import_module("imageforest.apps.bodyparts.renderer")
