"""The shipped horse detector: a valid, documented model file that finds horses through the command."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from imageforest.apps.detect.api import DEFAULT_MODEL, load_detector
from imageforest.cli import main
from imageforest.voting.hough import box_iou

HORSES = Path(__file__).resolve().parents[4] / "shared" / "data" / "weizmann-horses"


def test_the_default_model_is_small_and_carries_its_card():
    assert DEFAULT_MODEL.stat().st_size < 20 * 2**20
    model = load_detector()
    assert model.model_card_["name"] == "weizmann-horses"
    assert np.isfinite(model.threshold_) and model.threshold_ > 0
    assert model.relative_sizes_[0] < model.relative_sizes_[1]


@pytest.mark.skipif(not HORSES.is_dir(), reason="needs ../shared/data/weizmann-horses")
def test_detect_finds_horses_in_full_size_photographs(tmp_path):
    boxes = json.loads((HORSES / "boxes.json").read_text())
    names = ["horse010.jpg", "horse120.jpg"]
    result = CliRunner().invoke(main, ["detect", *[str(HORSES / "rgb" / n) for n in names], "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    for name in names:
        doc = json.loads((tmp_path / name.replace(".jpg", ".json")).read_text())
        entry = boxes[name]
        s = np.array(entry["rgb_size_wh"] * 2) / np.array(entry["gray_size_wh"] * 2)
        assert doc["size"] == entry["rgb_size_wh"]
        assert box_iou(doc["detections"][0]["box_xyxy"], np.array(entry["bbox_xyxy_in_gray_frame"]) * s)[0, 0] >= 0.5
