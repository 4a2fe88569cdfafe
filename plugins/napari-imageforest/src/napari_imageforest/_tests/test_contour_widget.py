"""The "Contour organs" widget driven as a user would: a CT layer, one click, the organ layers."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

pytest.importorskip("napari")
pytest.importorskip("pytestqt")
if not os.environ.get("DISPLAY") and os.environ.get("QT_QPA_PLATFORM") != "offscreen":
    pytest.skip("no display: install Xvfb (plugins/napari-imageforest/system-packages.sh)", allow_module_level=True)

from imageforest.apps.contour.model import OrganContourer
from imageforest.apps.localize.phantom import ORGANS, head_neck_phantom
from imageforest.imaging.ct_organs import OrganSlices
from napari_imageforest._contour_widget import ORGANS_LAYER, POSTERIOR_LAYER, ContourWidget

SPACING = (7.8, 7.8, 5.0)


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    cases = [head_neck_phantom(seed, size=(64, 64, 56), spacing=SPACING) for seed in range(3)]
    boxes = [OrganSlices.from_labels(lab, list(range(1, 8))).boxes() for _, lab in cases]
    model = OrganContourer(ORGANS, n_trees=2, max_depth=8, entangled_depths=(5,), n_candidates=20,
                           organ_points=100, background_points=800, random_state=0)
    model.fit_scans([c for c, _ in cases], [np.asarray(lab.array) for _, lab in cases], boxes)
    path = tmp_path_factory.mktemp("contour") / "model.npz"
    model.save(path)
    return str(path)


def test_contour_organs_adds_named_labels_and_posterior(make_napari_viewer, qtbot, model_path):
    viewer = make_napari_viewer()
    ct, truth = head_neck_phantom(7, size=(64, 64, 56), spacing=SPACING)
    viewer.add_image(ct.array, name="ct", scale=SPACING[::-1])
    widget = ContourWidget(viewer)
    viewer.window.add_dock_widget(widget)
    widget.model_path = model_path
    widget.image_combo.setCurrentText("ct")
    widget.contour_button.click()
    qtbot.waitUntil(lambda: not widget.busy and ORGANS_LAYER in viewer.layers, timeout=60000)
    organs = viewer.layers[ORGANS_LAYER]
    assert organs.data.shape == ct.array.shape and tuple(organs.scale) == tuple(SPACING[::-1])
    assert list(organs.features["organ"]) == ["background", *ORGANS]
    found = np.unique(organs.data[organs.data > 0])
    assert found.size >= 4  # most of the seven organs, each where the truth has it
    k = ORGANS.index("Mandible") + 1
    assert np.sum((organs.data == k) & (np.asarray(truth.array) == k)) > 0.3 * np.sum(organs.data == k)
    posterior = viewer.layers[POSTERIOR_LAYER].data
    assert posterior.shape == ct.array.shape and 0 < posterior.max() <= 1
    assert "Found" in widget.status.text()


def test_a_picture_is_refused_in_one_line(make_napari_viewer, qtbot, model_path):
    viewer = make_napari_viewer()
    layer = viewer.add_image(np.zeros((32, 32), np.float32), name="flat")
    widget = ContourWidget(viewer)
    widget.model_path = model_path
    widget.contour(layer)
    qtbot.waitUntil(lambda: not widget.busy, timeout=60000)
    assert "3-D" in widget.status.text() and ORGANS_LAYER not in viewer.layers


def test_contour_in_boxes_from_a_file_leaves_organs_marked_absent_empty(make_napari_viewer, qtbot, model_path,
                                                                        tmp_path, monkeypatch):
    from qtpy.QtWidgets import QFileDialog

    viewer = make_napari_viewer()
    ct, truth = head_neck_phantom(7, size=(64, 64, 56), spacing=SPACING)
    layer = viewer.add_image(ct.array, name="ct", scale=SPACING[::-1])
    boxes = OrganSlices.from_labels(truth, list(range(1, 8))).boxes()
    document = {"organs": {name: {"present": False} for name in ORGANS}}
    lo, hi = boxes[ORGANS.index("Mandible")][0::2], boxes[ORGANS.index("Mandible")][1::2]
    document["organs"]["Mandible"] = {"present": True,
                                      "box_mm": {a: [float(lo[i]), float(hi[i])] for i, a in enumerate("xyz")}}
    path = tmp_path / "ct.json"
    path.write_text(json.dumps(document))
    widget = ContourWidget(viewer)
    widget.model_path = model_path
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(path), "Boxes (*.json)"))
    widget.boxes_button.click()  # as a user picks the file
    assert widget.boxes_path == str(path) and "Boxes" in widget.status.text()
    widget.contour(layer)
    qtbot.waitUntil(lambda: not widget.busy and ORGANS_LAYER in viewer.layers, timeout=60000)
    found = set(np.unique(viewer.layers[ORGANS_LAYER].data)) - {0}
    assert found == {ORGANS.index("Mandible") + 1}
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: ("", ""))
    widget.boxes_button.click()  # cancelled: back to the localizer's boxes
    assert widget.boxes_path is None
