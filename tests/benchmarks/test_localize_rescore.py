"""Re-scoring a saved predictions file (benchmarks/localize/cross_validate.py --rescore)."""

from pathlib import Path

import numpy as np
import pytest

from benchmarks.localize.cross_validate import rescore
from imageforest.apps.localize.evaluate import CONTOUR_STOP_WALLS

ORGANS = ["Brainstem", "SpinalCord", "Esophagus"]


def test_rescore_prints_the_saved_run_s_means(tmp_path: Path, capsys):
    truth = np.array([[[0, 10, 0, 10, 0, 10], [0, 10, 0, 10, -100, 50], [np.nan] * 6]])
    forest = truth + np.array([1.0, 1, 1, 1, 1, 1])[None, None, :]
    forest[0, 1, 4] += 19.0  # cord: 20 mm off at its lower wall, 1 mm elsewhere
    np.savez(tmp_path / "p.npz", organs=np.array(ORGANS), case=np.array(["a"]), fold=np.array([0]),
             truth_mm=truth, forest_mm=forest, forest_present=np.array([[True, True, False]]))
    rescore(tmp_path / "p.npz", CONTOUR_STOP_WALLS)
    lines = capsys.readouterr().out.splitlines()
    every = next(ln for ln in lines if ln.startswith("all organs"))
    without = next(ln for ln in lines if ln.startswith("  without"))
    assert float(every.split()[2]) == pytest.approx(np.mean([1.0, 25 / 6]), abs=0.005)
    assert float(without.split()[1]) == pytest.approx(1.0)
