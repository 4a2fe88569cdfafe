"""Detection with viewpoints: folders of cropped views (the Weizmann cars' layout), leaves that keep azimuths, and
the azimuth each detection reports, on synthetic 'cars' whose look tells their heading."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image as PILImage
from scipy import ndimage

from tests.cli_helpers import one_line_error, run

AZIMUTHS = (0.0, 90.0, 180.0, 270.0)


def car(rng: np.random.Generator, azimuth: float, size: tuple[int, int] = (120, 160)
        ) -> tuple[np.ndarray, np.ndarray]:
    """A scene (h, w, 3) uint8 with one toy car seen at `azimuth` (0 side facing right, 90 its back, 180 side facing
    left, 270 its front) on textured ground, and its (1, 4) box.

    Side views are long (aspect 2) with a yellow bonnet at the front end; back and front views are short (aspect
    1.2), red lamps at the back and white ones at the front, left-right symmetric as a mirror needs."""
    h, w = size
    noise = ndimage.gaussian_filter(rng.normal(size=(h, w)), 3)
    noise = (noise - noise.min()) / (np.ptp(noise) + 1e-9)
    img = np.stack([60 + 60 * noise, 110 + 80 * noise, 40 + 40 * noise], axis=-1)
    side = azimuth in (0.0, 180.0)
    ow = int(rng.integers(60, 81)) if side else int(rng.integers(44, 56))
    oh = round(ow / (2.0 if side else 1.2))
    x0, y0 = int(rng.integers(0, w - ow)), int(rng.integers(0, h - oh))
    body = np.full((oh, ow, 3), (40.0, 60.0, 170.0))
    if side:
        front = slice(ow - ow // 4, ow) if azimuth == 0.0 else slice(0, ow // 4)
        body[:, front] = [240, 220, 40]
        body[oh - oh // 4:, :] = [20, 20, 20]  # wheels' band
    else:
        lamp = [230, 30, 30] if azimuth == 90.0 else [250, 250, 250]
        body[oh // 3:oh // 3 + oh // 5, 2:ow // 4] = lamp
        body[oh // 3:oh // 3 + oh // 5, ow - ow // 4:ow - 2] = lamp
    img[y0:y0 + oh, x0:x0 + ow] = body
    return np.clip(img, 0, 255).astype(np.uint8), np.array([[x0, y0, x0 + ow, y0 + oh]], dtype=np.float64)


def write_crop_folder(folder: Path, n: int, seed: int, bins: int = 4) -> Path:
    """n cropped views (tight boxes) with crops/, poses_{bins}_bins.txt and negatives/ as the Weizmann cars."""
    (folder / "crops").mkdir(parents=True)
    (folder / "negatives").mkdir()
    lines = [f"{n} 2 {bins}"]
    for k in range(n):
        rng = np.random.default_rng([seed, k])
        azimuth = AZIMUTHS[k % 4]
        img, box = car(rng, azimuth)
        x0, y0, x1, y1 = box[0].astype(int)
        PILImage.fromarray(img[y0:y1, x0:x1]).save(folder / "crops" / f"car_{k:03d}.png")
        cw, ch = x1 - x0, y1 - y0
        lines.append(f"car_{k:03d}.png 0 0 {cw} {ch} {cw // 2} {ch // 2} {azimuth:g} 90 {int(azimuth // 90)}")
    (folder / f"poses_{bins}_bins.txt").write_text("\n".join(lines) + "\n")
    for k in range(6):
        img, _ = car(np.random.default_rng([seed + 1, k]), 0.0)
        img[:] = ndimage.gaussian_filter(img, (4, 4, 0))  # blurred: texture, no sharp car
        PILImage.fromarray(img).save(folder / "negatives" / f"bg{k}.png")
    return folder


@pytest.fixture(scope="module")
def crop_folder(tmp_path_factory) -> Path:
    return write_crop_folder(tmp_path_factory.mktemp("cars"), 48, 31)


@pytest.fixture(scope="module")
def held_cars(tmp_path_factory) -> Path:
    """12 scenes never trained on, with boxes.json in the validation layout (box_xyxy and azimuth_deg)."""
    folder = tmp_path_factory.mktemp("held_cars")
    truth = {}
    for k in range(12):
        azimuth = AZIMUTHS[k % 4]
        img, box = car(np.random.default_rng([32, k]), azimuth)
        PILImage.fromarray(img).save(folder / f"scene{k:02d}.png")
        truth[f"scene{k:02d}.png"] = [{"box_xyxy": box[0].tolist(), "azimuth_deg": azimuth, "zenith_deg": 90}]
    (folder / "boxes.json").write_text(json.dumps(truth))
    return folder


SMALL = ["--trees", "4", "--depth", "10", "--candidates", "40", "--patches", "200", "--object-sizes", "0.3,0.6"]


@pytest.fixture(scope="module")
def car_model(crop_folder, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("car_model") / "cars.npz"
    r = run("train-detector", crop_folder, "-o", path, *SMALL, "--name", "toy-cars")
    assert r.exit_code == 0, r.output
    return path


def azimuth_errors(model_path: Path, held: Path) -> tuple[int, list[float]]:
    from imageforest.apps.detect.api import load_detector
    from imageforest.apps.detect.datasets import open_box_folder
    from imageforest.voting.hough import box_iou

    model = load_detector(model_path)
    data = open_box_folder(held)
    hits, errors = 0, []
    for name in data.names:
        rgb, truth = data.load(name)
        found = model.detect(rgb, threshold=0.0).detections
        if found and box_iou(np.array([found[0].box_xyxy]), truth)[0, 0] >= 0.5:
            hits += 1
            a = found[0].viewpoint[0]
            errors.append(abs((a - data.viewpoints(name)[0] + 180.0) % 360.0 - 180.0))
    return hits, errors


def test_crop_folders_are_read_with_their_viewpoints(crop_folder):
    from imageforest.apps.detect.datasets import is_crop_folder, open_crop_folder

    assert is_crop_folder(crop_folder)
    data = open_crop_folder(crop_folder)
    assert len(data.names) == 48 and data.negatives_dir is not None
    assert data.azimuth[:4].tolist() == list(AZIMUTHS)
    rgb, box = data.load(1)
    assert box.shape == (1, 4) and box[0, 2] == rgb.shape[1] and box[0, 3] == rgb.shape[0]


def test_a_crop_trained_detector_finds_cars_and_their_headings(car_model, held_cars):
    hits, errors = azimuth_errors(car_model, held_cars)
    assert hits >= 10  # of 12
    # the four headings are 90 degrees apart: a reading within 30 degrees names the right one
    assert np.mean(np.asarray(errors) <= 30.0) >= 0.8, errors


def test_azimuth_classes_give_headings_too(crop_folder, held_cars, tmp_path):
    path = tmp_path / "bins.npz"
    r = run("train-detector", crop_folder, "-o", path, *SMALL, "--viewpoint-bins", "4")
    assert r.exit_code == 0, r.output
    from imageforest.apps.detect.api import load_detector

    model = load_detector(path)
    assert model.viewpoint_bins == 4 and model.knows_viewpoints
    assert set(np.unique(model.votes_[:, 4])) <= {45.0, 135.0, 225.0, 315.0}  # the classes' centres
    hits, errors = azimuth_errors(path, held_cars)
    assert hits >= 10 and np.mean(np.asarray(errors) <= 50.0) >= 0.8, errors


def test_detect_reports_the_viewpoint_in_json_and_overlay(car_model, held_cars, tmp_path):
    out, overlay = tmp_path / "out", tmp_path / "ov.png"
    r = run("detect", held_cars / "scene00.png", "-o", out, "--model", car_model, "--overlay", overlay)
    assert r.exit_code == 0, r.output
    doc = json.loads((out / "scene00.json").read_text())
    assert doc["model"]["viewpoints"] is True
    view = doc["detections"][0]["viewpoint"]
    assert set(view) == {"azimuth_deg", "spread_deg"}
    assert 0.0 <= view["azimuth_deg"] < 360.0 and view["spread_deg"] >= 0.0
    pic = np.asarray(PILImage.open(overlay))
    assert pic.shape[1] == 2 * 160


def test_a_model_without_viewpoints_reports_none(tmp_path):
    from imageforest.apps.detect.api import load_detector

    model = load_detector()  # the horses: boxes only
    assert not model.knows_viewpoints
    img, _ = car(np.random.default_rng(5), 0.0)
    assert all(d.viewpoint is None and "viewpoint" not in d.to_json() for d in model.detect(img, 0.0).detections)


def test_mirroring_turns_the_heading():
    from imageforest.apps.detect.model import mirror

    rgb = np.zeros((10, 20, 3), np.float32)
    rgb[:, :5] = 1.0
    flipped, boxes, azimuth = mirror(rgb, np.array([[2.0, 1.0, 8.0, 9.0]]), np.array([30.0]))
    assert flipped[:, -5:].min() == 1.0 and boxes.tolist() == [[12.0, 1.0, 18.0, 9.0]]
    assert azimuth.tolist() == [150.0]


def test_viewpoint_of_reads_the_mode_and_a_front_back_ambiguity():
    from imageforest.voting.hough import VIEW_BINS, viewpoint_of

    hist = np.zeros(VIEW_BINS)
    hist[9] = 1.0  # the bin 90-100 degrees
    mode, spread = viewpoint_of(hist)
    assert mode == pytest.approx(95.0) and spread == pytest.approx(0.0)
    hist[35] = 0.5  # 355 degrees, across the wrap from 5
    hist[0] = 0.5
    hist[9] = 0.0
    mode, _ = viewpoint_of(hist)
    assert min(mode, 360 - mode) < 1.0
    both = np.zeros(VIEW_BINS)
    both[[9, 27]] = [1.0, 0.9]  # back and front
    mode, spread = viewpoint_of(both)
    assert mode == pytest.approx(95.0) and spread > 60.0


def test_saved_viewpoints_round_trip_and_bad_azimuths_are_refused(car_model, tmp_path):
    from imageforest.apps.detect.model import HoughForestDetector
    from imageforest.exceptions import ModelFormatError
    from imageforest.forest.serialization import load_model, save_model

    model = HoughForestDetector.load(car_model)
    assert model.votes_.shape[1] == 5 and model.flip and model.object_sizes == [0.3, 0.6]
    meta, arrays = load_model(car_model)
    arrays["votes"] = arrays["votes"].copy()
    arrays["votes"][0, 4] = 400.0
    bad = tmp_path / "bad.npz"
    save_model(bad, meta, arrays)
    with pytest.raises(ModelFormatError, match="azimuth"):
        HoughForestDetector.load(bad)


def test_bad_crop_folders_and_options_are_one_line(crop_folder, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(crop_folder, broken)
    poses = broken / "poses_4_bins.txt"
    lines = poses.read_text().splitlines()
    poses.write_text("\n".join(lines[:-1]) + "\n")  # one crop fewer than announced
    assert "announces 48 crops" in one_line_error(run("train-detector", broken, "-o", tmp_path / "m.npz"))
    poses.write_text("\n".join([lines[0], lines[1].replace(" 90 ", " ninety "), *lines[2:]]) + "\n")
    assert "must be numbers" in one_line_error(run("train-detector", broken, "-o", tmp_path / "m.npz"))
    poses.write_text("\n".join(lines) + "\n")
    (broken / "crops" / "car_005.png").unlink()
    assert "missing" in one_line_error(run("train-detector", broken, "-o", tmp_path / "m.npz"))
    assert "--viewpoint-bins" in one_line_error(run("train-detector", crop_folder, "-o", tmp_path / "m.npz",
                                                    "--viewpoint-bins", "1"))
    assert "--window-views" in one_line_error(run("train-detector", crop_folder, "-o", tmp_path / "m.npz",
                                                  "--window-views", "1"))
    assert "--object-sizes" in one_line_error(run("train-detector", crop_folder, "-o", tmp_path / "m.npz",
                                                  "--object-sizes", "0.5"))
    assert "--object-sizes" in one_line_error(run("train-detector", crop_folder, "-o", tmp_path / "m.npz",
                                                  "--object-sizes", "0.8,0.2"))
    assert not (tmp_path / "m.npz").exists()


def test_viewpoint_bins_need_viewpoints_in_the_data(scenes, tmp_path):
    line = one_line_error(run("train-detector", scenes, "-o", tmp_path / "m.npz", "--viewpoint-bins", "4"))
    assert "viewpoint" in line and "none" in line


def test_crops_alone_cannot_say_how_large_objects_are():
    from imageforest.apps.detect.model import HoughForestDetector
    from imageforest.exceptions import InvalidInputError

    crops = [np.random.default_rng(k).random((30, 50, 3)) for k in range(3)]
    boxes = [np.array([[0, 0, 50, 30]]) for _ in crops]
    background = [np.random.default_rng(9).random((80, 80, 3))]
    with pytest.raises(InvalidInputError, match="object_sizes"):
        HoughForestDetector(2, max_depth=4, patches_per_image=20).fit(crops, boxes, background)


def test_view_radius_sets_the_disc_the_viewpoint_is_read_from(car_model, held_cars, tmp_path, monkeypatch):
    import imageforest.apps.detect.model as detector_module
    from imageforest.apps.detect.datasets import open_box_folder
    from imageforest.apps.detect.model import HoughForestDetector
    from imageforest.exceptions import InvalidInputError

    model = HoughForestDetector.load(car_model)
    assert model.view_radius == 0.06  # files saved before the setting read their viewpoints as new ones do
    model.view_radius = 0.25
    model.save(tmp_path / "wide.npz")
    wide = HoughForestDetector.load(tmp_path / "wide.npz")
    assert wide.view_radius == 0.25

    radii = []
    real = detector_module.peak_viewpoints
    monkeypatch.setattr(detector_module, "peak_viewpoints", lambda *a: radii.append(a[-1]) or real(*a))
    data = open_box_folder(held_cars)
    rgb, _ = data.load(data.names[0])
    assert wide.detect(rgb, threshold=0.0).detections[0].viewpoint is not None
    assert radii and set(radii) == {round(0.25 * wide.object_size)}
    with pytest.raises(InvalidInputError, match="view_radius"):
        HoughForestDetector(view_radius=2.0).fit([rgb], [np.array([[0, 0, 10, 10]])])


def test_the_window_classifier_reads_the_heading_and_weighs_the_votes(car_model, held_cars, monkeypatch):
    from imageforest.apps.detect.datasets import open_box_folder
    from imageforest.apps.detect.model import HoughForestDetector
    from imageforest.apps.detect.window_views import n_window_features, window_histograms
    from imageforest.imaging.channels import as_rgb

    model = HoughForestDetector.load(car_model)
    assert model.window_views == 16 and model.window_forest_.n_features_in_ == n_window_features()
    data = open_box_folder(held_cars)
    right = []
    for name in data.names:  # the window alone, in the truth's box
        rgb, truth = data.load(name)
        if data.viewpoints(name)[0] in (0.0, 180.0):  # a side view's heading is its shape (its back and front
            # views differ by their lamps' colour, which the grey descriptor does not read)
            hist = window_histograms(model.window_forest_, model.window_views, as_rgb(rgb), truth)[0]
            mode = (np.argmax(hist) + 0.5) * 10.0
            right.append(abs((mode - data.viewpoints(name)[0] + 180.0) % 360.0 - 180.0) <= 22.5)
    assert len(right) == 6 and all(right), right
    # detect multiplies the window's posterior into the votes' histogram: a window sure of the back view (90
    # degrees) turns the reading of a side view's votes (scene 0, azimuth 0) to the back
    sure = np.full(36, 1e-6)
    sure[8:10] = 1.0
    monkeypatch.setattr("imageforest.apps.detect.window_views.window_histograms",
                        lambda forest, classes, rgb, boxes: np.tile(sure, (len(boxes), 1)))
    rgb, _ = data.load(data.names[0])
    found = model.detect(rgb, threshold=0.0).detections
    assert found and 80.0 <= found[0].viewpoint[0] <= 100.0, found[0]


def test_models_without_a_window_classifier_load_and_a_forged_one_is_refused(car_model, crop_folder, tmp_path):
    from imageforest.apps.detect.model import HoughForestDetector
    from imageforest.exceptions import ModelFormatError
    from imageforest.forest.serialization import load_model, save_model

    meta, arrays = load_model(car_model)
    # a file written before the window classifier existed: the votes alone read the viewpoint
    old_meta = {k: v for k, v in meta.items() if k != "window_classifier"}
    old = {k: v for k, v in arrays.items() if not k.startswith("window.")}
    save_model(tmp_path / "old.npz", old_meta, old)
    model = HoughForestDetector.load(tmp_path / "old.npz")
    assert model.window_forest_ is None and model.knows_viewpoints
    img, _ = car(np.random.default_rng(5), 0.0)
    assert all(d.viewpoint is not None for d in model.detect(img, 0.0).detections)
    # classes beyond window_views
    forged = dict(arrays)
    forged["window.classes"] = arrays["window.classes"] + 40
    save_model(tmp_path / "forged.npz", meta, forged)
    with pytest.raises(ModelFormatError, match="azimuth classes"):
        HoughForestDetector.load(tmp_path / "forged.npz")
    # the seed fixes the whole file, the window classifier's bytes included
    from imageforest.apps.detect.training import train_detector

    a, _ = train_detector(crop_folder, n_trees=2, max_depth=6, n_candidates=20, patches_per_image=60,
                          object_sizes=(0.3, 0.6), flip=True, random_state=3, n_jobs=1)
    b, _ = train_detector(crop_folder, n_trees=2, max_depth=6, n_candidates=20, patches_per_image=60,
                          object_sizes=(0.3, 0.6), flip=True, random_state=3, n_jobs=2)
    a.save(tmp_path / "a.npz")
    b.save(tmp_path / "b.npz")
    assert (tmp_path / "a.npz").read_bytes() == (tmp_path / "b.npz").read_bytes()
    r = run("train-detector", crop_folder, "-o", tmp_path / "off.npz", *SMALL[:4], "--patches", "60",
            "--object-sizes", "0.3,0.6", "--window-views", "0")
    assert r.exit_code == 0, r.output
    assert HoughForestDetector.load(tmp_path / "off.npz").window_forest_ is None
    off = HoughForestDetector(2, max_depth=6, n_candidates=20, patches_per_image=60, object_sizes=(0.3, 0.6),
                              window_views=0, random_state=3)
    rgb, box = car(np.random.default_rng(1), 0.0)
    rgb2, box2 = car(np.random.default_rng(2), 180.0)
    off.fit([rgb, rgb2], [box, box2], viewpoints=[[0.0], [180.0]])
    assert off.window_forest_ is None
