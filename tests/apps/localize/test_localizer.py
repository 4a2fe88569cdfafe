"""CT organ localization: phantom, training, voting, model files, presence out of view."""

import copy
from pathlib import Path

import numpy as np
import pytest

from imageforest.apps.localize.coarse import with_edge_prior
from imageforest.apps.localize.evaluate import OrganScores
from imageforest.apps.localize.model import OrganLocalizer, boxes_in_view
from imageforest.apps.localize.phantom import ORGANS, head_neck_phantom
from imageforest.apps.localize.report import box_label_map, localization_json
from imageforest.apps.localize.snapping import voxel_box
from imageforest.exceptions import InvalidInputError, ModelFormatError
from imageforest.imaging.ct import crop_z, visible_share
from imageforest.imaging.ct_organs import OrganSlices, box_to_index
from imageforest.imaging.io import Image

SMALL = dict(n_trees=4, max_depth=10, n_candidates=30, min_samples_leaf=10, points_per_scan=600, crops_per_scan=1,
             random_state=0)


@pytest.fixture(scope="module")
def phantoms():
    return [head_neck_phantom(seed) for seed in range(7)]


@pytest.fixture(scope="module")
def small_model(phantoms):
    scans = [ct for ct, _ in phantoms[:6]]
    truths = [OrganSlices.from_labels(lab, list(range(1, 8))) for _, lab in phantoms[:6]]
    # two trees per fine and slice stage, 400 voxels per scan: the accuracy checks below hold with the same margins
    return OrganLocalizer(list(ORGANS), **SMALL, refine_trees=2, refine_points=400, slice_trees=2).fit(scans, truths)


def test_phantom_is_deterministic_and_anatomical():
    ct1, lab1 = head_neck_phantom(3)
    ct2, lab2 = head_neck_phantom(3)
    assert np.array_equal(ct1.array, ct2.array) and np.array_equal(lab1.array, lab2.array)
    assert ct1.array.dtype == np.int16 and set(np.unique(lab1.array)) == set(range(8))
    boxes = OrganSlices.from_labels(lab1, list(range(1, 8))).boxes()
    name = {n: k for k, n in enumerate(ORGANS)}
    # LPS: the right parotid has the smaller x; the brainstem lies above the larynx; the mandible is anterior.
    assert boxes[name["RightParotid"], 1] < boxes[name["LeftParotid"], 0]
    assert boxes[name["Brainstem"], 4] > boxes[name["Larynx"], 5]
    assert boxes[name["Mandible"], 2] < boxes[name["Brainstem"], 2]
    assert not np.array_equal(head_neck_phantom(4)[0].array, ct1.array)


def test_localizes_unseen_phantom(small_model, phantoms):
    ct, lab = phantoms[6]
    truth = OrganSlices.from_labels(lab, list(range(1, 8))).boxes()
    result = small_model.localize(ct)
    scores = OrganScores(list(ORGANS))
    scores.add(np.array([o.box_mm for o in result.organs]), np.array([o.present for o in result.organs]), truth)
    assert scores.presence_accuracy() == 1.0
    assert scores.mean_wall_error() < 8.0, scores.rows()
    for o in result.organs:
        assert np.all(o.box_mm[1::2] > o.box_mm[0::2]) and np.all(o.box_std_mm >= 0)


def test_organs_cut_out_of_view_are_absent(small_model, phantoms):
    ct, lab = phantoms[6]
    slices = OrganSlices.from_labels(lab, list(range(1, 8)))
    low = crop_z(ct, 0, ct.array.shape[0] * 2 // 5)  # neck and shoulders only
    truth = boxes_in_view(slices, low, 7)
    result = small_model.localize(low)
    head = [ORGANS.index(n) for n in ("Brainstem", "RightParotid", "LeftParotid")]
    assert np.all(np.isnan(truth[head, 0]))
    assert not any(result.organs[k].present for k in head)


def test_json_and_mask_follow_the_schema(small_model, phantoms):
    ct, _ = phantoms[6]
    result = small_model.localize(ct)
    doc = localization_json(result, ct, "p.nii.gz", {"name": "t", "version": "1"}, {"read": 0.1, "total": 0.2})
    assert doc["coordinate_system"] == "LPS" and doc["units"] == "mm"
    for name, e in doc["organs"].items():
        assert name in ORGANS and isinstance(e["present"], bool) and 0 <= e["probability"] <= 1
        if e["present"]:
            for axis in "xyz":
                lo, hi = e["box_mm"][axis]
                assert lo < hi and len(e["box_std_mm"][axis]) == 2
            assert all(0 <= i <= j < s for i, j, s in zip(e["box_index"]["min"], e["box_index"]["max"],
                                                            ct.size, strict=True))
            # box_mm is the outer faces of the extreme voxels of box_index (identity direction here)
            faces = ct.index_to_physical(np.array([np.array(e["box_index"]["min"]) - 0.5,
                                                   np.array(e["box_index"]["max"]) + 0.5]))
            assert np.allclose([e["box_mm"][a] for a in "xyz"], faces.T, atol=0.01)
        else:
            assert "box_mm" not in e
    mask = box_label_map(result, ct)
    assert mask.array.shape == ct.array.shape and mask.array.max() <= 7
    present = [k + 1 for k, o in enumerate(result.organs) if o.present]
    assert set(np.unique(mask.array)) - {0} <= set(present)


def test_model_file_round_trip_and_determinism(small_model, phantoms, tmp_path: Path):
    path = tmp_path / "m.npz"
    small_model.save(path)
    loaded = OrganLocalizer.load(path)
    ct, _ = phantoms[6]
    a, b = small_model.localize(ct), loaded.localize(ct)
    for x, y in zip(a.organs, b.organs, strict=True):
        np.testing.assert_array_equal(x.box_mm, y.box_mm)
        assert x.present == y.present
    scans = [c for c, _ in phantoms[:3]]
    truths = [OrganSlices.from_labels(lab, list(range(1, 8))) for _, lab in phantoms[:3]]
    params = {**SMALL, "n_trees": 2, "max_depth": 6, "refine_trees": 2, "refine_points": 300, "slice_trees": 2,
              "slice_points": 300}
    OrganLocalizer(list(ORGANS), **params, n_jobs=1).fit(scans, truths).save(tmp_path / "one.npz")
    OrganLocalizer(list(ORGANS), **params, n_jobs=2).fit(scans, truths).save(tmp_path / "two.npz")
    assert (tmp_path / "one.npz").read_bytes() == (tmp_path / "two.npz").read_bytes()
    with pytest.raises(ModelFormatError):
        from imageforest import ClassificationForest

        ClassificationForest.load(path)


def test_bad_training_input(phantoms):
    ct, _ = phantoms[0]
    with pytest.raises(InvalidInputError):
        OrganLocalizer([], **SMALL).fit([ct], [np.zeros((0, 6))])
    with pytest.raises(InvalidInputError):
        OrganLocalizer(list(ORGANS), **SMALL).fit([ct], [])


def test_body_edges_are_the_outer_faces_of_body_voxels():
    from imageforest.imaging.ct import body_edges
    from imageforest.imaging.io import Image

    arr = np.full((10, 12, 14), -1000.0, dtype=np.float32)
    arr[2:5, 3:9, 4:6] = 40.0  # z 2..4, y 3..8, x 4..5
    work = Image(arr, np.array([2.0, 3.0, 4.0]), np.array([10.0, 20.0, 30.0]), np.eye(3))
    edges = body_edges(arr > -500, work)
    # x: voxels 4..5 at 2 mm from origin 10 -> faces 10 + 3.5*2, 10 + 5.5*2
    np.testing.assert_allclose(edges, [17.0, 21.0, 20 + 2.5 * 3, 20 + 8.5 * 3, 30 + 1.5 * 4, 30 + 4.5 * 4])


def test_edge_prior_pulls_an_uncertain_wall_to_the_body_edge(small_model, tmp_path: Path):
    small_model.save(tmp_path / "m.npz")
    model = OrganLocalizer.load(tmp_path / "m.npz")
    n = 40
    offsets = np.full((n, 7, 6), np.nan, dtype=np.float32)
    offsets[:, 1, 4] = np.r_[np.zeros(30), np.full(10, 45.0)]  # the cord starts at the lowest body slice in 75%
    model.edge_offsets_ = offsets
    model._derive()
    assert model._edge_prior[1, 4] and model._edge_prior.sum() == 1
    edge = -100.0
    # A scattered vote 20 mm above the edge: the training scans say the wall is at the edge.
    wall, spread = with_edge_prior(model, 1, 4, edge + 20.0, 25.0, edge)
    assert abs(wall - edge) < 1e-9 and spread >= 0
    # A tight vote near the other mode keeps it; one no training offset explains is kept as it is.
    assert with_edge_prior(model, 1, 4, edge + 44.0, 3.0, edge)[0] == pytest.approx(edge + 45.0)
    assert with_edge_prior(model, 1, 4, edge + 500.0, 3.0, edge) == (edge + 500.0, 3.0)
    model.edge_prior_share = 1.0
    model._derive()
    assert not model._edge_prior.any()


def test_model_without_edge_offsets_loads_with_the_prior_off(small_model, tmp_path: Path):
    from imageforest.forest.serialization import load_model, save_model

    small_model.save(tmp_path / "m.npz")
    meta, arrays = load_model(tmp_path / "m.npz")
    assert arrays["first/edge.offsets"].shape == (6, 7, 6)  # one row per training scan
    del arrays["first/edge.offsets"]
    save_model(tmp_path / "old.npz", meta, arrays)
    old = OrganLocalizer.load(tmp_path / "old.npz")
    assert old.edge_offsets_.shape == (0, 7, 6) and not old._edge_prior.any()
    arrays["first/edge.offsets"] = np.zeros((3, 5, 6), dtype=np.float32)
    save_model(tmp_path / "bad.npz", meta, arrays)
    with pytest.raises(ModelFormatError):
        OrganLocalizer.load(tmp_path / "bad.npz")


def test_visible_share_of_a_voted_box():
    extent = np.array([[0.0, 0.0, 0.0], [100.0, 100.0, 50.0]])
    assert visible_share(np.array([10, 20, 10, 20, 10, 20.0]), extent) == 1.0
    assert visible_share(np.array([10, 20, 10, 20, 40, 60.0]), extent) == pytest.approx(0.5)
    assert visible_share(np.array([20, 10, 10, 20, 60, 40.0]), extent) == pytest.approx(0.5)  # walls in any order
    assert visible_share(np.array([10, 20, -30, -10, 10, 20.0]), extent) == 0.0


def test_min_visible_calls_a_box_voted_beyond_the_scan_absent(small_model, phantoms):
    """The lower slab of a phantom: organs above it are absent; with the rule off (min_visible = 0) the
    presence of every organ can only rise, and the default demands part of the voted box in view."""
    ct, _ = phantoms[6]
    low = crop_z(ct, 0, ct.array.shape[0] * 2 // 5)
    model = copy.copy(small_model)  # the module's fixture stays as it is
    strict = [o.probability for o in model.localize(low).organs]
    model.min_visible = 0.0
    loose = [o.probability for o in model.localize(low).organs]
    assert all(b >= a for a, b in zip(strict, loose, strict=True))
    model.min_visible = 1.0
    assert not model.localize(low).organs[ORGANS.index("Brainstem")].present


def test_second_stage_pulls_a_displaced_box_back(small_model, phantoms):
    """The organ-centred stage was trained on boxes moved by a first-stage-sized error: given the unseen
    phantom's true boxes moved by 8 mm per wall, it must bring them back to within a few millimetres."""
    from imageforest.apps.localize.refine import FineSource
    from imageforest.imaging.features import ImageStack

    ct, lab = phantoms[6]
    truth = OrganSlices.from_labels(lab, list(range(1, 8))).boxes()
    source = FineSource(ct, small_model.refine_spacing_mm)
    rng = np.random.default_rng(5)
    before, after = [], []
    for o, cascade in enumerate(small_model.refiners_):
        assert cascade is not None
        refiner = cascade[0]
        moved = truth[o] + rng.choice([-8.0, 8.0], 6)
        stage = small_model.fine_stages()[0]
        region = source.region(moved, stage.margin_mm + stage.reach_mm)
        walls, spread = refiner.walls(region, ImageStack.from_images([region], integral=True), moved,
                                      stage.margin_mm, 2000, 0.05)
        assert np.all(np.isfinite(spread)) and np.all(spread >= 0)
        before.append(np.abs(moved - truth[o]).mean())
        after.append(np.abs(walls - truth[o]).mean())
    assert np.mean(after) < 4.0 and np.mean(after) < 0.5 * np.mean(before), (before, after)


def test_second_stage_is_optional_and_saved_with_the_model(small_model, phantoms, tmp_path: Path, legacy_layout):
    from imageforest.forest.serialization import load_model, save_model

    ct, _ = phantoms[6]
    small_model.save(tmp_path / "m.npz")
    meta, arrays = load_model(tmp_path / "m.npz")
    n_stages = len(small_model.fine_stages())
    fine = [f"fine/{o}/{s}" for o in range(7) for s in range(n_stages)]
    assert sorted(k for k in meta["forests"] if not k.startswith("slice/")) == sorted(["first", *fine])
    assert "fine/0/0/leaf.mean" in arrays and not any(k.startswith("refine.") for k in arrays)
    # Files of the older single-record layout (later stages under array-name prefixes) load the same model.
    meta, arrays = legacy_layout(small_model)
    assert len(meta["refiners"]) == 7 and "refine.0.leaf.mean" in arrays
    save_model(tmp_path / "legacy.npz", meta, arrays)
    legacy = OrganLocalizer.load(tmp_path / "legacy.npz")
    for a, b in zip(legacy.localize(ct).organs, small_model.localize(ct).organs, strict=True):
        np.testing.assert_array_equal(a.box_mm, b.box_mm)
    # A file without the second stage (written before it existed, or trained with refine_spacing_mm=0) loads
    # and answers from the first stage alone.
    first_only = {k: v for k, v in arrays.items() if not k.startswith("refine.")}
    save_model(tmp_path / "first.npz", {**meta, "refiners": []}, first_only)
    first = OrganLocalizer.load(tmp_path / "first.npz")
    assert first.refiners_ == [None] * 7
    stage1 = copy.copy(small_model)
    stage1.refiners_ = [None] * 7
    for a, b in zip(first.localize(ct).organs, stage1.localize(ct).organs, strict=True):
        np.testing.assert_array_equal(a.box_mm, b.box_mm)
    # Damaged second-stage arrays are refused.
    arrays["refine.2.leaf.var"] = arrays["refine.2.leaf.var"][:-1]
    save_model(tmp_path / "bad.npz", meta, arrays)
    with pytest.raises(ModelFormatError, match=r"forest fine/2/0: array leaf\.var"):
        OrganLocalizer.load(tmp_path / "bad.npz")
    save_model(tmp_path / "bad2.npz", {**meta, "refiners": meta["refiners"][:3]}, first_only)
    with pytest.raises(ModelFormatError, match="3 second-stage forests for 7 organs"):
        OrganLocalizer.load(tmp_path / "bad2.npz")
    with pytest.raises(InvalidInputError):
        OrganLocalizer(list(ORGANS), **{**SMALL, "refine_spacing_mm": 0.1}).fit([ct], [np.zeros((7, 6))])


def test_fine_cascade_is_saved_and_files_of_one_fine_stage_still_load(phantoms, tmp_path: Path, legacy_layout):
    """Two fine stages (the second trained on smaller jitters, closer) round-trip through the model file; a
    file written before the cascade (one forest per organ, listed as a dict) loads as a one-stage cascade."""
    from imageforest.forest.serialization import load_model, save_model

    scans = [c for c, _ in phantoms[:3]]
    truths = [OrganSlices.from_labels(lab, list(range(1, 8))) for _, lab in phantoms[:3]]
    cascade = {**SMALL, "n_trees": 2, "max_depth": 6, "refine_trees": (2, 2), "refine_jitter_mm": (6.0, 3.0),
               "refine_margin_mm": (10.0, 6.0), "refine_reach_mm": (30.0, 20.0), "refine_min_samples_leaf": 20,
               "slice_elongation": None}  # no slice stage: it would re-vote the tubes' x/y walls after the cascade
    model = OrganLocalizer(list(ORGANS), **cascade).fit(scans, truths)
    assert all(len(c) == 2 for c in model.refiners_)
    assert model.refiners_[0][1].reach_mm == 20.0 and model.refiners_[0][0].reach_mm == 30.0
    model.save(tmp_path / "m.npz")
    again = OrganLocalizer.load(tmp_path / "m.npz")
    assert again.refine_margin_mm == (10.0, 6.0) and again.refine_min_samples_leaf == 20
    ct = phantoms[6][0]
    for a, b in zip(model.localize(ct).organs, again.localize(ct).organs, strict=True):
        np.testing.assert_array_equal(a.box_mm, b.box_mm)
    # The second stage moves boxes: without it the answer differs.
    one = copy.copy(model)
    one.refiners_ = [c[:1] for c in model.refiners_]
    for name in ("refine_trees", "refine_jitter_mm", "refine_margin_mm", "refine_reach_mm"):
        setattr(one, name, getattr(model, name)[0])
    moved = [not np.array_equal(a.box_mm, b.box_mm) for a, b in
             zip(model.localize(ct).organs, one.localize(ct).organs, strict=True) if a.present]
    assert any(moved)
    # A stage moves a wall by at most three of its training jitters (a guard against scans unlike its training).
    capped = copy.copy(model)
    capped.refine_jitter_mm = (6.0, 0.1)
    for o, (a, b) in enumerate(zip(capped.localize(ct).organs, one.localize(ct).organs, strict=True)):
        free = ~model._edge_prior[o]  # the body-edge prior acts after the cascade
        if a.present:
            assert np.all(np.abs(a.voted_box_mm - b.voted_box_mm)[free] <= 0.3 + 1e-9)
    # Pre-cascade layout: one hyper-parameter dict per organ and scalar settings.
    meta, arrays = legacy_layout(model)
    old_meta = {**meta, "refiners": [c[0] for c in meta["refiners"]],
                "hyper_parameters": {**meta["hyper_parameters"], "refine_trees": 2, "refine_jitter_mm": 6.0,
                                     "refine_margin_mm": 10.0, "refine_reach_mm": 30.0}}
    old_arrays = {k: v for k, v in arrays.items() if ".stage2." not in k}
    save_model(tmp_path / "old.npz", old_meta, old_arrays)
    old = OrganLocalizer.load(tmp_path / "old.npz")
    for a, b in zip(old.localize(ct).organs, one.localize(ct).organs, strict=True):
        np.testing.assert_array_equal(a.box_mm, b.box_mm)
    # Settings that disagree with the stored forests, or per-stage tuples of different lengths, are refused.
    save_model(tmp_path / "bad.npz", {**meta, "refiners": old_meta["refiners"]}, arrays)
    with pytest.raises(ModelFormatError, match="fine-stage"):
        OrganLocalizer.load(tmp_path / "bad.npz")
    meta, arrays = load_model(tmp_path / "m.npz")
    short = {k: v for k, v in arrays.items() if not k.startswith("fine/3/1/")}
    forests = {k: v for k, v in meta["forests"].items() if k != "fine/3/1"}
    save_model(tmp_path / "short.npz", {**meta, "forests": forests}, short)
    with pytest.raises(ModelFormatError, match="organ 3's fine-stage forests do not match its 2 fine-stage"):
        OrganLocalizer.load(tmp_path / "short.npz")
    with pytest.raises(InvalidInputError, match="one value per fine stage"):
        OrganLocalizer(list(ORGANS), **{**cascade, "refine_reach_mm": (30.0, 20.0, 10.0)}).fit(scans, truths)


def test_second_stage_off_answers_from_the_first(phantoms):
    scans = [c for c, _ in phantoms[:2]]
    truths = [OrganSlices.from_labels(lab, list(range(1, 8))) for _, lab in phantoms[:2]]
    model = OrganLocalizer(list(ORGANS), **{**SMALL, "n_trees": 2, "max_depth": 6, "refine_spacing_mm": 0})
    model.fit(scans, truths)
    assert model.refiners_ == [None] * 7
    result = model.localize(phantoms[6][0])
    assert any(o.present for o in result.organs)
    # The fine stages draw from their own random stream: adding them (or changing their settings, here the
    # voxels per training scan) leaves the first stage's forest and leaves as they were.
    fine = OrganLocalizer(list(ORGANS), **{**SMALL, "n_trees": 2, "max_depth": 6, "refine_trees": 1,
                                           "refine_points": (200, 100)}).fit(scans, truths)
    assert all(len(c) == 2 for c in fine.refiners_ if c is not None)
    for key, value in model.leaf_arrays().items():
        if not key.startswith("refine."):
            np.testing.assert_array_equal(fine.leaf_arrays()[key], value)
    np.testing.assert_array_equal(fine.forest_.params, model.forest_.params)


def test_second_stage_off_writes_no_refiners(phantoms, tmp_path: Path):
    from imageforest.forest.serialization import load_model

    scans = [c for c, _ in phantoms[:2]]
    truths = [OrganSlices.from_labels(lab, list(range(1, 8))) for _, lab in phantoms[:2]]
    OrganLocalizer(list(ORGANS), **{**SMALL, "n_trees": 2, "max_depth": 6, "refine_spacing_mm": 0}).fit(
        scans, truths).save(tmp_path / "m.npz")
    meta, arrays = load_model(tmp_path / "m.npz")
    assert list(meta["forests"]) == ["first"] and all(k.startswith("first/") for k in arrays)


def test_voxel_box_moves_walls_to_the_nearest_voxel_faces():
    # spacing 2 x 3 x 4 mm, origin (10, 0, -5): voxel i's faces along x at 10 + 2 i -+ 1
    img = Image(np.zeros((20, 20, 20), np.int16), np.array([2.0, 3.0, 4.0]), np.array([10.0, 0.0, -5.0]),
                np.eye(3))
    box = np.array([12.4, 19.9, 4.4, 10.6, -3.2, 30.0])
    snapped = voxel_box(img, box)
    assert np.allclose(snapped, [13.0, 19.0, 4.5, 10.5, -3.0, 29.0])
    assert np.all(np.abs(snapped - box) <= np.repeat(img.spacing, 2) / 2 + 1e-9)
    lo, hi = box_to_index(img, box)
    assert np.array_equal(box_to_index(img, snapped)[0], lo) and np.array_equal(box_to_index(img, snapped)[1], hi)
    # a flipped axis (RAS-like x) snaps the same way in physical space
    flipped = Image(img.array, img.spacing, np.array([48.0, 0.0, -5.0]), np.diag([-1.0, 1.0, 1.0]))
    assert np.allclose(voxel_box(flipped, box)[:2], [13.0, 19.0])
    # an oblique grid and a box without finite walls are left alone
    c, s_ = np.cos(0.3), np.sin(0.3)
    oblique = Image(img.array, img.spacing, img.origin, np.array([[c, -s_, 0], [s_, c, 0], [0, 0, 1.0]]))
    assert np.array_equal(voxel_box(oblique, box), box)
    assert np.all(np.isnan(voxel_box(img, np.full(6, np.nan))))


def test_leaf_covariances_are_stored_as_variances_and_int8_correlations(small_model, tmp_path: Path, legacy_layout):
    from imageforest.apps.localize.model import TRIU, pack_covariance, unpack_covariance
    from imageforest.forest.serialization import load_model, save_model

    small_model.save(tmp_path / "m.npz")
    assert load_model(tmp_path / "m.npz")[1]["first/leaf.corr"].dtype == np.int8
    meta, arrays = legacy_layout(small_model)
    assert "leaf.cov" not in arrays and arrays["leaf.corr"].dtype == np.int8
    loaded = OrganLocalizer.load(tmp_path / "m.npz")
    np.testing.assert_array_equal(loaded.leaf_cov_, small_model.leaf_cov_)
    # variances exact; correlations within half a step of 1/127 of the two standard deviations' product
    rng = np.random.default_rng(0)
    a = rng.normal(size=(50, 6, 6)) * rng.uniform(0.5, 20, (50, 1, 6))
    full = a.transpose(0, 2, 1) @ a
    packed = full[:, TRIU[0], TRIU[1]].astype(np.float16)
    back = unpack_covariance(*pack_covariance(packed)).astype(np.float64)
    diagonal = TRIU[0] == TRIU[1]
    np.testing.assert_array_equal(back[:, diagonal], packed[:, diagonal])
    sd = np.sqrt(packed[:, diagonal].astype(np.float64))
    bound = sd[:, TRIU[0][~diagonal]] * sd[:, TRIU[1][~diagonal]] * (0.5 / 127 + 1e-3)
    assert np.all(np.abs(back[:, ~diagonal] - packed[:, ~diagonal]) <= bound)
    # files written with the float16 covariances themselves still load
    old = {k: v for k, v in arrays.items() if k not in ("leaf.var", "leaf.corr")}
    old["leaf.cov"] = small_model.leaf_cov_
    save_model(tmp_path / "old.npz", meta, old)
    np.testing.assert_array_equal(OrganLocalizer.load(tmp_path / "old.npz").leaf_cov_, small_model.leaf_cov_)
    bad = {**arrays, "leaf.corr": arrays["leaf.corr"].astype(np.int16)}
    save_model(tmp_path / "bad.npz", meta, bad)
    with pytest.raises(ModelFormatError, match=r"leaf\.corr"):
        OrganLocalizer.load(tmp_path / "bad.npz")


def test_answers_do_not_depend_on_the_thread_count(small_model, phantoms):
    """Organs are voted on threads (and kernels run on numba's): one thread or two, the same answer."""
    ct, _ = phantoms[6]
    answers = []
    for n_jobs in (1, 2):
        model = copy.copy(small_model)
        model.n_jobs = n_jobs
        answers.append([np.r_[o.box_mm, o.box_std_mm, o.probability] for o in model.localize(ct).organs])
    assert np.array_equal(np.array(answers[0]), np.array(answers[1]), equal_nan=True)


def test_a_crafted_model_cannot_read_outside_the_scan(small_model, phantoms, tmp_path: Path):
    """A file that declares 8 image channels and sends a node to channel 3 is consistent in itself, but the
    localizer gives its forests one channel: refused at load, and the kernel itself refuses a forest that reads a
    channel the stack lacks (never a read of neighbouring memory). Out-of-range values in the file are refused."""
    import json

    from imageforest.exceptions import ModelFormatError

    small_model.save(tmp_path / "good.npz")
    with np.load(tmp_path / "good.npz", allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    meta = json.loads(arrays["__metadata__"].tobytes().decode())

    def write(name: str, meta: dict, arrays: dict) -> Path:
        out = dict(arrays)
        out["__metadata__"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
        np.savez(tmp_path / name, **out)
        return tmp_path / name

    crafted = json.loads(json.dumps(meta))
    crafted["forests"]["first"]["family"]["n_channels"] = 8
    params = arrays["first/forest.params"].copy()
    split = np.flatnonzero(arrays["first/forest.child"] >= 0)[0]
    params[split, 0] = 3.0
    with pytest.raises(ModelFormatError, match="feature family"):  # refused at load: not what it was trained on
        OrganLocalizer.load(write("channels.npz", crafted, {**arrays, "first/forest.params": params}))
    # and should such a forest reach the box-feature kernel, it is stopped there: a 1-channel stack is all it gets
    from imageforest.imaging.features import ImageStack

    forest = copy.deepcopy(small_model.forest_)
    forest.params[split, 0] = 3.0
    for cached in ("_max_box_channel", "_packed", "_box_spans"):  # tables derived from the original params
        forest.__dict__.pop(cached, None)
    stack = ImageStack.from_images([phantoms[6][0]], integral=True)
    with pytest.raises(ModelFormatError, match="reads image channel 3"):
        small_model.family_.apply((stack, np.zeros((4, 4), np.int32)), forest)

    share = arrays["first/leaf.share"].copy()
    share[0, 0] = -5.0  # would report a probability of -4.97
    with pytest.raises(ModelFormatError, match="leaf shares"):
        OrganLocalizer.load(write("share.npz", meta, {**arrays, "first/leaf.share": share}))

    for name, value in (("spacing_mm", -4.0), ("spacing_mm", "4"), ("vote_fraction", 5.0), ("n_trees", 2.5)):
        bad = json.loads(json.dumps(meta))
        bad["forests"]["first"]["hyper_parameters"][name] = value
        with pytest.raises(ModelFormatError, match=name):
            OrganLocalizer.load(write("bad.npz", bad, arrays))


def test_random_array_mutations_of_a_localizer_file_never_crash_it(small_model, phantoms, tmp_path: Path):
    """Fuzz of the localizer's arrays (all its forests and leaf tables; 12 mutations a run, a localization each):
    refused at load, or a localization whose probabilities are probabilities and whose boxes are finite."""
    from imageforest.exceptions import ImageForestError

    small_model.save(tmp_path / "good.npz")
    with np.load(tmp_path / "good.npz", allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    names = sorted(k for k in arrays if k != "__metadata__" and arrays[k].dtype.kind in "iuf" and arrays[k].size)
    specials = [-1, 0, 3, 2**15 - 1, -(2**15), 1e4, -1e4, np.nan, np.inf]
    rng = np.random.default_rng(2)
    scan = phantoms[6][0]
    refused = 0
    for trial in range(12):
        mutated = dict(arrays)
        name = names[int(rng.integers(len(names)))]
        flat = mutated[name].copy().reshape(-1)
        for at in rng.integers(0, flat.size, int(rng.integers(1, 4))):
            with np.errstate(invalid="ignore", over="ignore"):
                flat[at] = np.array(specials[int(rng.integers(len(specials)))]).astype(flat.dtype)
        mutated[name] = flat.reshape(arrays[name].shape)
        np.savez(tmp_path / f"m{trial}.npz", **mutated)
        try:
            result = OrganLocalizer.load(tmp_path / f"m{trial}.npz").localize(scan)
        except ImageForestError:
            refused += 1
            continue
        for organ in result.organs:
            assert 0.0 <= organ.probability <= 1.0
            assert not organ.present or np.all(np.isfinite(organ.box_mm))
    assert refused > 0
