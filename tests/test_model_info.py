"""`imageforest model-info` on every kind of model file: engine estimators, application forests, refusals."""

import json
from pathlib import Path

import numpy as np
from cli_helpers import one_line_error, run

from imageforest import ClassificationForest, RegressionForest
from imageforest.apps.detect.api import DEFAULT_MODEL as DETECTOR
from imageforest.forest.serialization import load_model, save_model


def test_engine_model_card_counts_its_forest_and_lists_its_settings(tmp_path: Path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    clf = ClassificationForest(4, max_depth=3, random_state=0).fit(X, np.where(X[:, 0] > 0, "yes", "no"))
    clf.save(tmp_path / "clf.npz")
    r = run("model-info", tmp_path / "clf.npz", "--json")
    assert r.exit_code == 0, r.output
    card = json.loads(r.stdout)
    assert card["estimator"] == "ClassificationForest" and card["task"] == "classification"
    assert card["forest"]["trees"] == 4 and card["forest"]["max_depth"] <= 3
    assert card["forest"]["nodes"] == clf.forest_.n_nodes and card["forest"]["leaves"] == clf.forest_.leaf_node.size
    assert card["classes"] == ["no", "yes"] and card["n_features_in"] == 3
    assert card["settings"]["max_depth"] == 3
    text = run("model-info", tmp_path / "clf.npz").stdout
    assert "model: ClassificationForest (classification)" in text and "4 trees" in text and "3 input features" in text
    RegressionForest(2, random_state=0).fit(X, X[:, 0]).save(tmp_path / "reg.npz")
    assert "model: RegressionForest (regression)" in run("model-info", tmp_path / "reg.npz").stdout


def test_the_shipped_detector_shows_its_card_and_threshold():
    r = run("model-info", DETECTOR)
    assert r.exit_code == 0, r.output
    meta, _ = load_model(DETECTOR)
    assert "model: HoughForestDetector (hough-detection)" in r.stdout
    assert f"threshold: {meta['threshold']}" in r.stdout and f"name: {meta['model_card']['name']}" in r.stdout


def test_files_it_cannot_describe_are_one_line_errors(tmp_path: Path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(100, 2))
    clf = ClassificationForest(2, random_state=0).fit(X, (X[:, 0] > 0).astype(int))
    clf.save(tmp_path / "clf.npz")
    meta, arrays = load_model(tmp_path / "clf.npz")
    save_model(tmp_path / "foreign.npz", {**meta, "estimator": "SomethingElse"}, arrays)
    assert "'SomethingElse' model, which model-info does not know" in one_line_error(
        run("model-info", tmp_path / "foreign.npz"))
    # a reader's own validation runs before anything is printed: a node reading a feature the model lacks
    params = arrays["forest.params"].copy()
    params[clf.forest_.child >= 0, 0] = 99
    save_model(tmp_path / "crafted.npz", meta, {**arrays, "forest.params": params})
    assert "feature" in one_line_error(run("model-info", tmp_path / "crafted.npz"))
    (tmp_path / "notes.npz").write_text("not a model")
    assert "not an imageforest model" in one_line_error(run("model-info", tmp_path / "notes.npz"))
    assert "no such model file" in one_line_error(run("model-info", tmp_path / "missing.npz"))
