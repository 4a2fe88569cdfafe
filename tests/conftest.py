"""Shared test configuration."""

import os

# Keep numba's thread pool small and predictable in CI (2 cores); tests that need other counts set n_jobs.
os.environ.setdefault("NUMBA_NUM_THREADS", "2")
