"""The shipped horse detector: a valid, documented model file that finds horses through the command."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from imageforest.apps.detect.api import DEFAULT_MODEL, SHIPPED, load_detector
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


CARS = Path(__file__).resolve().parents[4] / "shared" / "data" / "wcvp-cars"


def test_the_car_model_ships_with_viewpoints_and_loads_by_name():
    cars = load_detector("cars")
    assert cars.model_card_["name"] == "wcvp-cars" and cars.knows_viewpoints
    assert cars.window_forest_ is not None and set(cars.named_forests()) == {"hough", "window"}
    assert SHIPPED["cars"].stat().st_size < 50 * 2**20
    assert np.isfinite(cars.threshold_) and cars.threshold_ > 0
    assert load_detector("horses").model_card_["name"] == "weizmann-horses"


@pytest.mark.skipif(not CARS.is_dir(), reason="needs ../shared/data/wcvp-cars")
def test_detect_with_the_car_model_finds_an_unseen_car_and_its_heading(tmp_path):
    truth = json.loads((CARS / "val" / "boxes.json").read_text())
    name = "car_001_00000000.jpg"
    result = CliRunner().invoke(main, ["detect", str(CARS / "val" / "images" / name), "--model", "cars", "-o",
                                       str(tmp_path)])
    assert result.exit_code == 0, result.output
    best = json.loads((tmp_path / "car_001_00000000.json").read_text())["detections"][0]
    assert box_iou(best["box_xyxy"], truth[name][0]["box_xyxy"])[0, 0] >= 0.5
    error = abs((best["viewpoint"]["azimuth_deg"] - truth[name][0]["azimuth_deg"] + 180) % 360 - 180)
    assert error <= 45.0
