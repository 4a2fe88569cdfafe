"""The dock widget: pick an image layer, paint scribbles, and the forest segments the rest in the background.

Everything it computes comes from `imageforest.apps.segment` (the same session the CLI and the Python API use);
the widget only moves data between layers and a background worker:

- "Start" prepares the chosen image (features, once) and creates a Labels layer for scribbles: label 1, 2, ...
  are classes, 0 erases;
- every finished stroke starts an update in a worker thread; a stroke during an update makes that update stale:
  it stops at its next step and a new one starts with all the strokes (the viewer never waits);
- results are layers: "segmentation" (Labels), "probability" (of the first class) and "uncertainty" (posterior
  entropy) as Images, shown as soon as the update ends, then "suggestions" (Points) where a next scribble would
  help most; "Next suggestion" moves the view to them in turn;
- the model (a forest grown on the scribbles and the confidently segmented pixels) can be saved, loaded, and
  applied to another layer, frame by frame for a stack of pictures; a picture too large for memory (a dask or zarr
  layer) is segmented tile by tile and its labels kept on disk, in a temporary folder removed when Python exits,
  from which the Labels layer reads them; "Save segmentation" writes them as OME-Zarr without reading them whole.
Errors (one class painted, a model for other images, ...) appear in napari's notifications; scribbles stay.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
from napari.layers import Image as ImageLayer
from napari.layers import Labels
from napari.qt.threading import create_worker
from napari.utils.colormaps import DirectLabelColormap
from napari.utils.notifications import show_error, show_info
from qtpy.QtCore import QTimer
from qtpy.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from imageforest.apps.segment import SegmentationForest, SegmentationSession
from imageforest.exceptions import ImageForestError
from napari_imageforest._contour_widget import ORGANS_LAYER
from napari_imageforest._layers import SESSION_PIXELS, Level, level_of

SCRIBBLES = "scribbles"
N_SUGGESTIONS = 5
# A saved model's labels of a picture that is not in memory (a dask or zarr layer) go to an on-disk store above this
# many pixels (2^28 pixels: 256 MB of labels), written tile by tile and read by the Labels layer chunk by chunk
ON_DISK_PIXELS = 1 << 28
LABEL_SUFFIXES = (".ome.zarr", ".nii.gz", ".nii", ".nrrd", ".mha", ".png", ".tif", ".tiff", ".bmp")


def _spatial(layer: ImageLayer, level: Level | None = None) -> tuple[np.ndarray, bool, np.ndarray]:
    """(data, rgb, spacing of the spatial axes) of an image layer at `level` (default: full resolution), in memory."""
    level = level or level_of(layer)
    data = level.array(layer)
    n_spatial = data.ndim - (1 if level.rgb else 0)
    return data, level.rgb, level.scale[-n_spatial:]


def _camera(viewer):
    """The viewer's camera (napari 0.9 moved it to viewer.scene)."""
    scene = getattr(viewer, "scene", None)
    return scene.camera if scene is not None else viewer.camera


def _segment_layer(model: SegmentationForest, layer: ImageLayer, folder: Callable[[], Path] | None = None):
    """Labels of a layer (its full resolution) by a saved model: a picture or volume of the model's kind, or every
    frame of a stack of pictures. A large dask- or zarr-backed picture is read tile by tile as it is segmented; with
    `folder` (called only when needed), one of more than `ON_DISK_PIXELS` pixels keeps its labels in a new zarr
    array under the folder it returns, never whole in memory, and that array is returned."""
    data, rgb = level_of(layer).data(layer), bool(layer.rgb)
    if model.image_kind_ != "volume" and data.ndim - (1 if rgb else 0) == 3:
        return model.segment_frames(np.asarray(data), rgb=rgb)
    labels_to = None
    if (folder is not None and model.image_kind_ != "volume" and not isinstance(data, np.ndarray)
            and data.ndim - (1 if rgb else 0) == 2 and data.shape[0] * data.shape[1] > ON_DISK_PIXELS):
        labels_to = Path(tempfile.mkdtemp(prefix="labels.", dir=folder())) / "labels.zarr"
    return model.segment(data, spacing=layer.scale[-3:] if model.image_kind_ == "volume" else None,
                         rgb=rgb if data.ndim == 3 else None, maps=False, labels_to=labels_to).labels


def _session_for(layer: ImageLayer, level: Level) -> SegmentationSession:
    data, rgb, scale = _spatial(layer, level)
    if not rgb and data.ndim == 3:
        return SegmentationSession(data, spacing=scale, rgb=False)
    return SegmentationSession(data, rgb=rgb)


_KERNELS_LOADING: list[threading.Thread] = []


def _load_kernels() -> None:
    """Load the segmentation kernels from numba's cache in a background thread, once per process, while the user
    picks a layer and paints: the first Start then waits for none of them (about a second on a CT)."""
    if not _KERNELS_LOADING:
        from imageforest.apps.segment.scripts.warmup import segment_samples

        thread = threading.Thread(target=segment_samples, name="imageforest-kernels", daemon=True)
        _KERNELS_LOADING.append(thread)
        thread.start()


class SegmentationWidget(QWidget):
    """Segment an image layer from scribbles (imageforest's interactive segmentation)."""

    def __init__(self, napari_viewer) -> None:
        super().__init__()
        _load_kernels()
        self.viewer = napari_viewer
        self.session: SegmentationSession | None = None
        self.image_layer: ImageLayer | None = None
        self.level: Level | None = None  # the resolution of the image layer the session works on
        self.scribbles: Labels | None = None
        self.model: SegmentationForest | None = None
        self.worker = None
        self.generation = 0
        self.pending = False
        self.suggestions = np.zeros((0, 2), dtype=np.int64)
        self._next = 0
        self._on_disk: Path | None = None  # where labels too large for memory are kept (`labels_folder`)
        self._folder_lock = threading.Lock()

        self.image_combo = QComboBox()
        self.start_button = QPushButton("Start: paint scribbles on this image")
        self.status = QLabel("Pick an image layer and press Start.")
        self.status.setWordWrap(True)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1)
        self.hide_background = QCheckBox("Leave the last label (background) undrawn")
        self.hide_background.setChecked(True)
        self.from_organs = QCheckBox(f"Start from the '{ORGANS_LAYER}' layer (paint an organ's number to correct "
                                     "it, the background with a new number)")
        self.from_organs.setChecked(True)
        self.stroke_regions = QCheckBox("Only regions I painted (one object per label)")
        self.stroke_regions.setToolTip("A label keeps only the regions that hold one of its strokes; off, it also "
                                       "takes unpainted regions that look like it (every cell from a few)")
        self.suggest_button = QPushButton("Next suggestion")
        self.lock_button = QPushButton("Lock the selected label")
        self.lock_button.setToolTip("Its pixels stay as they are through later strokes until unlocked")
        self.unlock_button = QPushButton("Unlock all")
        self.target_combo = QComboBox()
        self.apply_button = QPushButton("Apply model to layer")
        self.apply_all_button = QPushButton("Apply model to every image layer")
        self.save_button = QPushButton("Save model...")
        self.load_button = QPushButton("Load model...")
        self.export_button = QPushButton("Save segmentation...")
        self.per_class = QCheckBox("one mask per class")

        layout = QVBoxLayout()
        layout.addWidget(QLabel("Image"))
        layout.addWidget(self.image_combo)
        layout.addWidget(self.start_button)
        layout.addWidget(self.progress)
        layout.addWidget(self.status)
        layout.addWidget(self.hide_background)
        layout.addWidget(self.from_organs)
        layout.addWidget(self.stroke_regions)
        layout.addWidget(self.suggest_button)
        locks = QHBoxLayout()
        locks.addWidget(self.lock_button)
        locks.addWidget(self.unlock_button)
        layout.addLayout(locks)
        layout.addWidget(QLabel("Apply the model to"))
        layout.addWidget(self.target_combo)
        layout.addWidget(self.apply_button)
        layout.addWidget(self.apply_all_button)
        files = QHBoxLayout()
        files.addWidget(self.save_button)
        files.addWidget(self.load_button)
        layout.addLayout(files)
        export = QHBoxLayout()
        export.addWidget(self.export_button)
        export.addWidget(self.per_class)
        layout.addLayout(export)
        layout.addStretch()
        self.setLayout(layout)

        self.start_button.clicked.connect(lambda: self.start())
        self.suggest_button.clicked.connect(lambda: self.next_suggestion())
        self.lock_button.clicked.connect(lambda: self.lock_selected())
        self.unlock_button.clicked.connect(lambda: self.unlock_all())
        self.apply_button.clicked.connect(lambda: self.apply_to(self._layer_named(self.target_combo.currentText())))
        self.apply_all_button.clicked.connect(lambda: self.apply_to_all())
        self.save_button.clicked.connect(self._save_dialog)
        self.load_button.clicked.connect(self._load_dialog)
        self.export_button.clicked.connect(self._export_dialog)
        self.stroke_regions.toggled.connect(lambda _: self.request_update())
        self.viewer.layers.events.inserted.connect(self._refresh_layer_lists)
        self.viewer.layers.events.removed.connect(self._refresh_layer_lists)
        self._refresh_layer_lists()

    # -- layer lists ------------------------------------------------------------------------------------
    def _images(self) -> list[ImageLayer]:
        return [layer for layer in self.viewer.layers if isinstance(layer, ImageLayer)
                and layer.name not in ("probability", "uncertainty")]

    def _layer_named(self, name: str):
        return next((layer for layer in self.viewer.layers if layer.name == name), None)

    def _refresh_layer_lists(self, event=None) -> None:
        for combo in (self.image_combo, self.target_combo):
            current = combo.currentText()
            combo.clear()
            combo.addItems([layer.name for layer in self._images()])
            if current:
                combo.setCurrentText(current)

    # -- busy state -------------------------------------------------------------------------------------
    def _busy(self, text: str) -> None:
        self.status.setText(text)
        self.progress.setRange(0, 0)  # an indeterminate bar while a worker runs

    def _idle(self, text: str) -> None:
        self.status.setText(text)
        self.progress.setRange(0, 1)
        self.progress.setValue(1)

    def _error(self, exc: BaseException) -> None:
        message = str(exc) if isinstance(exc, ImageForestError) else f"{type(exc).__name__}: {exc}"
        show_error(message)
        self._idle(message)

    @property
    def busy(self) -> bool:
        return self.worker is not None

    # -- start ------------------------------------------------------------------------------------------
    def start(self, layer: ImageLayer | None = None) -> None:
        """Prepare `layer` (default: the chosen one) in the background, then add a scribbles layer to paint on."""
        layer = layer or self._layer_named(self.image_combo.currentText())
        if layer is None:
            show_error("no image layer to segment: open an image first")
            return
        self.image_layer = layer
        self.level = level_of(layer, SESSION_PIXELS)  # a multiscale layer: its finest level that fits
        self.session = None
        self.model = None
        self._busy(f"Computing features of {layer.name} ...")
        self._run(_session_for, layer, self.level, returned=self._started)

    def _run(self, function, *args, returned, yielded=None) -> None:
        """Run `function(*args)` (a function or a generator function) on a worker thread."""
        connect = {"returned": returned, "errored": self._error, "finished": self._worker_done}
        if yielded is not None:
            connect["yielded"] = yielded
        self.worker = create_worker(function, *args, _start_thread=False, _connect=connect)
        self.worker.start()

    def _started(self, session: SegmentationSession) -> None:
        self.session = session
        n = len(session.shape)
        scale, translate = self.level.scale[-n:], self.level.translate[-n:]
        if self.scribbles is not None and self.scribbles in self.viewer.layers \
                and self.scribbles.data.shape == session.shape:
            self.scribbles.scale, self.scribbles.translate = scale, translate
        else:
            self.scribbles = self.viewer.add_labels(np.zeros(session.shape, dtype=np.uint8), name=SCRIBBLES,
                                                    scale=scale, translate=translate)
            self.scribbles.events.paint.connect(self._on_paint)
            # scribbles set from Python or a file (`layer.data = ...`) update too; painting emits `paint` only
            self.scribbles.events.data.connect(self._on_paint)
            # napari's undo and redo (Ctrl+Z, Ctrl+Shift+Z) write the layer's history back without any event
            for name in ("undo", "redo"):
                setattr(self.scribbles, name, self._then_update(getattr(self.scribbles, name)))
        self.scribbles.selected_label = 1
        self.scribbles.mode = "paint"
        self.viewer.layers.selection.active = self.scribbles
        where = "" if self.level.level == 0 else (f" of resolution level {self.level.level} "
                                                  f"({' x '.join(str(n) for n in session.shape)})")
        self._idle(f"Features{where} ready ({session.features_s:.1f} s). Paint label 1 on the object, 2 on the "
                   "background (more labels for more classes).")

    def _then_update(self, action):
        """`action` (a layer's undo or redo), followed by an update of the segmentation."""
        def run(*args, **kwargs):
            out = action(*args, **kwargs)
            self._on_paint()
            return out
        return run

    def _worker_done(self) -> None:
        self.worker = None
        if self.pending:
            self.pending = False
            self.request_update()

    # -- updates ----------------------------------------------------------------------------------------
    def _on_paint(self, event=None) -> None:
        # after the stroke's own handlers have written it: the paint event can come before the data is set
        QTimer.singleShot(0, self.request_update)

    def request_update(self) -> None:
        """Segment with the scribbles as they are now; a running update becomes stale and stops."""
        if self.session is None or self.scribbles is None:
            return
        self.generation += 1
        if self.worker is not None:
            self.pending = True
            quit_ = getattr(self.worker, "quit", None)
            if quit_ is not None:
                quit_()
            return
        try:
            self.session.set_scribbles(np.asarray(self.scribbles.data))
            self.session.set_init(self._organs())
            self.session.stroke_regions = self.stroke_regions.isChecked()
        except ImageForestError as exc:
            self._error(exc)
            return
        painted = np.unique(self.session.scribbles[self.session.scribbles > 0])
        if painted.size < 2:  # not an error while the user is still painting the first class
            message = ("Paint label 1 on the object and 2 on the background." if painted.size == 0 else
                       f"Only label {painted[0]} is painted: paint at least one more class.")
            if self.status.text() != message:
                show_info(message)
            self._idle(message)
            return
        generation = self.generation
        session = self.session

        def work():
            steps = session.update_steps()
            while True:
                try:
                    step = next(steps)
                except StopIteration as done:
                    result = done.value
                    break
                # the first cut is shown while the colour rounds refine it; a stale update stops at any step
                yield generation, "preview", session.preview if step == "graph_cut" else None
            yield generation, "result", result  # shown before the suggestions are looked for
            return generation, session.suggest(N_SUGGESTIONS)

        self._busy("Segmenting ...")
        self._run(work, returned=self._suggested, yielded=self._arrived)

    def _arrived(self, value) -> None:
        """A step of the update: the first cut's labels (a preview) or the result."""
        generation, kind, payload = value
        if payload is None or generation != self.generation:
            return
        if kind == "result":
            self._updated(payload)
            return
        self._show_segmentation(payload, np.unique(self.session.scribbles[self.session.scribbles > 0]))
        self.status.setText("Segmenting ... (refining by colour)")

    def lock_selected(self) -> None:
        """Freeze the scribbles layer's selected label as the segmentation has it now."""
        if self.session is None or self.scribbles is None:
            return
        label = int(self.scribbles.selected_label)
        try:
            self.session.lock(label)
        except ImageForestError as exc:
            self._error(exc)
            return
        self._idle(f"Label {label} is locked (locked: {', '.join(str(k) for k in sorted(self.session.locked))}).")

    def unlock_all(self) -> None:
        if self.session is not None:
            self.session.unlock()
            self._idle("No label is locked.")

    def _organs(self) -> np.ndarray | None:
        """The automatic organs to start from: the "organs" layer (from Contour organs) when the box is checked and
        it lies on this image's grid, else None."""
        layer = self._layer_named(ORGANS_LAYER)
        if not self.from_organs.isChecked() or layer is None or np.shape(layer.data) != self.session.shape:
            return None
        return np.asarray(layer.data)

    def _updated(self, result) -> None:
        """Show a finished update's layers (its suggestions follow in `_suggested`)."""
        self.model = None  # grown from this result when asked for
        self._show_segmentation(result.labels, result.classes)
        kw = {"scale": self.scribbles.scale, "translate": self.scribbles.translate}
        self._set_layer("probability", result.probabilities[..., 0], ImageLayer, colormap="magma",
                        contrast_limits=(0.0, 1.0), visible=False, **kw)
        top = float(np.log(result.classes.size))
        self._set_layer("uncertainty", result.uncertainty, ImageLayer, colormap="inferno",
                        contrast_limits=(0.0, top), visible=False, **kw)
        self.viewer.layers.selection.active = self.scribbles
        t = result.timing_s
        self.status.setText(f"Updated in {sum(t.values()):.2f} s "
                            f"({', '.join(f'{k} {v:.2f}' for k, v in t.items())}).")

    def _suggested(self, value) -> None:
        generation, suggestions = value
        if generation != self.generation:
            return  # a newer stroke came in: its update follows
        self.suggestions = suggestions
        self._next = 0
        points = suggestions * np.asarray(self.scribbles.scale) + np.asarray(self.scribbles.translate)
        self._set_layer("suggestions", points, None, **{})
        self.viewer.layers.selection.active = self.scribbles
        self._idle(self.status.text())

    def _show_segmentation(self, labels: np.ndarray, classes: np.ndarray) -> None:
        """The `segmentation` layer on the scribbles' grid, each class in its scribbles' colour."""
        self._set_layer("segmentation", labels, Labels, opacity=0.45, scale=self.scribbles.scale,
                        translate=self.scribbles.translate)
        self._colour_like_scribbles(self._layer_named("segmentation"), classes,
                                    np.unique(labels) if self.session.init is not None else ())

    def _colour_like_scribbles(self, layer: Labels, classes: np.ndarray, kept=()) -> None:
        """Each class in its scribbles' colour; the last (the background, by the usual numbering) transparent when
        the check box says so, so that the image shows through around the objects. `kept`: label values started
        from automatic organs (in the same colours; 0, their background, clear)."""
        clear = np.zeros(4)
        colours = {None: clear, 0: clear}
        for c in [*classes, *kept]:
            colours[int(c)] = np.asarray(self.scribbles.colormap.map(int(c)), dtype=float).reshape(-1)[:4]
        if self.hide_background.isChecked() and len(kept) == 0:
            colours[int(classes[-1])] = clear
        colours[0] = clear
        layer.colormap = DirectLabelColormap(color_dict=colours)

    def _set_layer(self, name: str, data: np.ndarray, kind, **kwargs) -> None:
        layer = self._layer_named(name)
        if layer is not None:
            layer.data = data
            return
        if name == "suggestions":
            self.viewer.add_points(data, name=name, size=12, face_color="yellow", border_color="black")
        elif kind is Labels:
            self.viewer.add_labels(data, name=name, **kwargs)
        else:
            self.viewer.add_image(data, name=name, blending="additive", **kwargs)

    # -- suggestions ------------------------------------------------------------------------------------
    def next_suggestion(self) -> np.ndarray | None:
        """Centre the view on the next suggested place to scribble; returns it (pixel indices) or None."""
        if not len(self.suggestions):
            show_info("no suggestion yet: paint two classes first")
            return None
        point = self.suggestions[self._next % len(self.suggestions)]
        self._next += 1
        world = point * np.asarray(self.scribbles.scale) + np.asarray(self.scribbles.translate)
        if world.size == 3:
            self.viewer.dims.set_point(self.viewer.dims.ndim - 3, world[0])
        _camera(self.viewer).center = tuple(world[-2:])
        return point

    # -- models -----------------------------------------------------------------------------------------
    def current_model(self) -> SegmentationForest:
        """The loaded model, or one grown from the current segmentation."""
        if self.model is None:
            if self.session is None or self.session.result is None:
                raise ImageForestError("no model yet: paint scribbles (or load a model) first")
            self.model = self.session.model()
        return self.model

    def save_model(self, path: str | Path) -> None:
        try:
            self.current_model().save(path)
            self._idle(f"Model saved to {path}.")
        except (ImageForestError, OSError) as exc:
            self._error(exc)

    def load_model(self, path: str | Path) -> None:
        try:
            self.model = SegmentationForest.load(path)
            self._idle(f"Model loaded from {path} ({self.model.image_kind_} images).")
        except (ImageForestError, OSError) as exc:
            self._error(exc)

    def labels_folder(self) -> Path:
        """The temporary folder where labels too large for memory are kept (made on first use, removed when Python
        exits)."""
        with self._folder_lock:
            if self._on_disk is None:
                self._on_disk = Path(tempfile.mkdtemp(prefix="imageforest-labels-"))
                atexit.register(shutil.rmtree, self._on_disk, True)
            return self._on_disk

    def _labels_to_save(self, name: str | None) -> Labels:
        """The layer "Save segmentation" writes: `name`, else the selected layer when it is a segmentation (an
        applied model's "<image> segmentation"), else the interactive "segmentation"."""
        if name is None:
            active = self.viewer.layers.selection.active
            name = active.name if isinstance(active, Labels) and active.name.endswith("segmentation") \
                else "segmentation"
        layer = self._layer_named(name)
        if not isinstance(layer, Labels):
            raise ImageForestError(f"no {name!r} labels layer to save yet: paint scribbles or apply a model first")
        return layer

    def save_segmentation(self, path: str | Path, per_class: bool = False, layer: str | None = None) -> list[Path]:
        """Write a segmentation layer (`layer`, by default the selected segmentation or "segmentation"): one label
        file (PNG/TIFF/BMP for pictures, NIfTI/NRRD/MHA for volumes, OME-Zarr for either, with the layer's voxel
        size and position) or, `per_class`, one 0/1 mask per label value named `<stem>_<label><suffix>`; returns the
        files written (each atomically). Labels kept on disk are written to OME-Zarr chunk by chunk."""
        from imageforest.apps.segment.image_files import write_labels
        from imageforest.imaging.io import Image
        from imageforest.imaging.ome_zarr import is_zarr_path

        source = self._labels_to_save(layer)
        labels = source.data
        lazy = not isinstance(labels, np.ndarray)
        path = Path(path)
        name = path.name
        suffix = next((s for s in LABEL_SUFFIXES if name.lower().endswith(s)), path.suffix)
        if lazy and not is_zarr_path(path):  # write_labels writes OME-Zarr chunk by chunk, other formats whole
            labels = np.asarray(labels)
            lazy = False
        if lazy:
            import dask.array as da

            labels = labels if isinstance(labels, da.Array) else da.from_zarr(labels)
        n = labels.ndim
        spacing = np.asarray(source.scale[-n:], float)[::-1]
        origin = np.asarray(source.translate[-n:], float)[::-1]
        if n != 3:  # pictures are written in pixels, as the CLI writes them
            spacing, origin = np.ones(2), np.zeros(2)

        def write(values, target: Path) -> None:
            write_labels(values, target, Image(values, spacing, origin, np.eye(n)))

        if not per_class:
            write(labels, path)
            return [path]
        values = np.asarray(da.unique(labels).compute()) if lazy else np.unique(labels)
        written = []
        for value in values[values > 0]:
            target = path.with_name(f"{name[:len(name) - len(suffix)]}_{int(value)}{suffix}")
            write((labels == value).astype(np.uint8), target)
            written.append(target)
        return written

    def _export_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save segmentation", "",
                                              "Labels (*.png *.tif *.nii.gz *.nrrd *.mha *.ome.zarr)")
        if not path:
            return
        try:
            written = self.save_segmentation(path, self.per_class.isChecked())
            self._idle(f"Saved {len(written)} file(s): {', '.join(p.name for p in written)}.")
        except (ImageForestError, OSError) as exc:
            self._error(exc)

    def _save_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save segmentation model", "", "Model (*.npz)")
        if path:
            self.save_model(path)

    def _load_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Load segmentation model", "", "Model (*.npz)")
        if path:
            self.load_model(path)

    def apply_to(self, layer: ImageLayer | None) -> None:
        """Segment another layer with the model in the background: a picture or volume of the model's kind, or
        every frame of a stack of pictures; the result is a Labels layer "<name> segmentation"."""
        if layer is None:
            show_error("choose a layer to apply the model to")
            return
        try:
            model = self.current_model()
        except ImageForestError as exc:
            self._error(exc)
            return
        data, rgb = level_of(layer).data(layer), bool(layer.rgb)  # read in the worker, not here
        n_spatial = data.ndim - (1 if rgb else 0)
        stack = model.image_kind_ != "volume" and n_spatial == 3

        def work():
            if not stack:
                return _segment_layer(model, layer, self.labels_folder)  # only labels are shown
            frames = []
            for k in range(data.shape[0]):
                frames.append(model.segment_frames(np.asarray(data[k:k + 1]), rgb=rgb)[0])
                yield k + 1
            return np.stack(frames)

        self._busy(f"Segmenting {layer.name} ...")
        self._run(work, returned=lambda labels: self._applied(layer, labels),
                  yielded=lambda k: self.status.setText(f"Segmenting {layer.name}: frame {k} of {data.shape[0]}"))

    def apply_to_all(self) -> None:
        """Segment every image layer with the model, one after another in the background (a progress bar counts
        them); each result is a Labels layer "<name> segmentation" as it finishes, and a layer the model cannot
        segment (another kind of image) is reported and skipped."""
        try:
            model = self.current_model()
        except ImageForestError as exc:
            self._error(exc)
            return
        layers = [layer for layer in self._images() if not layer.name.endswith(" segmentation")]

        def work():
            for k, layer in enumerate(layers):
                try:
                    yield k, layer, _segment_layer(model, layer, self.labels_folder)
                except ImageForestError as exc:
                    yield k, layer, exc
            return len(layers)

        self._busy(f"Segmenting {len(layers)} image layers ...")
        self.progress.setRange(0, len(layers))
        self.progress.setValue(0)
        self._run(work, returned=lambda n: self.status.setText(f"Applied the model to {n} image layers."),
                  yielded=self._applied_one)  # the bar stays full at the end

    def _applied_one(self, value) -> None:
        k, layer, labels = value
        self.progress.setValue(k + 1)
        if isinstance(labels, BaseException):
            show_error(f"{layer.name}: {labels}")
            return
        n = labels.ndim
        self._set_layer(f"{layer.name} segmentation", labels, Labels, opacity=0.45, scale=layer.scale[-n:],
                        translate=layer.translate[-n:])
        self.status.setText(f"{layer.name} segmented ({k + 1} of {self.progress.maximum()}).")

    def _applied(self, layer: ImageLayer, labels: np.ndarray) -> None:
        n = labels.ndim
        self._set_layer(f"{layer.name} segmentation", labels, Labels, opacity=0.45, scale=layer.scale[-n:],
                        translate=layer.translate[-n:])
        where = "" if isinstance(labels, np.ndarray) else f", its labels on disk in {self._on_disk}"
        self._idle(f"{layer.name} segmented{where}.")
