"""The dock widget driven as a user would: add an image, press Start, paint, wait for the worker, read the layers."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("napari")
pytest.importorskip("pytestqt")
if not os.environ.get("DISPLAY") and os.environ.get("QT_QPA_PLATFORM") != "offscreen":
    # Qt would abort the whole run without a display; pytest-xvfb provides one when Xvfb is installed
    pytest.skip("no display: install Xvfb (plugins/napari-imageforest/system-packages.sh)", allow_module_level=True)

from imageforest.apps.segment.synthetic import disc_picture
from napari_imageforest import _widget
from napari_imageforest._widget import SegmentationWidget

WAIT_MS = 60000


def paint_line(layer, label: int, points) -> None:
    layer.selected_label = label
    for p in points:
        layer.paint(p, label)


def paint_disc_strokes(scribbles) -> None:
    """A short stroke of label 1 in the disc, three dabs of label 2 around it."""
    scribbles.brush_size = 3
    paint_line(scribbles, 1, [(30, 36), (30, 40)])
    paint_line(scribbles, 2, [(5, 10), (5, 20), (55, 70)])


def settled(widget) -> bool:
    return not widget.busy and not widget.pending


@pytest.fixture
def started(make_napari_viewer, qtbot):
    viewer = make_napari_viewer()
    img, disc = disc_picture()
    viewer.add_image(img, name="picture", rgb=True)
    viewer.add_image(disc_picture(seed=4)[0], name="other", rgb=True)
    widget = SegmentationWidget(viewer)
    viewer.window.add_dock_widget(widget)
    widget.image_combo.setCurrentText("picture")
    widget.start_button.click()
    qtbot.waitUntil(lambda: widget.session is not None and settled(widget), timeout=WAIT_MS)
    return viewer, widget, disc


def test_painting_segments_the_picture(started, qtbot):
    viewer, widget, disc = started
    scribbles = viewer.layers["scribbles"]
    assert scribbles.data.shape == disc.shape and scribbles.mode == "paint"
    scribbles.brush_size = 3
    paint_line(scribbles, 1, [(30, x) for x in range(32, 44, 2)])  # several strokes: stale updates are dropped
    paint_line(scribbles, 2, [(5, x) for x in range(5, 30, 3)] + [(y, 70) for y in range(50, 57, 3)])
    qtbot.waitUntil(lambda: "segmentation" in viewer.layers and settled(widget), timeout=WAIT_MS)
    seg = viewer.layers["segmentation"].data
    fg = seg == 1
    assert np.sum(fg & disc) / np.sum(fg | disc) > 0.9
    prob = viewer.layers["probability"].data
    assert prob.shape == disc.shape and prob[disc].mean() > 0.7 and prob[~disc].mean() < 0.2
    unc = viewer.layers["uncertainty"].data
    assert unc.shape == disc.shape and 0 <= unc.min() and unc.max() <= np.log(2) + 1e-6
    points = viewer.layers["suggestions"].data
    assert 1 <= len(points) <= 5
    first = widget.next_suggestion()
    assert np.allclose(_widget._camera(viewer).center[-2:], first)
    assert np.array_equal(viewer.layers["scribbles"].data[scribbles.data > 0],
                          scribbles.data[scribbles.data > 0])  # strokes kept


def test_scribbles_set_from_python_start_an_update(started, qtbot):
    viewer, widget, disc = started
    marks = np.zeros(disc.shape, np.uint8)
    marks[28:33, 34:40] = 1
    marks[:3] = 2
    viewer.layers["scribbles"].data = marks
    qtbot.waitUntil(lambda: "segmentation" in viewer.layers and settled(widget), timeout=WAIT_MS)
    fg = viewer.layers["segmentation"].data == 1
    assert np.sum(fg & disc) / np.sum(fg | disc) > 0.8


def test_only_painted_regions_when_the_box_is_ticked(make_napari_viewer, qtbot):
    """Two like discs, strokes on the left one: the right one joins its label until "Only regions I painted" is
    ticked, which updates the segmentation at once."""
    viewer = make_napari_viewer()
    img, disc = disc_picture(shape=(60, 160))
    twin = np.roll(disc, 80, axis=1)
    img[twin] = img[disc]
    viewer.add_image(img, name="twins", rgb=True)
    widget = SegmentationWidget(viewer)
    viewer.window.add_dock_widget(widget)
    widget.image_combo.setCurrentText("twins")
    widget.start_button.click()
    qtbot.waitUntil(lambda: widget.session is not None and settled(widget), timeout=WAIT_MS)
    paint_disc_strokes(viewer.layers["scribbles"])
    qtbot.waitUntil(lambda: "segmentation" in viewer.layers and settled(widget), timeout=WAIT_MS)
    assert np.mean(viewer.layers["segmentation"].data[twin] == 1) > 0.9
    widget.stroke_regions.setChecked(True)
    qtbot.waitUntil(lambda: settled(widget) and np.mean(viewer.layers["segmentation"].data[twin] == 2) > 0.9,
                    timeout=WAIT_MS)
    assert widget.session.stroke_regions and np.mean(viewer.layers["segmentation"].data[disc] == 1) > 0.9


def test_model_save_load_and_apply_to_another_layer(started, qtbot, tmp_path):
    viewer, widget, _ = started
    paint_disc_strokes(viewer.layers["scribbles"])
    qtbot.waitUntil(lambda: "segmentation" in viewer.layers and settled(widget), timeout=WAIT_MS)
    widget.save_model(tmp_path / "model.npz")
    assert (tmp_path / "model.npz").is_file()
    widget.load_model(tmp_path / "model.npz")
    widget.target_combo.setCurrentText("other")
    widget.apply_button.click()
    qtbot.waitUntil(lambda: "other segmentation" in viewer.layers and settled(widget), timeout=WAIT_MS)
    other_disc = disc_picture(seed=4)[1]
    fg = viewer.layers["other segmentation"].data == 1
    assert np.sum(fg & other_disc) / np.sum(fg | other_disc) > 0.85


def test_a_model_of_pictures_segments_every_frame_of_a_stack(started, qtbot):
    viewer, widget, _ = started
    paint_disc_strokes(viewer.layers["scribbles"])
    qtbot.waitUntil(lambda: "segmentation" in viewer.layers and settled(widget), timeout=WAIT_MS)
    frames = [disc_picture(seed=s) for s in (7, 8, 9)]
    viewer.add_image(np.stack([f[0] for f in frames]), name="stack", rgb=True)
    widget.apply_to(viewer.layers["stack"])
    qtbot.waitUntil(lambda: "stack segmentation" in viewer.layers and settled(widget), timeout=WAIT_MS)
    labels = viewer.layers["stack segmentation"].data
    assert labels.shape == (3, 60, 80)
    for k, (_, disc) in enumerate(frames):
        fg = labels[k] == 1
        assert np.sum(fg & disc) / np.sum(fg | disc) > 0.85


def test_a_single_class_is_reported_and_the_scribbles_stay(started, qtbot, monkeypatch):
    viewer, widget, _ = started
    said = []
    monkeypatch.setattr(_widget, "show_info", said.append)
    scribbles = viewer.layers["scribbles"]
    paint_line(scribbles, 1, [(30, 36)])
    qtbot.waitUntil(lambda: bool(said) and settled(widget), timeout=WAIT_MS)
    assert "Only label 1 is painted" in said[-1]
    assert scribbles.data[30, 36] == 1 and "segmentation" not in viewer.layers


def test_errors_go_to_the_notifications(started, qtbot, monkeypatch, tmp_path):
    _, widget, _ = started
    said = []
    monkeypatch.setattr(_widget, "show_error", said.append)
    (tmp_path / "bad.npz").write_bytes(b"not a model")
    widget.load_model(tmp_path / "bad.npz")
    assert said and "bad.npz" in said[-1]
    widget.target_combo.setCurrentText("other")
    widget.apply_button.click()  # no model yet
    assert "no model yet" in said[-1]


def test_volume_with_spacing(make_napari_viewer, qtbot):
    viewer = make_napari_viewer()
    rng = np.random.default_rng(1)
    zz, yy, xx = np.mgrid[:16, :32, :32]
    ball = ((zz - 8) * 2.0) ** 2 + (yy - 16) ** 2 + (xx - 15) ** 2 < 9 ** 2
    vol = (np.where(ball, 60.0, 0.0) + rng.normal(0, 10, ball.shape)).astype(np.float32)
    viewer.add_image(vol, name="volume", scale=(2.0, 1.0, 1.0))
    widget = SegmentationWidget(viewer)
    viewer.window.add_dock_widget(widget)
    widget.start(viewer.layers["volume"])
    qtbot.waitUntil(lambda: widget.session is not None and settled(widget), timeout=WAIT_MS)
    assert np.allclose(widget.session.prepared.spacing, [2.0, 1.0, 1.0])
    scribbles = viewer.layers["scribbles"]
    data = scribbles.data.copy()
    data[8, 14:18, 13:17] = 1
    data[8, 2:5, 2:30] = 2
    data[3, 28:31, 2:20] = 2
    scribbles.data = data
    widget.request_update()  # what a finished stroke does
    qtbot.waitUntil(lambda: "segmentation" in viewer.layers and settled(widget), timeout=WAIT_MS)
    seg = viewer.layers["segmentation"].data == 1
    assert 2 * np.sum(seg & ball) / (seg.sum() + ball.sum()) > 0.85


def test_scribbles_correct_the_contoured_organs(make_napari_viewer, qtbot):
    """The 'organs' layer (as Contour organs adds it) is where the segmentation starts: the painted organ moves to
    the scribbles, the organ left alone keeps its voxels, and the labels stay in the organs' numbering."""
    viewer = make_napari_viewer()
    rng = np.random.default_rng(2)
    vol = rng.normal(0, 0.5, (16, 24, 24)).astype(np.float32)
    truth = np.zeros(vol.shape, np.uint8)
    truth[4:12, 4:10, 4:10] = 1
    vol[truth == 1] += 5.0
    vol[4:12, 14:20, 14:20] += 3.0
    organs = np.zeros_like(truth)
    organs[4:12, 8:14, 4:10] = 1  # the automatic organ 1 is off by four voxels
    organs[4:12, 15:20, 15:20] = 2
    viewer.add_image(vol, name="ct", scale=(2.0, 1.0, 1.0))
    viewer.add_labels(organs, name="organs", scale=(2.0, 1.0, 1.0))
    widget = SegmentationWidget(viewer)
    viewer.window.add_dock_widget(widget)
    assert widget.from_organs.isChecked()
    widget.start(viewer.layers["ct"])
    qtbot.waitUntil(lambda: widget.session is not None and settled(widget), timeout=WAIT_MS)
    data = viewer.layers["scribbles"].data.copy()
    for z in (5, 8, 10):
        data[z, 5:9, 5:9] = 1
        data[z, 11:13, 4:10] = 3
        data[z, 0:2, :] = 3
    viewer.layers["scribbles"].data = data
    qtbot.waitUntil(lambda: "segmentation" in viewer.layers and settled(widget), timeout=WAIT_MS)
    seg = viewer.layers["segmentation"].data
    assert set(np.unique(seg)) == {0, 1, 2}
    assert np.array_equal(seg == 2, organs == 2)
    assert 2 * np.sum((seg == 1) & (truth == 1)) / (np.sum(seg == 1) + np.sum(truth == 1)) > 0.6


def test_apply_to_every_image_layer_with_a_progress_bar(started, qtbot, monkeypatch):
    viewer, widget, _ = started
    paint_disc_strokes(viewer.layers["scribbles"])
    qtbot.waitUntil(lambda: "segmentation" in viewer.layers and settled(widget), timeout=WAIT_MS)
    viewer.add_image(np.zeros((8, 9, 10), np.float32), name="a volume")  # not the model's kind: reported, skipped
    said = []
    monkeypatch.setattr(_widget, "show_error", said.append)
    widget.apply_all_button.click()
    qtbot.waitUntil(lambda: "other segmentation" in viewer.layers and settled(widget), timeout=WAIT_MS)
    assert "picture segmentation" in viewer.layers and "a volume segmentation" not in viewer.layers
    assert widget.progress.value() == widget.progress.maximum() == 3
    assert len(said) == 1 and said[0].startswith("a volume:")
    assert set(np.unique(viewer.layers["other segmentation"].data)) <= {1, 2}


def test_save_the_segmentation_as_one_file_or_per_class(started, qtbot, tmp_path):
    from PIL import Image as PILImage

    viewer, widget, _ = started
    paint_disc_strokes(viewer.layers["scribbles"])
    qtbot.waitUntil(lambda: "segmentation" in viewer.layers and settled(widget), timeout=WAIT_MS)
    written = widget.save_segmentation(tmp_path / "seg.png")
    saved = np.array(PILImage.open(written[0]))
    assert np.array_equal(saved, viewer.layers["segmentation"].data)
    masks = widget.save_segmentation(tmp_path / "seg.tif", per_class=True)
    assert [p.name for p in masks] == ["seg_1.tif", "seg_2.tif"]
    first = np.array(PILImage.open(masks[0]))
    assert set(np.unique(first)) <= {0, 1} and np.array_equal(first == 1, saved == 1)


def test_saving_a_volume_segmentation_keeps_its_voxel_size(make_napari_viewer, qtbot, tmp_path):
    from imageforest.imaging.io import read_image

    viewer = make_napari_viewer()
    rng = np.random.default_rng(3)
    vol = rng.normal(0, 1, (10, 16, 16)).astype(np.float32)
    vol[3:7, 5:11, 5:11] += 6
    viewer.add_image(vol, name="volume", scale=(2.5, 0.8, 0.8), translate=(10.0, 0.0, 0.0))
    widget = SegmentationWidget(viewer)
    viewer.window.add_dock_widget(widget)
    widget.start(viewer.layers["volume"])
    qtbot.waitUntil(lambda: widget.session is not None and settled(widget), timeout=WAIT_MS)
    data = viewer.layers["scribbles"].data.copy()
    data[5, 7:9, 7:9] = 1
    data[5, 0:2, :] = 2
    viewer.layers["scribbles"].data = data
    qtbot.waitUntil(lambda: "segmentation" in viewer.layers and settled(widget), timeout=WAIT_MS)
    saved = read_image(widget.save_segmentation(tmp_path / "seg.nii.gz")[0])
    assert np.allclose(saved.spacing, [0.8, 0.8, 2.5]) and np.allclose(saved.origin, [0.0, 0.0, 10.0])
    assert np.array_equal(saved.array, viewer.layers["segmentation"].data)


def test_undoing_a_stroke_updates_the_segmentation(started, qtbot):
    viewer, widget, _ = started
    scribbles = viewer.layers["scribbles"]
    paint_disc_strokes(scribbles)
    qtbot.waitUntil(lambda: "segmentation" in viewer.layers and settled(widget), timeout=WAIT_MS)
    scribbles.brush_size = 3
    paint_line(scribbles, 3, [(45, 10)])  # one dab of a third class (one step of the layer's history)
    qtbot.waitUntil(lambda: settled(widget) and 3 in widget.session.result.classes, timeout=WAIT_MS)
    scribbles.undo()  # napari's own undo (Ctrl+Z) takes the stroke back
    qtbot.waitUntil(lambda: settled(widget) and 3 not in widget.session.result.classes, timeout=WAIT_MS)
    assert 3 not in np.unique(viewer.layers["segmentation"].data)


def test_a_locked_label_keeps_its_pixels_through_new_strokes(started, qtbot):
    viewer, widget, _ = started
    scribbles = viewer.layers["scribbles"]
    paint_disc_strokes(scribbles)
    qtbot.waitUntil(lambda: "segmentation" in viewer.layers and settled(widget), timeout=WAIT_MS)
    before = viewer.layers["segmentation"].data == 1
    scribbles.selected_label = 1
    widget.lock_button.click()
    assert "Label 1 is locked" in widget.status.text()
    scribbles.brush_size = 3
    paint_line(scribbles, 2, [(30, 38)])  # a background dab in the middle of the locked disc
    paint_line(scribbles, 1, [(5, 60)])  # and a disc dab far outside it
    qtbot.waitUntil(lambda: settled(widget) and widget.session.result is not None
                    and widget.session.scribbles[30, 38] == 2, timeout=WAIT_MS)
    assert np.array_equal(viewer.layers["segmentation"].data == 1, before)
    widget.unlock_button.click()
    assert widget.session.locked == {}
    last = widget.session.result
    paint_line(scribbles, 2, [(40, 38)])
    qtbot.waitUntil(lambda: settled(widget) and widget.session.result is not last, timeout=WAIT_MS)
    assert viewer.layers["segmentation"].data[30, 38] == 2  # unlocked: the strokes count


def test_the_first_cut_shows_while_the_colour_rounds_run(started, qtbot, monkeypatch):
    viewer, widget, disc = started
    shown, kinds = [], []
    real = widget._arrived

    def arrived(value):
        real(value)
        generation, kind, payload = value
        kinds.append(kind)
        if kind == "preview":
            shown.append(payload is not None and "segmentation" in viewer.layers)
            if payload is not None:  # the layer holds the first cut until the refined result replaces it
                assert np.array_equal(viewer.layers["segmentation"].data, payload)
        elif generation == widget.generation:  # the result is shown before its suggestions come
            assert np.array_equal(viewer.layers["segmentation"].data, payload.labels)

    monkeypatch.setattr(widget, "_arrived", arrived)
    marks = np.zeros(disc.shape, np.uint8)
    marks[28:33, 34:40] = 1
    marks[2:6, 2:70] = 2
    viewer.layers["scribbles"].data = marks
    qtbot.waitUntil(lambda: "segmentation" in viewer.layers and settled(widget), timeout=WAIT_MS)
    assert any(shown)  # the colour rounds (on for pictures) were previewed
    assert kinds[-1] == "result" and "suggestions" in viewer.layers
    seg = viewer.layers["segmentation"].data
    assert np.sum((seg == 1) & disc) / np.sum((seg == 1) | disc) > 0.85


def test_a_multiscale_dask_layer_is_painted_coarse_and_segmented_at_full_resolution(make_napari_viewer, qtbot,
                                                                                    monkeypatch):
    da = pytest.importorskip("dask.array")
    from napari_imageforest import _layers

    viewer = make_napari_viewer()
    img, disc = disc_picture()
    full = np.repeat(np.repeat(img, 2, axis=0), 2, axis=1)  # 120 x 160, a pyramid of two levels
    viewer.add_image([da.from_array(full, chunks=(64, 64, 3)), da.from_array(img, chunks=(32, 32, 3))],
                     name="pyramid", rgb=True, multiscale=True, scale=(0.5, 0.5))
    monkeypatch.setattr(_widget, "SESSION_PIXELS", disc.size)  # as if level 0 were too large to paint on
    assert _layers.level_of(viewer.layers["pyramid"], disc.size).level == 1
    widget = SegmentationWidget(viewer)
    viewer.window.add_dock_widget(widget)
    widget.image_combo.setCurrentText("pyramid")
    widget.start_button.click()
    qtbot.waitUntil(lambda: widget.session is not None and settled(widget), timeout=WAIT_MS)
    scribbles = viewer.layers["scribbles"]
    assert scribbles.data.shape == disc.shape and np.allclose(scribbles.scale, (1.0, 1.0))  # level 1 in the world
    assert "level 1" in widget.status.text()
    paint_disc_strokes(scribbles)
    qtbot.waitUntil(lambda: "segmentation" in viewer.layers and settled(widget), timeout=WAIT_MS)
    seg = viewer.layers["segmentation"]
    assert np.allclose(seg.scale, (1.0, 1.0))
    fg = seg.data == 1
    assert np.sum(fg & disc) / np.sum(fg | disc) > 0.85
    widget.apply_to(viewer.layers["pyramid"])  # a saved model's labels: full resolution
    qtbot.waitUntil(lambda: "pyramid segmentation" in viewer.layers and settled(widget), timeout=WAIT_MS)
    out = viewer.layers["pyramid segmentation"]
    big_disc = np.repeat(np.repeat(disc, 2, axis=0), 2, axis=1)
    assert out.data.shape == big_disc.shape and np.allclose(out.scale, (0.5, 0.5))
    fg = out.data == 1
    assert np.sum(fg & big_disc) / np.sum(fg | big_disc) > 0.8


def test_strokes_painted_on_a_sagittal_view_of_a_volume(make_napari_viewer, qtbot):
    """A user rolls the axes to look at the volume from the side (z and y on screen, x on the slider) and paints
    there: each stroke lies in one x plane across many axial slices, and the segmentation follows it."""
    viewer = make_napari_viewer()
    rng = np.random.default_rng(3)
    _, yy, xx = np.mgrid[:20, :24, :24]
    tube = (yy - 12) ** 2 + (xx - 11) ** 2 < 4 ** 2  # a tube along z
    vol = (np.where(tube, 50.0, 0.0) + rng.normal(0, 8, tube.shape)).astype(np.float32)
    viewer.add_image(vol, name="volume")
    widget = SegmentationWidget(viewer)
    viewer.window.add_dock_widget(widget)
    widget.start(viewer.layers["volume"])
    qtbot.waitUntil(lambda: widget.session is not None and settled(widget), timeout=WAIT_MS)
    scribbles = viewer.layers["scribbles"]
    viewer.dims.order = (2, 0, 1)  # x on the slider; z and y displayed
    viewer.dims.set_point(2, 11)
    assert tuple(scribbles._slice_input.displayed) == (0, 1)
    scribbles.brush_size = 2
    paint_line(scribbles, 1, [(z, 12, 11) for z in range(2, 18, 2)])  # down the tube
    paint_line(scribbles, 2, [(z, 3, 11) for z in range(2, 18, 2)] + [(z, 21, 11) for z in range(2, 18, 2)])
    painted = np.argwhere(scribbles.data > 0)
    assert set(painted[:, 2]) == {11} and np.ptp(painted[:, 0]) >= 14  # one sagittal plane, many axial slices
    qtbot.waitUntil(lambda: "segmentation" in viewer.layers and settled(widget), timeout=WAIT_MS)
    seg = viewer.layers["segmentation"].data == 1
    assert 2 * np.sum(seg & tube) / (seg.sum() + tube.sum()) > 0.8


def test_a_large_lazy_picture_keeps_its_labels_on_disk_and_saves_them_as_ome_zarr(started, qtbot, tmp_path,
                                                                                    monkeypatch):
    """A dask-backed picture over `ON_DISK_PIXELS` is segmented tile by tile into an on-disk zarr array, which the
    Labels layer shows; "Save segmentation" writes it to OME-Zarr (whole and per class) with the same labels."""
    da = pytest.importorskip("dask.array")
    zarr = pytest.importorskip("zarr")
    import imageforest.apps.segment.model as model_module
    from imageforest.imaging.ome_zarr import read_ome_zarr

    viewer, widget, _ = started
    paint_disc_strokes(viewer.layers["scribbles"])
    qtbot.waitUntil(lambda: "segmentation" in viewer.layers and settled(widget), timeout=WAIT_MS)
    img, disc = disc_picture(seed=4)
    big, truth = np.tile(img, (3, 4, 1)), np.tile(disc, (3, 4))  # 180 x 320
    viewer.add_image(da.from_array(big, chunks=(64, 64, 3)), name="slide", rgb=True)
    monkeypatch.setattr(model_module, "TILED_ABOVE", 5_000)  # tiles, as for a picture of gigapixels
    monkeypatch.setattr(_widget, "ON_DISK_PIXELS", 10_000)
    widget.target_combo.setCurrentText("slide")
    widget.apply_button.click()
    qtbot.waitUntil(lambda: "slide segmentation" in viewer.layers and settled(widget), timeout=WAIT_MS)
    out = viewer.layers["slide segmentation"].data
    assert isinstance(out, zarr.Array) and widget.labels_folder() in Path(str(out.store.root)).parents
    labels = np.asarray(out)
    fg = labels == 1
    assert np.sum(fg & truth) / np.sum(fg | truth) > 0.85
    assert np.array_equal(labels, widget.current_model().segment_tiles(big).labels)
    assert "on disk" in widget.status.text()
    written = widget.save_segmentation(tmp_path / "slide.ome.zarr", layer="slide segmentation")
    assert np.array_equal(read_ome_zarr(written[0]).array, labels)
    masks = widget.save_segmentation(tmp_path / "slide.ome.zarr", per_class=True, layer="slide segmentation")
    assert [p.name for p in masks] == ["slide_1.ome.zarr", "slide_2.ome.zarr"]
    assert np.array_equal(read_ome_zarr(masks[0]).array == 1, fg)
