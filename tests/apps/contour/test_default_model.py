"""The shipped contour model: its card, its size, and organ masks on a real scan (skipped when ../shared/data is
absent)."""

from pathlib import Path

import numpy as np
import pytest

from imageforest.apps.contour.api import DEFAULT_MODEL, contour_file, load_contourer
from imageforest.imaging.ct_organs import openkbp_cases
from imageforest.imaging.io import read_image

OPENKBP = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "openkbp-hn"

needs_model = pytest.mark.skipif(not DEFAULT_MODEL.is_file(), reason="the default model file is not in this checkout")


@needs_model
def test_shipped_model_card_and_size():
    model = load_contourer()
    card = model.model_card_
    assert DEFAULT_MODEL.stat().st_size <= 50 * 2**20
    assert len(card["cases"]) == 203 and tuple(card["organs"]) == model.organs
    assert model.prior_maps and model.box_atlas_ is not None  # the atlas is the forest's context
    assert card["parameters"]["prior_maps"] is True


@needs_model
@pytest.mark.skipif(not OPENKBP.is_dir(), reason="../shared/data/openkbp-hn is not present")
def test_shipped_model_contours_a_real_scan():
    cases, organs = openkbp_cases(OPENKBP)
    case = cases[0]
    document, contours, _ = contour_file(case.scan, load_contourer())
    truth = np.asarray(read_image(case.labels).array)
    labels = contours.labels.array
    assert labels.shape == truth.shape
    dice = []
    for k, row in enumerate(document["organs"]):
        assert row["name"] == organs[k] and row["label"] == k + 1
        assert row["present"] == bool((labels == k + 1).any())
        if (truth == k + 1).any():
            a, b = labels == k + 1, truth == k + 1
            dice.append(2 * np.sum(a & b) / (a.sum() + b.sum()))
    # a scan the model was trained on: the organs it contours overlap the clinical contours well
    assert np.mean(dice) > 0.6, dice
