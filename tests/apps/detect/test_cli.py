"""The detect and train-detector commands as a user runs them: outputs written, bad inputs one line each."""

from __future__ import annotations

import json

import numpy as np
from cli_helpers import one_line_error, run
from PIL import Image as PILImage

from imageforest.voting.hough import box_iou


def test_detect_writes_the_documented_json_and_an_overlay(detector_path, held_scenes, tmp_path):
    images = sorted(held_scenes.glob("*.png"))[:2]
    truth = json.loads((held_scenes / "boxes.json").read_text())
    result = run("detect", *images, "--model", detector_path, "-o", tmp_path / "out", "--overlay", tmp_path / "pics")
    assert result.exit_code == 0, result.output
    for path in images:
        doc = json.loads((tmp_path / "out" / f"{path.stem}.json").read_text())
        assert doc["image"] == str(path) and doc["model"]["name"] == "test-scenes"
        best = doc["detections"][0]
        assert set(best) == {"box_xyxy", "score", "scale"}
        assert box_iou(best["box_xyxy"], truth[path.name])[0, 0] >= 0.5
        pic = np.asarray(PILImage.open(tmp_path / "pics" / f"{path.stem}_overlay.png"))
        assert pic.shape == (120, 320, 3)


def test_threshold_drops_weak_detections(detector_path, held_scenes, tmp_path):
    image = sorted(held_scenes.glob("*.png"))[0]
    assert run("detect", image, "--model", detector_path, "-o", tmp_path / "a", "--threshold", "1e6").exit_code == 0
    assert json.loads((tmp_path / "a" / f"{image.stem}.json").read_text())["detections"] == []


def test_bad_inputs_are_one_line_and_write_nothing(detector_path, held_scenes, tmp_path):
    grey = tmp_path / "grey.png"
    PILImage.fromarray(np.full((60, 80), 80, np.uint8)).save(grey)
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not a jpeg")
    out = tmp_path / "out"
    assert "grey image" in one_line_error(run("detect", grey, "--model", detector_path, "-o", out))
    assert "not a readable image" in one_line_error(run("detect", broken, "--model", detector_path, "-o", out))
    assert not any(out.iterdir())
    assert "read from" in one_line_error(run("detect", tmp_path / "a.txt", "-o", out))
    other = tmp_path / "other.npz"
    from imageforest import ClassificationForest

    ClassificationForest(n_trees=2, random_state=0).fit(np.random.default_rng(0).random((40, 3)),
                                                        np.arange(40) % 2).save(other)
    image = sorted(held_scenes.glob("*.png"))[0]
    assert "not a HoughForestDetector" in one_line_error(run("detect", image, "--model", other, "-o", out))
    before = image.read_bytes()
    line = one_line_error(run("detect", image, "--model", detector_path, "-o", out, "--overlay", image))
    assert "is an input" in line and image.read_bytes() == before
    good = run("detect", grey, image, "--model", detector_path, "-o", out)
    assert good.exit_code == 1 and (out / f"{image.stem}.json").is_file()


def test_train_detector_writes_a_model_that_detects(scenes, backgrounds, held_scenes, tmp_path):
    model = tmp_path / "m.npz"
    result = run("train-detector", scenes, "-o", model, "--trees", 3, "--depth", 10, "--patches", 200,
                 "--candidates", 40, "--negatives", backgrounds, "--variant", "adhf", "--name", "mine")
    assert result.exit_code == 0, result.output
    from imageforest.apps.detect.api import load_detector

    loaded = load_detector(model)
    assert loaded.model_card_["name"] == "mine" and loaded.variant == "adhf"
    assert loaded.n_training_["background_images"] == 4


def test_train_detector_refuses_bad_folders(scenes, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    for name in ("scene000.png", "scene001.png"):
        (bad / name).write_bytes((scenes / name).read_bytes())
    (bad / "boxes.json").write_text(json.dumps({"scene000.png": [[0, 0, 50, 40]], "scene001.png": [[10, 10, 400, 40]]}))
    assert "outside" in one_line_error(run("train-detector", bad, "-o", tmp_path / "m.npz"))
    (bad / "boxes.json").write_text(json.dumps({"scene000.png": [[0, 0, 50, 40]], "scene001.png": []}))
    assert "no boxes" in one_line_error(run("train-detector", bad, "-o", tmp_path / "m.npz"))
    assert "boxes.json" in one_line_error(run("train-detector", tmp_path, "-o", tmp_path / "m.npz"))
    assert not (tmp_path / "m.npz").exists()
