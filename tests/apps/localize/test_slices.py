"""The slice stage of the localizer (apps/localize/slices.py): x/y walls of elongated organs from per-slice votes."""

import copy
from pathlib import Path

import numpy as np
import pytest

from imageforest.apps.localize.model import OrganLocalizer
from imageforest.apps.localize.phantom import ORGANS, head_neck_phantom
from imageforest.apps.localize.slices import elongated, slice_medians
from imageforest.exceptions import InvalidInputError, ModelFormatError
from imageforest.imaging.ct_organs import OrganSlices

SMALL = dict(n_trees=2, max_depth=8, n_candidates=30, min_samples_leaf=10, points_per_scan=400, crops_per_scan=0,
             refine_trees=1, refine_min_samples_leaf=20, slice_trees=2, slice_points=300, random_state=0)
TUBES = [ORGANS.index("SpinalCord"), ORGANS.index("Esophagus")]


@pytest.fixture(scope="module")
def phantoms():
    return [head_neck_phantom(seed) for seed in (0, 1, 2, 6)]


@pytest.fixture(scope="module")
def model(phantoms):
    scans = [ct for ct, _ in phantoms[:3]]
    truths = [OrganSlices.from_labels(lab, list(range(1, 8))) for _, lab in phantoms[:3]]
    return OrganLocalizer(list(ORGANS), **SMALL).fit(scans, truths)


def test_slice_medians_follow_a_plain_reading_of_the_rule():
    rng = np.random.default_rng(0)
    slice_of = np.sort(rng.integers(0, 5, 300))
    slice_of[slice_of == 3] = 2  # slice 3 gets no vote
    values = rng.normal(0, 10, (300, 4))
    variances = rng.choice([1.0, 2.0, 3.0, np.inf], (300, 4))  # ties, and leaves that do not vote
    med, spread = slice_medians(slice_of, values, variances, 5, 0.3)
    for s in range(5):
        for k in range(4):
            rows = np.flatnonzero((slice_of == s) & np.isfinite(variances[:, k]))
            if rows.size == 0:
                assert np.isnan(med[s, k]) and np.isnan(spread[s, k])
                continue
            keep = max(1, int(0.3 * rows.size + 0.5))
            chosen = values[rows[np.argsort(variances[rows, k], kind="stable")[:keep]], k]
            assert med[s, k] == pytest.approx(np.median(chosen))
            assert spread[s, k] == pytest.approx(1.4826 * np.median(np.abs(chosen - np.median(chosen))))
    assert np.isnan(med[3]).all()


def test_elongated_organs_are_the_tubes():
    boxes = np.array([OrganSlices.from_labels(head_neck_phantom(s)[1], list(range(1, 8))).boxes() for s in (0, 1)])
    assert list(np.flatnonzero(elongated(boxes, 2.5))) == TUBES
    assert not elongated(boxes, None).any()
    assert elongated(boxes, 0.0).all()
    boxes[:, 0] = np.nan  # an organ no scan contours is never elongated
    assert not elongated(boxes, 0.0)[0]


def test_slice_stage_for_tubes_only_and_leaves_other_stages_alone(model, phantoms):
    assert [o for o, s in enumerate(model.slicers_) if s is not None] == TUBES
    scans = [ct for ct, _ in phantoms[:3]]
    truths = [OrganSlices.from_labels(lab, list(range(1, 8))) for _, lab in phantoms[:3]]
    off = OrganLocalizer(list(ORGANS), **{**SMALL, "slice_elongation": None}).fit(scans, truths)
    assert off.slicers_ == [None] * 7
    # The slice stage draws from its own random stream: the first and fine stages are the same with or without it.
    np.testing.assert_array_equal(off.forest_.params, model.forest_.params)
    for key, value in off.leaf_arrays().items():
        np.testing.assert_array_equal(model.leaf_arrays()[key], value)
    # Only the tubes' x/y walls change.
    ct = phantoms[3][0]
    for o, (a, b) in enumerate(zip(model.localize(ct).organs, off.localize(ct).organs, strict=True)):
        if o not in TUBES:
            np.testing.assert_array_equal(a.box_mm, b.box_mm)
        elif a.present:
            np.testing.assert_array_equal(a.box_mm[4:], b.box_mm[4:])
            assert np.all(np.isfinite(a.box_std_mm)) and np.all(a.box_mm[1::2] > a.box_mm[0::2])
    # Boxes alone (no label map) give no per-slice truth: no slice stage.
    boxes = OrganLocalizer(list(ORGANS), **SMALL).fit(scans, [t.boxes() for t in truths])
    assert boxes.slicers_ == [None] * 7


def test_slice_stage_finds_the_cords_bent_walls(model, phantoms):
    """The phantom's cord bends back at its lower end: the slice stage's x/y walls on an unseen phantom land
    within a few voxels of the truth (its fine grid is 2 mm; the phantom's voxels up to 4 mm)."""
    ct, lab = phantoms[3]
    truth = OrganSlices.from_labels(lab, list(range(1, 8))).boxes()
    cord = model.localize(ct).organs[TUBES[0]]
    assert cord.present
    assert np.abs(cord.box_mm[:4] - truth[TUBES[0], :4]).mean() < 6.0


def test_slice_stage_round_trips_and_older_files_load(model, phantoms, tmp_path: Path, legacy_layout):
    from imageforest.forest.serialization import load_model, save_model

    ct = phantoms[3][0]
    model.save(tmp_path / "m.npz")
    again = OrganLocalizer.load(tmp_path / "m.npz")
    for a, b in zip(model.localize(ct).organs, again.localize(ct).organs, strict=True):
        np.testing.assert_array_equal(a.box_mm, b.box_mm)
    meta, arrays = load_model(tmp_path / "m.npz")
    assert sorted(k for k in meta["forests"] if k.startswith("slice/")) == sorted(f"slice/{o}" for o in TUBES)
    bad = {k: (v[:, :3] if k == f"slice/{TUBES[0]}/leaf.mean" else v) for k, v in arrays.items()}
    save_model(tmp_path / "bad.npz", meta, bad)
    with pytest.raises(ModelFormatError, match=f"forest slice/{TUBES[0]}: array leaf.mean"):
        OrganLocalizer.load(tmp_path / "bad.npz")
    meta, arrays = legacy_layout(model)
    assert [h is not None for h in meta["slicers"]] == [o in TUBES for o in range(7)]
    # A file written before the slice stage existed loads without it and answers with the cascade's walls.
    old_arrays = {k: v for k, v in arrays.items() if not k.startswith("slice.")}
    old_meta = {k: v for k, v in meta.items() if k != "slicers"}
    save_model(tmp_path / "old.npz", old_meta, old_arrays)
    old = OrganLocalizer.load(tmp_path / "old.npz")
    assert old.slicers_ == [None] * 7
    cascade = copy.copy(model)
    cascade.slicers_ = [None] * 7
    for a, b in zip(old.localize(ct).organs, cascade.localize(ct).organs, strict=True):
        np.testing.assert_array_equal(a.box_mm, b.box_mm)
    # Damaged or inconsistent slice-stage entries are refused.
    bad = dict(arrays)
    key = f"slice.{TUBES[0]}.leaf.mean"
    bad[key] = bad[key][:, :3]
    save_model(tmp_path / "bad.npz", meta, bad)
    with pytest.raises(ModelFormatError, match=f"forest slice/{TUBES[0]}: array leaf.mean"):
        OrganLocalizer.load(tmp_path / "bad.npz")
    save_model(tmp_path / "bad2.npz", {**meta, "slicers": meta["slicers"][:2]}, arrays)
    with pytest.raises(ModelFormatError, match="slice-stage"):
        OrganLocalizer.load(tmp_path / "bad2.npz")


@pytest.mark.parametrize("setting", [{"slice_elongation": -1.0}, {"slice_fraction": 0.0}, {"slice_window": 0},
                                     {"slice_reach_mm": -5.0}])
def test_bad_slice_settings_are_refused(setting, phantoms):
    ct, lab = phantoms[0]
    with pytest.raises(InvalidInputError):
        OrganLocalizer(list(ORGANS), **{**SMALL, **setting}).fit([ct], [OrganSlices.from_labels(lab, [1, 2])])


def test_hand_written_median_matches_numpy():
    from imageforest.voting import median_inplace, select_kth

    rng = np.random.default_rng(1)
    for n in range(1, 40):
        a = rng.choice([0.5, 1.0, 2.0, rng.normal()], n) if n % 3 == 0 else rng.normal(size=n)
        assert median_inplace(a.copy(), n) == pytest.approx(np.median(a), abs=0)
        k = int(rng.integers(n))
        b = a.copy()
        assert select_kth(b, n, k) == np.sort(a)[k]
        assert np.all(b[:k] <= b[k]) and np.all(b[k + 1:] >= b[k])


def test_running_median_matches_scipy_median_filter():
    from scipy import ndimage

    from imageforest.apps.localize.slices import running_median

    rng = np.random.default_rng(2)
    for window in range(1, 9):
        for n in (1, 2, 5, 30):
            a = np.round(rng.normal(size=(n, 4)) * 3, 1)  # ties
            expected = ndimage.median_filter(a, size=(window, 1), mode="nearest")
            assert np.array_equal(running_median(a, window), expected)
