"""The bodyparts and train-bodyparts commands as a user runs them: outputs written, bad inputs one line each."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from cli_helpers import one_line_error, run
from PIL import Image as PILImage


def test_bodyparts_writes_parts_joints_probabilities_and_overlays(body_model_path, held_out, tmp_path):
    depths = sorted(held_out.glob("*_depth.png"))[:2]
    result = run("bodyparts", *depths, "--model", body_model_path, "-o", tmp_path / "out", "--overlay",
                 tmp_path / "pictures", "--proba")
    assert result.exit_code == 0, result.output
    for d in depths:
        name = d.name.replace("_depth.png", "")
        parts = np.asarray(PILImage.open(tmp_path / "out" / f"{name}_parts.png"))
        depth = np.asarray(PILImage.open(d))
        assert parts.dtype == np.uint8 and parts.shape == depth.shape and np.array_equal(parts > 0, depth > 0)
        doc = json.loads((tmp_path / "out" / f"{name}_joints.json").read_text())
        assert doc["model"]["name"] == "test-bodies" and len(doc["model"]["parts"]) == 31
        assert doc["camera"] == {"fx": 285.0, "fy": 285.0, "cx": 160.0, "cy": 120.0}
        head = doc["joints"]["head"]
        assert head and {"position_mm", "pixel", "confidence"} <= set(head[0])
        assert [p["confidence"] for p in head] == sorted((p["confidence"] for p in head), reverse=True)
        proba = np.load(tmp_path / "out" / f"{name}_proba.npy", allow_pickle=False)
        assert proba.shape == (*depth.shape, 31) and np.array_equal(np.argmax(proba, axis=2)[depth > 0] + 1,
                                                                    parts[depth > 0])
        overlay = PILImage.open(tmp_path / "pictures" / f"{name}_overlay.png")
        assert overlay.width >= 640


def test_camera_flags_reach_the_document(body_model_path, held_out, tmp_path):
    depth = sorted(held_out.glob("*_depth.png"))[0]
    result = run("bodyparts", depth, "--model", body_model_path, "-o", tmp_path, "--fx", 300, "--cx", 150)
    assert result.exit_code == 0, result.output
    doc = json.loads(next(tmp_path.glob("*_joints.json")).read_text())
    assert doc["camera"] == {"fx": 300.0, "fy": 300.0, "cx": 150.0, "cy": 120.0}


def test_bad_inputs_are_one_line_and_write_nothing(body_model_path, held_out, tmp_path):
    colour = tmp_path / "colour.png"
    PILImage.fromarray(np.full((240, 320, 3), 80, np.uint8)).save(colour)
    zeros = tmp_path / "zeros.png"
    PILImage.fromarray(np.zeros((240, 320), np.uint16)).save(zeros)
    out = tmp_path / "out"
    assert "colour image" in one_line_error(run("bodyparts", colour, "--model", body_model_path, "-o", out))
    assert "every pixel is 0" in one_line_error(run("bodyparts", zeros, "--model", body_model_path, "-o", out))
    assert not any(out.iterdir())
    assert "read from" in one_line_error(run("bodyparts", tmp_path / "a.jpg", "-o", out))
    other = tmp_path / "other.npz"
    from imageforest import ClassificationForest

    ClassificationForest(n_trees=2, random_state=0).fit(np.random.default_rng(0).random((40, 3)),
                                                        np.arange(40) % 2).save(other)
    depth = sorted(held_out.glob("*_depth.png"))[0]
    assert "not a BodyPartsForest" in one_line_error(run("bodyparts", depth, "--model", other, "-o", out))
    before = depth.read_bytes()
    line = one_line_error(run("bodyparts", depth, "--model", body_model_path, "-o", out, "--overlay", depth))
    assert "is an input" in line and depth.read_bytes() == before
    (tmp_path / "file").write_text("x")
    assert "is a file" in one_line_error(run("bodyparts", depth, "--model", body_model_path, "-o",
                                             tmp_path / "file"))


def test_one_bad_map_in_a_batch_does_not_stop_the_others(body_model_path, held_out, tmp_path):
    zeros = tmp_path / "zeros.png"
    PILImage.fromarray(np.zeros((240, 320), np.uint16)).save(zeros)
    depth = sorted(held_out.glob("*_depth.png"))[0]
    result = run("bodyparts", zeros, depth, "--model", body_model_path, "-o", tmp_path / "out")
    assert result.exit_code == 1 and "every pixel is 0" in result.stderr
    assert (tmp_path / "out" / depth.name.replace("_depth.png", "_parts.png")).is_file()


def hand_layout(renders: Path, folder: Path, n: int) -> Path:
    """Renders relabelled as the hand data set lays itself out: RGBA colour labels of 4 parts."""
    colours = np.array([[0, 0, 0, 0], [255, 0, 0, 255], [0, 0, 255, 255], [0, 255, 0, 255], [124, 30, 255, 255]],
                       dtype=np.uint8)
    train = folder / "train"
    train.mkdir(parents=True)
    for k, d in enumerate(sorted(renders.glob("*_depth.png"))[:n]):
        parts = np.asarray(PILImage.open(d.with_name(d.name.replace("_depth", "_parts"))))
        four = np.where(parts > 0, 1 + (parts - 1) * 4 // 31, 0)
        PILImage.fromarray(colours[four]).save(train / f"train_{k:08d}_labels.png")
        (train / f"train_{k:08d}_depth.png").write_bytes(d.read_bytes())
    return folder


def test_train_bodyparts_on_both_layouts(renders, tmp_path):
    model = tmp_path / "m.npz"
    result = run("train-bodyparts", renders, "-o", model, "--images", 12, "--pixels-per-image", 200, "--depth", 8,
                 "--candidates", 20, "--name", "tiny")
    assert result.exit_code == 0, result.output
    from imageforest.apps.bodyparts import load_body_model

    m = load_body_model(model)
    assert m.model_card_["name"] == "tiny" and m.model_card_["maps"] == 12 and len(m.joint_parts_) == 16
    hands = hand_layout(renders, tmp_path / "hands", 8)
    result = run("train-bodyparts", hands, "-o", tmp_path / "h.npz", "--depth", 8, "--candidates", 20,
                 "--tree-share", 0.5, "--thresholds", "range", "--unbalanced")
    assert result.exit_code == 0, result.output
    h = load_body_model(tmp_path / "h.npz")
    assert h.part_names_ == ["forearm", "palm", "fingers", "thumb"] and set(h.joint_parts_) == set(h.part_names_)
    assert h.max_samples == 0.5 and h.model_card_["recipe"]["max_samples"] == 0.5
    assert m.threshold_sampling == "data" and h.threshold_sampling == "range"  # saved with the model
    assert h.model_card_["recipe"]["threshold_sampling"] == "range"
    # a user-trained card's recipe names the settings as the shipped model's does
    from imageforest.apps.bodyparts.recipe import RECIPE

    assert set(h.model_card_["recipe"]) == set(RECIPE)
    # each tree grew on half of the pixels (unit weights: a root's weight is its pixel count)
    assert np.array_equal(h.forest_.weight[h.forest_.tree_root], np.full(3, h.model_card_["pixels"] // 2))
    assert "--tree-share" in one_line_error(run("train-bodyparts", hands, "-o", tmp_path / "y.npz",
                                                "--tree-share", 1.5))
    assert "no *_depth.png" in one_line_error(run("train-bodyparts", tmp_path, "-o", tmp_path / "x.npz"))
    assert "--thresholds" in run("train-bodyparts", hands, "-o", tmp_path / "z.npz", "--thresholds", "mid").output
    from imageforest.apps.bodyparts.cli import train_bodyparts_command
    from imageforest.apps.bodyparts.model import THRESHOLD_SAMPLINGS

    option = next(p for p in train_bodyparts_command.params if p.name == "thresholds")
    assert tuple(option.type.choices) == THRESHOLD_SAMPLINGS
    assert ".npz" in one_line_error(run("train-bodyparts", renders, "-o", tmp_path / "x.pkl"))


def test_train_refuses_labels_of_another_size(renders, tmp_path):
    folder = tmp_path / "bad"
    folder.mkdir()
    d = sorted(renders.glob("*_depth.png"))[0]
    (folder / d.name).write_bytes(d.read_bytes())
    (folder / d.name.replace("_depth.png", "_joints.json")).write_bytes(
        d.with_name(d.name.replace("_depth.png", "_joints.json")).read_bytes())
    PILImage.fromarray(np.ones((100, 100), np.uint8)).save(folder / d.name.replace("_depth", "_parts"))
    assert "differ in size" in one_line_error(run("train-bodyparts", folder, "-o", tmp_path / "x.npz"))
