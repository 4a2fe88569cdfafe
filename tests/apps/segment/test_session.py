"""The interactive session and the segmentation model: accuracy on known regions, suggestions, files, bad input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from imageforest.apps.segment import SegmentationForest, SegmentationSession
from imageforest.exceptions import InvalidInputError
from imageforest.imaging.io import Image

from .conftest import disc_picture, strokes


def iou(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.sum(a & b) / np.sum(a | b))


def test_rgb_picture_from_three_strokes(picture):
    img, disc = picture
    session = SegmentationSession(img)
    session.set_scribbles(strokes())
    result = session.update()
    assert result.labels.shape == disc.shape and result.labels.dtype == np.uint8
    assert iou(result.labels == 1, disc) > 0.9
    assert np.allclose(result.probabilities.sum(axis=-1), 1.0, atol=1e-5)
    assert result.uncertainty.shape == disc.shape and 0 <= result.uncertainty.min()
    assert result.uncertainty.max() <= np.log(2) + 1e-6
    assert np.array_equal(result.classes, [1, 2])
    scr = strokes()
    assert np.all(result.labels[scr > 0] == scr[scr > 0])  # scribbled pixels keep their label


def test_each_ingredient_can_be_switched_off(picture):
    img, disc = picture
    for options in ({"geodesic_weight": 0.0}, {"smoothness": 0.0}, {"geodesic_weight": 0.0, "smoothness": 0.0}):
        session = SegmentationSession(img, **options)
        session.set_scribbles(strokes())
        assert iou(session.update().labels == 1, disc) > 0.7, options


def test_grey_picture_and_scribble_numbers_are_kept(picture):
    img, disc = picture
    grey = img[..., 0].astype(np.float64)  # the red channel: the disc stands out in it
    session = SegmentationSession(grey)
    session.set_scribbles(strokes(fg=7, bg=3))
    result = session.update()
    assert set(np.unique(result.labels)) == {3, 7}
    assert iou(result.labels == 7, disc) > 0.85


def three_bands() -> tuple[np.ndarray, np.ndarray]:
    """A noisy picture of three vertical bands (30 columns each) and one stroke per band, labels 1, 2, 3."""
    rng = np.random.default_rng(2)
    img = np.zeros((40, 90))
    img[:, 30:60] = 50
    img[:, 60:] = 100
    img += rng.normal(0, 8, img.shape)
    scr = np.zeros(img.shape, dtype=np.uint8)
    scr[20, 5:20], scr[20, 38:52], scr[20, 70:85] = 1, 2, 3
    return img, scr


def test_three_classes():
    img, scr = three_bands()
    session = SegmentationSession(img)
    session.set_scribbles(scr)
    labels = session.update().labels
    truth = np.repeat([1, 2, 3], 30)[None, :].repeat(40, axis=0)
    assert np.mean(labels == truth) > 0.95


def test_volume_with_spacing(ball_volume):
    vol, ball, scr = ball_volume
    image = Image(vol, np.array([1.0, 1.0, 2.0]), np.zeros(3), np.eye(3))
    session = SegmentationSession(image)
    assert np.allclose(session.prepared.spacing, [2.0, 1.0, 1.0])  # (z, y, x) from the Image's (x, y, z)
    session.set_scribbles(scr)
    labels = session.update().labels
    dice = 2 * np.sum((labels == 1) & ball) / (np.sum(labels == 1) + np.sum(ball))
    assert dice > 0.85


def test_add_scribbles_and_suggestions(picture):
    img, _ = picture
    session = SegmentationSession(img)
    scr = strokes()
    session.set_scribbles(np.where(scr == 1, 1, 0))
    session.add_scribbles(np.where(scr == 2, 2, 0))
    assert np.array_equal(session.scribbles, scr)
    session.update()
    points = session.suggest(3)
    assert 1 <= points.shape[0] <= 3 and points.shape[1] == 2
    assert np.all(scr[tuple(points.T)] == 0)  # never where the user already painted
    unc = session.result.uncertainty
    assert unc[tuple(points[0])] > np.median(unc)


def test_model_round_trip_and_other_images(picture, tmp_path: Path):
    img, _ = picture
    session = SegmentationSession(img)
    session.set_scribbles(strokes())
    session.update()
    model = session.model()
    model.save(tmp_path / "m.npz")
    loaded = SegmentationForest.load(tmp_path / "m.npz")
    other, other_disc = disc_picture(seed=5)
    a, b = model.segment(other), loaded.segment(other)
    assert np.array_equal(a.labels, b.labels) and np.allclose(a.probabilities, b.probabilities)
    assert iou(a.labels == 1, other_disc) > 0.9
    with pytest.raises(InvalidInputError, match="trained on rgb images with 3"):
        loaded.segment(other.mean(axis=2))  # grey: another channel count


def test_a_picture_model_segments_every_frame_of_a_stack(picture):
    img, _ = picture
    session = SegmentationSession(img)
    session.set_scribbles(strokes())
    session.update()
    frames = [disc_picture(seed=s) for s in (11, 12)]
    labels = session.model().segment_frames(np.stack([f[0] for f in frames]))
    assert labels.shape == (2, 60, 80)
    for k, (_, disc) in enumerate(frames):
        assert iou(labels[k] == 1, disc) > 0.85


def test_same_bytes_whatever_the_thread_count(picture, tmp_path: Path):
    img, _ = picture
    files = []
    for threads in (1, 2):
        session = SegmentationSession(img, forest=SegmentationForest(n_jobs=threads))
        session.set_scribbles(strokes())
        session.update()
        session.model().save(tmp_path / f"m{threads}.npz")
        files.append((tmp_path / f"m{threads}.npz").read_bytes())
    assert files[0] == files[1]


@pytest.mark.parametrize("scribbles, message", [
    (np.zeros((60, 80), np.uint8), "no class"),
    (np.where(strokes() == 1, 1, 0), "a single class"),
    (np.zeros((61, 80), np.uint8), "do not match|shape"),
    (strokes().astype(np.float64) - 3.0, ">= 0"),
    (strokes().astype(np.float64) + 0.5, "whole numbers"),
])
def test_bad_scribbles(picture, scribbles, message):
    img, _ = picture
    session = SegmentationSession(img)
    with pytest.raises(InvalidInputError, match=message):
        session.set_scribbles(scribbles)
        session.update()


@pytest.mark.parametrize("image, message", [
    (np.full((20, 20), np.nan), "NaN"),
    (np.zeros((4, 5, 6, 7)), "4 dimensions"),
    (np.zeros((1, 30)), "too small"),
    (np.array([["a", "b"], ["c", "d"]]), "numbers"),
])
def test_bad_images(image, message):
    with pytest.raises(InvalidInputError, match=message):
        SegmentationSession(image)


def test_nothing_to_suggest_before_an_update(picture):
    with pytest.raises(InvalidInputError, match="before the first update"):
        SegmentationSession(picture[0]).suggest(2)


def test_a_locked_class_keeps_its_pixels_until_unlocked():
    img, scr = three_bands()
    session = SegmentationSession(img)
    with pytest.raises(InvalidInputError, match="before the first update"):
        session.lock(2)
    session.set_scribbles(scr)
    first = session.update().labels.copy()
    session.lock(2)
    # strokes of class 1 across the middle band, and of class 2 in the right band: neither may move class 2
    more = scr.copy()
    more[5:35, 45] = 1
    more[10, 70:85] = 2
    session.set_scribbles(more)
    locked = session.update().labels
    assert np.array_equal(locked == 2, first == 2)
    assert np.all(locked[more == 1] == np.where(first[more == 1] == 2, 2, 1))
    # a locked class without strokes this time keeps its pixels too
    session.set_scribbles(np.where(scr == 2, 0, scr))
    assert np.array_equal(session.update().labels == 2, first == 2)
    session.unlock(2)
    session.set_scribbles(more)
    assert not np.array_equal(session.update().labels == 2, first == 2)  # the new strokes now count
    with pytest.raises(InvalidInputError, match="no pixels"):
        session.lock(9)
    with pytest.raises(InvalidInputError, match=">= 1"):
        session.lock(0)


def two_blobs() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A red blob on each side of a green picture; the foreground stroke lies in the left one only and background
    strokes fence in the right one. Returns the picture, the strokes and the two blobs' masks."""
    rng = np.random.default_rng(0)
    h, w = 60, 120
    yy, xx = np.mgrid[:h, :w]
    left = (yy - 30) ** 2 + (xx - 25) ** 2 < 15 ** 2
    right = (yy - 30) ** 2 + (xx - 95) ** 2 < 12 ** 2
    img = np.zeros((h, w, 3))
    img[:] = (40, 120, 40)
    img[left | right] = (200, 60, 60)
    img = np.clip(img + rng.normal(0, 12, img.shape), 0, 255).astype(np.uint8)
    scr = np.zeros((h, w), np.uint8)
    scr[28:32, 18:32] = 1
    scr[5:8, 40:115] = 2
    scr[52:55, 40:115] = 2
    scr[10:50, 75:78] = 2
    return img, scr, left, right


def test_colour_rounds_reach_a_region_no_stroke_reaches():
    img, scr, left, right = two_blobs()
    plain = SegmentationSession(img, colour_weight=0.0)
    plain.set_scribbles(scr)
    result = plain.update()
    # the background strokes fence the right blob in: the geodesic term gives it to the background
    assert np.mean(result.labels[right] == 1) < 0.1 and "colour" not in result.timing_s
    session = SegmentationSession(img, colour_weight=0.3, colour_rounds=2)
    session.set_scribbles(scr)
    result = session.update()
    # the foreground's colour model, fitted to the left blob the cut gave it, claims the right one
    assert np.mean(result.labels[right] == 1) > 0.9 and np.mean(result.labels[left] == 1) > 0.9
    assert np.mean(result.labels[~(left | right)] == 2) > 0.97
    assert np.all(result.labels[scr > 0] == scr[scr > 0]) and result.timing_s["colour"] > 0
    assert np.allclose(result.probabilities.sum(axis=-1), 1.0, atol=1e-5)


def test_stroke_regions_keep_only_the_regions_a_class_was_painted_in():
    """With `stroke_regions` the right blob, which the colour rounds give the foreground although no foreground
    stroke touches it, goes back to the background; the painted blob stays. Off (the default), both are kept."""
    img, scr, left, right = two_blobs()
    both = SegmentationSession(img)
    both.set_scribbles(scr)
    assert not both.stroke_regions and np.mean(both.update().labels[right] == 1) > 0.9
    painted = SegmentationSession(img, stroke_regions=True)
    painted.set_scribbles(scr)
    labels = painted.update().labels
    assert np.mean(labels[right] == 2) == 1.0 and np.mean(labels[left] == 1) > 0.9
    assert np.all(labels[scr > 0] == scr[scr > 0])
    both.lock(1)  # a locked class keeps its pixels, the unpainted blob among them
    both.stroke_regions = True
    assert np.mean(both.update().labels[right] == 1) > 0.9


def test_colour_settings_default_by_image_kind_and_are_checked(picture, ball_volume):
    from imageforest.apps.segment.recipe import PICTURE

    session = SegmentationSession(picture[0])
    assert (session.colour_weight, session.colour_rounds) == (PICTURE["colour_weight"], PICTURE["colour_rounds"])
    assert SegmentationSession(ball_volume[0], spacing=(2.0, 1.0, 1.0)).colour_weight == 0.0
    with pytest.raises(InvalidInputError, match="colour_weight"):
        SegmentationSession(picture[0], colour_weight=1.5)
    with pytest.raises(InvalidInputError, match="colour_rounds"):
        SegmentationSession(picture[0], colour_rounds=-1)


def test_the_first_cut_is_previewed_while_the_colour_rounds_run():
    img, scr, _, right = two_blobs()
    plain = SegmentationSession(img, colour_weight=0.0)
    plain.set_scribbles(scr)
    first = plain.update().labels
    session = SegmentationSession(img, colour_weight=0.3, colour_rounds=2)
    session.set_scribbles(scr)
    steps = session.update_steps()
    assert [next(steps) for _ in range(3)] == ["forest", "geodesic", "graph_cut"]
    assert np.array_equal(session.preview, first) and session.preview.dtype == first.dtype
    with pytest.raises(StopIteration) as done:
        next(steps)
    result = done.value.value  # the generator's return value rides on its StopIteration
    assert session.preview is None and not np.array_equal(result.labels, first)
    assert np.mean(result.labels[right] == 1) > 0.9


def test_a_stroke_sweeps_only_its_own_class(ball_volume):
    vol, _, scr = ball_volume
    session = SegmentationSession(vol, spacing=(2.0, 1.0, 1.0))
    first = np.where(scr == 2, 0, scr)
    first[3, 28:31, 2:20] = 0
    first[8, 2:5, 2:30] = 2  # one background stroke first
    session.set_scribbles(first)
    session.update()
    before = {c: entry[2] for c, entry in session._geodesic.items()}
    session.set_scribbles(scr)  # the second background stroke
    result = session.update()
    assert session._geodesic[1][2] is before[1]  # the object's scribbles did not change: its distances stay
    grown = session._geodesic[2][2]
    fresh = SegmentationSession(session.prepared)
    fresh.set_scribbles(scr)
    again = fresh.update()
    assert np.all(grown <= fresh._geodesic[2][2]) and np.any(grown < before[2])
    assert np.mean(result.labels == again.labels) > 0.99
    session.set_scribbles(first)  # a stroke taken back (undo): that class is swept afresh
    session.update()
    assert np.array_equal(session._geodesic[2][2], before[2])
    session.set_scribbles(np.where(scr == 2, 3, scr))  # a class no longer painted leaves the cache
    session.update()
    assert set(session._geodesic) == {1, 3}


def test_after_a_stroke_the_forest_is_applied_where_its_answer_may_move(monkeypatch):
    from imageforest.apps.segment.model import SegmentationForest

    rng = np.random.default_rng(4)
    zz, yy, xx = np.mgrid[:24, :64, :64]
    ball = (zz - 12) ** 2 + (yy - 32) ** 2 + (xx - 32) ** 2 < 8 ** 2
    vol = (np.where(ball, 60.0, 0.0) + rng.normal(0, 4, ball.shape)).astype(np.float32)
    first = np.zeros(ball.shape, dtype=np.int16)
    first[12, 30:34, 30:34] = 1
    first[12, 2:5, 2:60] = 2
    scr = first.copy()
    scr[20, 55:60, 5:40] = 2  # the next background stroke
    rows = []
    real = SegmentationForest._posterior_of_checked
    monkeypatch.setattr(SegmentationForest, "_posterior_of_checked",
                        lambda self, x: rows.append(len(x)) or real(self, x))
    session = SegmentationSession(vol)
    session.set_scribbles(first)
    session.update()
    # a first update: every second voxel along each axis, then every voxel of the blocks at the ball's surface
    assert rows[0] == 12 * 32 * 32 and 0 < rows[1] < vol.size // 2, rows
    coarse_to_fine = session._forest_post[3]
    rows.clear()
    before = session._geodesic[2][2].reshape(vol.shape)
    session.set_scribbles(scr)
    local = session.update()
    # the background's distances are swept again within 40 mm of its new stroke (y >= 15 here), kept beyond
    after = session._geodesic[2][2].reshape(vol.shape)
    assert np.array_equal(after[:, :15], before[:, :15]) and np.all(after <= before)
    assert np.any(after[:, 15:] < before[:, 15:])
    assert rows[0] == 6 * 16 * 16 and 0 < rows[1] < vol.size // 2, rows  # the sparse sample, then the band
    full = SegmentationSession(session.prepared, local_updates=False)
    full.set_scribbles(first)
    full.update()
    assert rows[-1] == vol.size
    assert np.mean(coarse_to_fine.argmax(axis=1) == full._forest_post[3].argmax(axis=1)) > 0.999
    rows.clear()
    full.set_scribbles(scr)
    everywhere = full.update()
    assert rows == [vol.size]
    assert np.mean(local.labels == everywhere.labels) > 0.995
    rows.clear()
    session.set_scribbles(np.where(scr == 2, 3, scr))  # new classes: coarse to fine again, nothing kept
    session.update()
    assert rows[0] == 12 * 32 * 32 and len(rows) == 2


def test_uncertainty_is_the_posteriors_entropy():
    from imageforest.apps.segment.model import entropy

    p = np.random.default_rng(0).dirichlet(np.ones(4), size=(30, 20))
    p[0, 0] = [1.0, 0.0, 0.0, 0.0]
    with np.errstate(divide="ignore", invalid="ignore"):
        expected = -np.sum(np.where(p > 0, p * np.log(p), 0.0), axis=-1)
    h = entropy(p.astype(np.float32))
    assert h.shape == (30, 20) and h.dtype == np.float32 and h[0, 0] == 0
    assert np.allclose(h, expected, atol=1e-6)


def test_the_geodesic_sweeps_keep_the_callers_thread_count(ball_volume, monkeypatch):
    import numba

    import imageforest.apps.segment.session as session_module
    from imageforest.estimators.base import numba_threads

    vol, _, scr = ball_volume
    seen = []
    real = session_module.geodesic_distances

    def recording(*args, **kwargs):
        seen.append(numba.get_num_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(session_module, "geodesic_distances", recording)
    session = SegmentationSession(vol, spacing=(2.0, 1.0, 1.0))
    session.set_scribbles(scr)
    with numba_threads(1):  # as `imageforest segment --threads 1` runs it
        session.update()
    assert seen == [1]


def test_a_short_stroke_beside_many_scribbled_pixels_keeps_its_class():
    """More scribbled pixels than the forest takes: a class of a few pixels is still among them, so the forest
    knows it and the update labels it (it used to be left out of the draw, and the update failed)."""
    rng = np.random.default_rng(3)
    vol = rng.normal(0.0, 1.0, (24, 40, 40)).astype(np.float32)
    vol[10:14, 18:22, 18:22] += 6.0  # a small bright cube
    scr = np.zeros(vol.shape, np.int64)
    scr[:, :4, :] = 1  # 24 x 4 x 40 = 3,840 background pixels
    scr[:, -4:, :] = 1
    scr[12, 19:21, 19:21] = 2  # 4 pixels of the cube
    session = SegmentationSession(vol, max_training_pixels=100)  # one pixel in 38 drawn: the 4 would be left out
    session.set_scribbles(scr)
    result = session.update()
    assert list(result.classes) == [1, 2]
    assert np.all(result.labels[12, 19:21, 19:21] == 2) and np.sum(result.labels == 2) < 2000


def tube_volume() -> tuple[np.ndarray, np.ndarray]:
    """A bright tube along z through a whole (40, 24, 24) volume, and strokes of it (1) on slices 15, 20 and 25 with
    background (2) around it there: the organ a user means stops somewhere, the tube does not."""
    rng = np.random.default_rng(3)
    _, yy, xx = np.mgrid[:40, :24, :24]
    tube = (yy - 12) ** 2 + (xx - 12) ** 2 < 4 ** 2
    vol = np.where(tube, 80.0, 0.0) + rng.normal(0, 8, tube.shape)
    scr = np.zeros(tube.shape, dtype=np.int16)
    for z in (15, 20, 25):
        scr[z][(yy[z] - 12) ** 2 + (xx[z] - 12) ** 2 < 3 ** 2] = 1
        ring = ((yy[z] - 12) ** 2 + (xx[z] - 12) ** 2 > 6 ** 2) & ((yy[z] - 12) ** 2 + (xx[z] - 12) ** 2 < 9 ** 2)
        scr[z][ring] = 2
    return vol.astype(np.float32), scr


def test_a_class_painted_on_slices_reaches_a_spacing_beyond_them():
    from imageforest.apps.segment.session import stroke_extents

    vol, scr = tube_volume()
    bounds = stroke_extents(scr, np.array([1, 2]), 2, 1.0)
    assert bounds == [(0, 0, 10, 30)]  # along z only: in-plane its strokes are one run; the background is free
    session = SegmentationSession(vol, spacing=(2.0, 1.0, 1.0))
    session.set_scribbles(scr)
    along = np.flatnonzero((session.update().labels == 1).any(axis=(1, 2)))
    assert along[0] >= 10 and along[-1] <= 30 and along.size >= 18
    session.extent_margin = np.inf  # unbounded, the tube carries the class through the volume
    along = np.flatnonzero((session.update().labels == 1).any(axis=(1, 2)))
    assert along[0] == 0 and along[-1] == 39
    with pytest.raises(InvalidInputError, match="extent_margin"):
        SegmentationSession(vol, extent_margin=-1.0)
    assert SegmentationSession(vol).extent_margin == 1.0


def test_strokes_on_one_slice_bound_nothing():
    from imageforest.apps.segment.session import stroke_extents

    scr = np.zeros((10, 20, 20), dtype=np.int16)
    scr[5, 4:16, 3] = 1  # two separate lines on one axial slice: separate along x, but one slice along z
    scr[5, 4:16, 9] = 1
    scr[2, :, :2] = 2
    assert stroke_extents(scr, np.array([1, 2]), 2, 1.0) == []
    scr[7, 4:16, 3] = 1  # the same class on a second slice: its extent along z is bounded, x too
    assert sorted(b[1] for b in stroke_extents(scr, np.array([1, 2]), 2, 1.0)) == [0, 2]


def test_geodesic_steps_across_the_scribbled_slices_count_less():
    from imageforest.apps.segment.session import stroke_runs

    vol, scr = tube_volume()
    flat = scr.ravel().astype(np.int64)
    index = np.flatnonzero(flat)
    classes = np.unique(flat[index])
    session = SegmentationSession(vol, spacing=(2.0, 1.0, 1.0))
    assert session.slice_path_scale == 0.5
    assert np.allclose(session._path_spacing(stroke_runs(scr, classes, 2, index)), [1.0, 1.0, 1.0])  # z, across
    session.set_scribbles(scr)
    session.update()
    halved = session._geodesic[1][2].reshape(scr.shape)
    plain = SegmentationSession(vol, spacing=(2.0, 1.0, 1.0), slice_path_scale=1.0)
    assert np.allclose(plain._path_spacing(stroke_runs(scr, classes, 2, index)), [2.0, 1.0, 1.0])
    plain.set_scribbles(scr)
    plain.update()
    full = plain._geodesic[1][2].reshape(scr.shape)
    # along the tube, 10 slices above the top stroke (the intensity noise costs the same either way)
    assert full[35, 12, 12] - halved[35, 12, 12] > 5.0  # 20 mm of steps across the slices against 10
    single = np.zeros_like(scr)
    single[20] = scr[20]  # strokes on one slice: no axis to discount
    f1 = single.ravel().astype(np.int64)
    assert np.allclose(session._path_spacing(stroke_runs(single, classes, 2, np.flatnonzero(f1))), [2.0, 1.0, 1.0])
    with pytest.raises(InvalidInputError, match="slice_path_scale"):
        SegmentationSession(vol, slice_path_scale=0.0)
