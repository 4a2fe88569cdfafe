"""Scoring boxes against reference boxes (imageforest.apps.localize.evaluate)."""

import numpy as np
import pytest

from imageforest.apps.localize.evaluate import CONTOUR_STOP_WALLS, OrganScores, parse_walls
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
