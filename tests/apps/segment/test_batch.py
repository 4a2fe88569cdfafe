"""`imageforest segment IMAGES... --model M -o OUT/`: one model load, outputs named after each image, a failure
is one line and the batch goes on, --resume skips finished images, the same masks as one image at a time."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image as PILImage

from imageforest.cli import main
from imageforest.imaging.io import Image, read_image, write_image

from .conftest import disc_picture, strokes


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("segment_batch")
    pictures = root / "pictures"
    pictures.mkdir()
    img, _ = disc_picture()
    PILImage.fromarray(img).save(root / "train.png")
    PILImage.fromarray(strokes(fg=1, bg=2)).save(root / "scribbles.png")
    r = run("segment", root / "train.png", "--scribbles", root / "scribbles.png", "-o", root / "train_mask.png",
            "--save-model", root / "m.npz")
    assert r.exit_code == 0, r.output
    discs = {}
    for seed in (3, 4, 5):
        picture, disc = disc_picture(seed=seed)
        PILImage.fromarray(picture).save(pictures / f"p{seed}.png")
        discs[f"p{seed}"] = disc
    (pictures / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not a picture")
    return root, discs


def test_a_folder_of_pictures_with_one_model(folder, tmp_path, monkeypatch):
    import imageforest.apps.segment.api as api
    import imageforest.batches as batches

    root, discs = folder
    out = tmp_path / "masks"
    loads = []
    original = api.load_segmentation_model
    monkeypatch.setattr(api, "load_segmentation_model", lambda path: loads.append(path) or original(path))
    monkeypatch.setattr(batches, "_WORKER_MODELS", {})
    r = run("segment", str(root / "pictures" / "p*.png"), "--model", root / "m.npz", "-o", out,
            "--overlay", tmp_path / "overlays")
    assert r.exit_code == 0, r.output
    report = json.loads((out / "batch_report.json").read_text())
    assert report["ok"] == 3 and report["failed"] == 0
    assert len(loads) == 1  # the model is loaded once for the whole batch
    for stem, disc in discs.items():
        mask = np.array(PILImage.open(out / f"{stem}.png"))
        assert np.sum((mask == 1) & disc) / np.sum((mask == 1) | disc) > 0.8
        single = tmp_path / f"{stem}_single.png"
        assert run("segment", root / "pictures" / f"{stem}.png", "--model", root / "m.npz", "-o", single).exit_code == 0
        assert np.array_equal(np.array(PILImage.open(single)), mask)  # the same mask as one image at a time
        document = json.loads((out / f"{stem}.json").read_text())
        assert [c["label"] for c in document["classes"]] == [1, 2]
        assert sum(c["pixels"] for c in document["classes"]) == disc.size
        assert document["classes"][0]["pixels"] == int((mask == 1).sum())
        assert (tmp_path / "overlays" / f"{stem}_overlay.png").is_file()


def test_a_failed_image_is_one_line_and_the_batch_goes_on(folder, tmp_path):
    root, _ = folder
    out = tmp_path / "masks"
    images = [root / "pictures" / "p3.png", root / "pictures" / "broken.png", root / "pictures" / "p4.png"]
    r = run("segment", *images, "--model", root / "m.npz", "-o", out)
    assert r.exit_code == 1
    assert "broken.png" in r.output and "Traceback" not in r.output
    report = json.loads((out / "batch_report.json").read_text())
    assert [e["status"] for e in report["entries"]] == ["ok", "failed", "ok"]
    assert (out / "p3.png").is_file() and (out / "p4.png").is_file() and not (out / "broken.png").exists()
    before = (out / "p3.json").stat().st_mtime_ns
    r = run("segment", *images, "--model", root / "m.npz", "-o", out, "--resume")
    report = json.loads((out / "batch_report.json").read_text())
    assert [e["status"] for e in report["entries"]] == ["skipped", "failed", "skipped"]
    assert (out / "p3.json").stat().st_mtime_ns == before


def test_volumes_get_volume_outputs(tmp_path):
    rng = np.random.default_rng(0)
    vol = rng.normal(0, 1, (12, 20, 20)).astype(np.float32)
    vol[4:8, 6:14, 6:14] += 6.0
    scribbles = np.zeros(vol.shape, np.uint8)
    scribbles[6, 8:12, 8:12] = 1
    scribbles[6, :2, :] = 2
    geometry = dict(spacing=np.array([1.0, 1.0, 2.0]), origin=np.zeros(3), direction=np.eye(3))
    write_image(Image(vol, **geometry), tmp_path / "a.nii.gz")
    write_image(Image(vol[::-1].copy(), **geometry), tmp_path / "b.nii.gz")
    write_image(Image(scribbles, **geometry), tmp_path / "s.nii.gz")
    r = run("segment", tmp_path / "a.nii.gz", "--scribbles", tmp_path / "s.nii.gz", "-o", tmp_path / "m0.nii.gz",
            "--save-model", tmp_path / "v.npz")
    assert r.exit_code == 0, r.output
    r = run("segment", tmp_path / "a.nii.gz", tmp_path / "b.nii.gz", "--model", tmp_path / "v.npz",
            "-o", tmp_path / "out", "--proba", tmp_path / "proba")
    assert r.exit_code == 0, r.output
    mask = read_image(tmp_path / "out" / "b.nii.gz")
    assert mask.array.shape == vol.shape and set(np.unique(mask.array)) == {1, 2}
    assert (tmp_path / "proba" / "a_proba.nii.gz").is_file()


@pytest.mark.parametrize("extra, message", [
    (("--scribbles", "s.png"), "a batch applies a saved model"),
    (("--model", "m.npz", "--smoothness", "2"), "--smoothness trains on scribbles"),
    (("--model", "m.npz", "--workers", "0"), "--workers must be at least 1"),
])
def test_batch_options_refused_in_one_line(folder, tmp_path, extra, message):
    root, _ = folder
    args = [a if not a.endswith((".png", ".npz")) else root / a for a in extra]
    r = run("segment", root / "pictures" / "p3.png", root / "pictures" / "p4.png", *args, "-o", tmp_path / "o")
    assert r.exit_code != 0 and message in r.output and "Traceback" not in r.output


def test_a_file_named_output_is_refused_as_a_batch_folder(folder, tmp_path):
    root, _ = folder
    r = run("segment", root / "pictures" / "p3.png", root / "pictures" / "p4.png", "--model", root / "m.npz",
            "-o", tmp_path / "mask.png")
    assert r.exit_code != 0 and "named like a file" in r.output and not (tmp_path / "mask.png").exists()


def _two_organ_volume(tmp_path):
    """A volume with two bright blocks (organs 1 and 2), an init that has organ 2 right and organ 1 shifted by
    four voxels, and scribbles that correct organ 1 (label 1) with background strokes (label 3)."""
    rng = np.random.default_rng(1)
    vol = rng.normal(0, 0.5, (16, 24, 24)).astype(np.float32)
    truth = np.zeros(vol.shape, np.uint8)
    truth[4:12, 4:10, 4:10] = 1
    truth[4:12, 14:20, 14:20] = 2
    vol[truth == 1] += 5.0
    vol[truth == 2] += 3.0
    init = np.zeros_like(truth)
    init[4:12, 8:14, 4:10] = 1  # shifted
    init[4:12, 14:20, 14:20] = 2
    init[4:12, 14:16, 14:16] = 0  # a notch the user does not correct: it must stay
    scribbles = np.zeros_like(truth)
    for z in (5, 8, 10):
        scribbles[z, 5:9, 5:9] = 1
        scribbles[z, 11:13, 4:10] = 3  # where the init wrongly put organ 1
        scribbles[z, 0:2, :] = 3
    geometry = dict(spacing=np.array([1.0, 1.0, 2.0]), origin=np.zeros(3), direction=np.eye(3))
    for name, arr in (("ct", vol), ("init", init), ("s", scribbles)):
        write_image(Image(arr, **geometry), tmp_path / f"{name}.nii.gz")
    return truth, init


def test_init_corrects_the_scribbled_organ_and_keeps_the_others(tmp_path):
    truth, init = _two_organ_volume(tmp_path)
    r = run("segment", tmp_path / "ct.nii.gz", "--scribbles", tmp_path / "s.nii.gz", "--init",
            tmp_path / "init.nii.gz", "-o", tmp_path / "mask.nii.gz", "--save-model", tmp_path / "m.npz")
    assert r.exit_code == 0, r.output
    mask = read_image(tmp_path / "mask.nii.gz").array
    from imageforest.apps.segment import SegmentationForest

    # the model is grown on the scribbles' numbers, not the init's 0 and unscribbled organs, and loads
    assert np.array_equal(SegmentationForest.load(tmp_path / "m.npz").classes_, [1, 3])
    assert set(np.unique(mask)) == {0, 1, 2}  # the init's numbering: 0 background, the strokes' 3 gone
    dice = 2 * np.sum((mask == 1) & (truth == 1)) / (np.sum(mask == 1) + np.sum(truth == 1))
    before = 2 * np.sum((init == 1) & (truth == 1)) / (np.sum(init == 1) + np.sum(truth == 1))
    assert before < 0.5 and dice > before + 0.3
    assert np.array_equal(mask == 2, init == 2)  # organ 2 was not scribbled: it did not move, notch included


@pytest.mark.parametrize("extra, message", [
    (("--background", "2"), "is an organ of the init"),
    (("--background", "5"), "paint the background with 5"),
])
def test_init_background_refused_in_one_line(tmp_path, extra, message):
    _two_organ_volume(tmp_path)
    r = run("segment", tmp_path / "ct.nii.gz", "--scribbles", tmp_path / "s.nii.gz", "--init",
            tmp_path / "init.nii.gz", "-o", tmp_path / "mask.nii.gz", *extra)
    assert r.exit_code == 1 and message in r.output and "Traceback" not in r.output
    assert not (tmp_path / "mask.nii.gz").exists()


def test_init_needs_scribbles_and_one_image(folder, tmp_path):
    root, _ = folder
    r = run("segment", root / "pictures" / "p3.png", "--model", root / "m.npz", "--init", root / "train_mask.png",
            "-o", tmp_path / "m.png")
    assert r.exit_code == 1 and "--init is corrected with scribbles" in r.output


def test_large_pictures_are_segmented_in_tiles_that_agree_with_the_whole(monkeypatch):
    import imageforest.apps.segment.model as model_module
    from imageforest.apps.segment import SegmentationSession

    img, _ = disc_picture()
    session = SegmentationSession(img)
    session.set_scribbles(strokes(fg=1, bg=2))
    session.update()
    forest = session.model()
    rng = np.random.default_rng(0)
    big = np.clip(np.tile(img, (4, 4, 1)).astype(np.int16) + rng.integers(-10, 10, (240, 320, 3)), 0, 255)
    big = big.astype(np.uint8)
    whole = forest.segment(big)
    tiled = forest.segment_tiles(big, tile=100, halo=64)  # tiles cut through the discs
    assert np.array_equal(tiled.labels, whole.labels)
    assert np.allclose(tiled.probabilities, whole.probabilities, atol=1e-6)
    from imageforest.estimators.base import numba_threads

    with numba_threads(1):  # tiles one after the other: the same values as tiles side by side
        alone = forest.segment_tiles(big, tile=100, halo=64)
    assert all(np.array_equal(a, b) for a, b in ((alone.labels, tiled.labels),
                                                 (alone.probabilities, tiled.probabilities),
                                                 (alone.uncertainty, tiled.uncertainty)))
    grey = big[..., 0]
    grey_forest = SegmentationSession(img[..., 0])
    grey_forest.set_scribbles(strokes(fg=1, bg=2))
    grey_forest.update()
    grey_model = grey_forest.model()
    assert np.array_equal(grey_model.segment_tiles(grey, tile=90).labels, grey_model.segment(grey).labels)
    monkeypatch.setattr(model_module, "TILED_ABOVE", 10_000)  # `segment` switches to tiles above it
    calls = []
    original = model_module.SegmentationForest.segment_tiles
    monkeypatch.setattr(model_module.SegmentationForest, "segment_tiles",
                        lambda self, *a, **k: calls.append(1) or original(self, *a, **k))
    assert np.array_equal(forest.segment(big).labels, whole.labels) and calls
    # labels only: no maps kept, the same labels, and each class's mean posterior from the tiles' sums
    lean = forest.segment(big, maps=False)
    assert lean.probabilities is None and lean.uncertainty is None
    assert np.array_equal(lean.labels, whole.labels)
    assert np.allclose(lean.mean_posterior(), whole.mean_posterior(), atol=1e-6)
    assert np.all((whole.mean_posterior() > 0.5) & (whole.mean_posterior() <= 1.0))
    da = pytest.importorskip("dask.array")
    lazy = da.from_array(big, chunks=(64, 64, 3))  # sliced tile by tile, never read whole
    assert np.array_equal(forest.segment(lazy, maps=False).labels, whole.labels)


def test_a_window_of_a_picture_has_the_whole_pictures_features_and_guide():
    """`prepare(..., window=...)`: the rows of the window's pixels alone, as the whole picture gives them where the
    filters' reach (48 pixels) stays inside what was read; a tile's margin is cut from the part its filters read."""
    from imageforest.apps.segment import SegmentationSession, prepare
    from imageforest.apps.segment.features import Tile
    from imageforest.exceptions import InvalidInputError

    img, _ = disc_picture()
    big = np.tile(img, (4, 4, 1))  # 240 x 320
    whole = prepare(big, rgb=True)
    h, w = big.shape[:2]
    # a tile read at rows 30.. and columns 70.. of the picture; the window keeps 48 pixels inside each cut side
    part = big[30:, 70:]
    rows, cols = slice(48, 120), slice(48, 200)
    seen = prepare(part, rgb=True, tile=Tile((30, 70), (h, w), None), window=(rows, cols))
    assert seen.shape == (72, 152) and seen.guide.shape == (1, 72, 152, 3)
    expected = whole.features.reshape(h, w, -1)[78:150, 118:270].reshape(-1, whole.features.shape[1])
    assert np.allclose(seen.features, expected, atol=1e-4)
    assert np.array_equal(seen.guide, whole.guide[:, 78:150, 118:270])
    session = SegmentationSession(img)
    session.set_scribbles(strokes(fg=1, bg=2))
    session.update()
    with pytest.raises(InvalidInputError, match="margin"):  # a margin wider than what the filters read
        session.model().segment_tiles(big, tile=64, halo=16, margin=32)


def test_a_picture_too_large_for_maps_segments_when_only_labels_are_written(folder, tmp_path, monkeypatch):
    """Labels alone take about a byte a pixel: a saved model takes larger pictures when no map is asked for."""
    import imageforest.apps.segment.image_files as image_files
    import imageforest.apps.segment.model as model_module

    root, _ = folder
    img, disc = disc_picture()
    big = np.tile(img, (3, 3, 1))
    PILImage.fromarray(big).save(tmp_path / "big.png")
    monkeypatch.setattr(image_files, "MAX_SEGMENT_PIXELS", 1000)
    monkeypatch.setattr(image_files, "MAX_APPLY_PIXELS", 10_000)  # below the picture's 43,200 pixels
    monkeypatch.setattr(image_files, "MAX_LABEL_PIXELS", 100_000)
    monkeypatch.setattr(model_module, "TILED_ABOVE", 5_000)
    r = run("segment", tmp_path / "big.png", "--model", root / "m.npz", "-o", tmp_path / "labels.png")
    assert r.exit_code == 0, r.output
    labels = np.asarray(PILImage.open(tmp_path / "labels.png"))
    fg = labels == 1
    truth = np.tile(disc, (3, 3))
    assert np.sum(fg & truth) / np.sum(fg | truth) > 0.85
    r = run("segment", tmp_path / "big.png", "--model", root / "m.npz", "-o", tmp_path / "again.png", "--proba",
            tmp_path / "p.npy")
    assert r.exit_code == 1 and "pixels" in r.output and not (tmp_path / "p.npy").exists()
