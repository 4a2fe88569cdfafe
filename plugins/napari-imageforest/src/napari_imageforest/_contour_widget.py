"""The "Contour organs" dock widget: contour the organs of a 3-D CT image layer in the background.

Everything it computes comes from `imageforest.apps.contour` (the same `contour_scan` the CLI runs): the widget
turns the layer into a scan (its scale as the voxel spacing in mm, its translate as the origin; LPS axes, (z, y, x)
data), runs the localizer (or reads boxes a reviewer corrected, a `localize` JSON) and the contour forest on a
worker thread, and adds the results as layers: "organs" (Labels, one named colour per organ) and "organ posterior"
(Image, each voxel's largest organ posterior).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from napari.layers import Image as ImageLayer
from napari.qt.threading import create_worker
from napari.utils.colormaps import DirectLabelColormap
from napari.utils.notifications import show_error
from qtpy.QtWidgets import QComboBox, QFileDialog, QLabel, QProgressBar, QPushButton, QVBoxLayout, QWidget

from imageforest.exceptions import ImageForestError
from napari_imageforest._layers import level_of

ORGANS_LAYER = "organs"
POSTERIOR_LAYER = "organ posterior"
COLOURS = ["#e6194b", "#3cb44b", "#4363d8", "#f58231", "#911eb4", "#42d4f4", "#f032e6", "#bfef45", "#fabed4",
           "#469990"]


def scan_from_layer(layer: ImageLayer):
    """The layer's voxels as a CT scan: data (z, y, x) in HU, scale (z, y, x) mm, translate (z, y, x) mm."""
    from imageforest.imaging.io import Image

    data = level_of(layer).array(layer)  # full resolution of a multiscale layer
    if data.ndim != 3 or layer.rgb:
        raise ImageForestError(f"{layer.name}: contouring needs a 3-D scalar image (a CT volume), got shape "
                               f"{data.shape}")
    spacing = np.asarray(layer.scale[-3:], dtype=np.float64)[::-1]
    origin = np.asarray(layer.translate[-3:], dtype=np.float64)[::-1]
    return Image(data, spacing, origin, np.eye(3), source=layer.name)


def contour_layer(layer: ImageLayer, model_path: str | None = None, boxes_path: str | None = None):
    """(organ names, Contours) of a layer, with the shipped models unless `model_path` names a contour model;
    inside the boxes of the document at `boxes_path` (as `imageforest contour --boxes` reads it) instead of the
    localizer's when it is given."""
    from imageforest.apps.contour.api import contour_scan, load_contourer
    from imageforest.apps.contour.boxes import read_boxes, snap_to_faces

    model = load_contourer(model_path)
    scan = scan_from_layer(layer)
    given = None
    if boxes_path is not None:
        boxes, evidence = read_boxes(boxes_path, model.organs)
        given = (snap_to_faces(boxes, scan), evidence)
    contours, _ = contour_scan(scan, model, boxes=given)
    return list(model.organs), contours


class ContourWidget(QWidget):
    """Contour the organs of a CT image layer (imageforest's entangled forest inside the localizer's boxes)."""

    def __init__(self, napari_viewer) -> None:
        super().__init__()
        self.viewer = napari_viewer
        self.worker = None
        self.model_path: str | None = None
        self.boxes_path: str | None = None
        self.image_combo = QComboBox()
        self.contour_button = QPushButton("Contour organs")
        self.model_button = QPushButton("Use another contour model...")
        self.boxes_button = QPushButton("Contour in boxes from a file...")
        self.boxes_button.setToolTip("A JSON that imageforest localize wrote for this scan, as written or corrected; "
                                     "cancel the dialog to go back to the localizer's boxes")
        self.status = QLabel("Pick a 3-D CT layer (scale = voxel size in mm) and press Contour organs.")
        self.status.setWordWrap(True)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1)
        layout = QVBoxLayout()
        for widget in (QLabel("CT image"), self.image_combo, self.contour_button, self.progress, self.status,
                       self.model_button, self.boxes_button):
            layout.addWidget(widget)
        layout.addStretch()
        self.setLayout(layout)
        self.contour_button.clicked.connect(lambda: self.contour())
        self.model_button.clicked.connect(self._model_dialog)
        self.boxes_button.clicked.connect(self._boxes_dialog)
        self.viewer.layers.events.inserted.connect(self._refresh)
        self.viewer.layers.events.removed.connect(self._refresh)
        self._refresh()

    def _refresh(self, event=None) -> None:
        current = self.image_combo.currentText()
        self.image_combo.clear()
        self.image_combo.addItems([layer.name for layer in self.viewer.layers if isinstance(layer, ImageLayer)
                                   and not layer.rgb and np.ndim(layer.data) == 3
                                   and layer.name != POSTERIOR_LAYER])
        if current:
            self.image_combo.setCurrentText(current)

    @property
    def busy(self) -> bool:
        return self.worker is not None

    def contour(self, layer: ImageLayer | None = None) -> None:
        """Contour `layer` (default: the chosen one) on a worker thread; the layers appear when it is done."""
        layer = layer or next((x for x in self.viewer.layers if x.name == self.image_combo.currentText()), None)
        if layer is None:
            show_error("no 3-D image layer to contour: open a CT scan first")
            return
        self.status.setText(f"Contouring {layer.name} ...")
        self.progress.setRange(0, 0)
        self.worker = create_worker(contour_layer, layer, self.model_path, self.boxes_path, _start_thread=False,
                                    _connect={"returned": lambda got: self._show(layer, *got),
                                              "errored": self._error, "finished": self._done})
        self.worker.start()

    def _show(self, layer: ImageLayer, organs: list[str], contours) -> None:
        labels = contours.labels.array
        colours = {None: "transparent", 0: "transparent"}
        colours.update({k + 1: COLOURS[k % len(COLOURS)] for k in range(len(organs))})
        place = {"scale": layer.scale[-3:], "translate": layer.translate[-3:]}
        names = ["background", *organs]
        for name in (ORGANS_LAYER, POSTERIOR_LAYER):
            if name in self.viewer.layers:
                self.viewer.layers.remove(name)
        self.viewer.add_labels(labels, name=ORGANS_LAYER, colormap=DirectLabelColormap(color_dict=colours),
                               features={"organ": names}, **place)
        posterior = (np.zeros(labels.shape, np.float32) if contours.posterior is None
                     else contours.posterior.max(axis=0))
        self.viewer.add_image(posterior, name=POSTERIOR_LAYER, colormap="magma", opacity=0.5,
                              contrast_limits=(0.0, 1.0), blending="additive", **place)
        found = [f"{name} ({int((labels == k + 1).sum())} voxels)" for k, name in enumerate(organs)
                 if (labels == k + 1).any()]
        self.status.setText("Found " + (", ".join(found) if found else "no organ") + ".")

    def _error(self, exc: BaseException) -> None:
        message = str(exc) if isinstance(exc, ImageForestError) else f"{type(exc).__name__}: {exc}"
        show_error(message)
        self.status.setText(message)

    def _done(self) -> None:
        self.worker = None
        self.progress.setRange(0, 1)
        self.progress.setValue(1)

    def _model_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Contour model", str(Path.home()), "Models (*.npz)")
        if path:
            self.model_path = path
            self.status.setText(f"Contour model: {path}")

    def _boxes_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Organ boxes (imageforest localize JSON)", str(Path.home()),
                                              "Boxes (*.json)")
        self.boxes_path = path or None
        self.status.setText(f"Boxes: {path}" if path else "Boxes: the localizer's")
