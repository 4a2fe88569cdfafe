"""Tests of the benchmarks' own code (peers, scoring helpers): the repository root makes `benchmarks` importable."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
