"""Scoring boxes (apps/localize/evaluate.py) and re-scoring a saved predictions file (benchmarks/localize_eval.py)."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from apps.localize.evaluate import CONTOUR_STOP_WALLS, OrganScores, parse_walls
from benchmarks.localize_eval import rescore
from imageforest.exceptions import InvalidInputError

ORGANS = ["Brainstem", "SpinalCord", "Esophagus"]


def _scores() -> OrganScores:
    truth = np.array([[0, 10, 0, 10, 0, 10], [0, 10, 0, 10, -100, 50], [0, 10, 0, 10, -80, 40]], dtype=float)
    pred = truth.copy()
    pred[0] += 1.0  # every wall of the brainstem 1 mm off
    pred[1, 4] += 60.0  # the cord's lower wall where the organ ends, the contour 60 mm lower
    pred[2, :4] += 2.0
    pred[2, 4] -= 30.0
    scores = OrganScores(ORGANS)
    scores.add(pred, np.ones(3, bool), truth)
    return scores


def test_walls_left_out_of_the_mean_are_named_and_dropped_from_their_organ_only():
    leave = parse_walls(CONTOUR_STOP_WALLS + ",Larynx:z_hi", ORGANS)  # an organ the model lacks is skipped
    assert leave == {1: [4], 2: [4]}
    s = _scores()
    assert s.mean_wall_error() == pytest.approx(np.mean([1.0, 10.0, (8 + 30) / 6]))
    assert s.mean_wall_error(leave) == pytest.approx(np.mean([1.0, 0.0, 8 / 5]))
    assert s.organ_wall_error(0, [0, 1]) == pytest.approx(1.0)
    with pytest.raises(InvalidInputError, match="z_low"):
        parse_walls("SpinalCord:z_low", ORGANS)


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
