"""`imageforest contour` / `train-contour` and the contourer: outputs on the scan's grid, organs kept inside their
boxes, absent organs empty, one-line errors, and the entangled forest's stages."""

import json
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk
from cli_helpers import one_line_error, run
from contour_phantoms import SMALL
from contour_phantoms import phantom_case as _case

from imageforest.apps.contour.model import OrganContourer
from imageforest.apps.localize.phantom import ORGANS
from imageforest.exceptions import InvalidInputError, ModelFormatError
from imageforest.forest.serialization import load_model, save_model
from imageforest.imaging.io import read_image, write_image


def _dice(a, b):
    return 2 * np.sum(a & b) / max(np.sum(a) + np.sum(b), 1)


def test_contours_stay_in_their_boxes_and_absent_organs_are_empty(trained):
    _, model, cases = trained
    ct, lab, boxes = cases[4]
    boxes = boxes.copy()
    boxes[ORGANS.index("Larynx")] = np.nan  # the localizer said absent
    result = model.contour(ct, boxes)
    labels = result.labels.array
    assert labels.shape == ct.array.shape and labels.dtype == np.uint8
    assert not (labels == ORGANS.index("Larynx") + 1).any()
    truth = np.asarray(lab.array)
    # coarse 8 mm phantoms and a tiny forest: every organ found, about half its voxels right (0.3-0.6)
    scores = [_dice(labels == k + 1, truth == k + 1) for k in range(len(ORGANS)) if ORGANS[k] != "Larynx"]
    assert min(scores) > 0.15 and np.mean(scores) > 0.35, scores
    # every organ voxel lies in its own box widened by the margin
    for k in range(len(ORGANS)):
        zz, yy, xx = np.nonzero(labels == k + 1)
        if zz.size:
            mm = ct.index_to_physical(np.c_[xx, yy, zz].astype(float))
            lo, hi = boxes[k, [0, 2, 4]] - model.margin_mm - 8, boxes[k, [1, 3, 5]] + model.margin_mm + 8
            assert np.all((mm >= lo) & (mm <= hi))
    assert result.posterior.shape == (len(ORGANS), *ct.array.shape)
    nothing = model.contour(ct, np.full((len(ORGANS), 6), np.nan))
    assert not nothing.labels.array.any() and nothing.region is None


def test_stages_continue_leaves_and_read_the_posteriors(trained):
    _, model, _ = trained
    assert model.stage_trees_[1] == 3 and model.stage_trees_.size == 3
    assert model.stage_trees_[2] - model.stage_trees_[1] == model.stage_leaves_[1]  # one tree per stage-1 leaf
    use, n_image = model.context_use(), model.n_image_channels
    assert n_image == 4 and use[0, :n_image].sum() > 0  # the CT and its three windows
    assert use[0, n_image:].sum() == 0  # the first stage reads the image alone
    assert use[1, n_image:].sum() > 0  # the entangled stage reads posterior maps
    assert model.forest_.depth.max() <= model.max_depth


def test_model_file_round_trip_and_forged_stages(trained, tmp_path):
    root, model, cases = trained
    loaded = OrganContourer.load(root / "model.npz")
    ct, _, boxes = cases[4]
    assert np.array_equal(loaded.contour(ct, boxes).labels.array, model.contour(ct, boxes).labels.array)
    meta, arrays = load_model(root / "model.npz")
    arrays["stage.trees"] = arrays["stage.trees"].copy()
    arrays["stage.trees"][1] += 1
    save_model(tmp_path / "forged.npz", meta, arrays)
    with pytest.raises(ModelFormatError, match="stage"):
        OrganContourer.load(tmp_path / "forged.npz")


def test_box_atlas_knows_where_organs_sit_in_their_boxes_and_survives_the_model_file(trained, tmp_path):
    from imageforest.apps.contour.model import box_coordinates

    root, model, cases = trained
    atlas = model.box_atlas_
    assert atlas.shape == (len(ORGANS), 20, 20, 20) and atlas.dtype == np.float32
    # bins 5..14 cover the box itself (coordinates 0..1 of -0.5..1.5): the organs fill part of their boxes
    # (10-75% on these 8 mm phantoms, blurred by the boxes' jitter) and far less of the margin beyond
    shell = np.ones((20, 20, 20), bool)
    shell[3:17, 3:17, 3:17] = False
    inside, outside = atlas[:, 5:15, 5:15, 5:15].mean(axis=(1, 2, 3)), atlas[:, shell].mean(axis=1)
    assert np.all(inside > 0.02) and np.all(outside < inside / 3), (inside, outside)
    ct, lab, boxes = cases[4]
    prior = model.box_prior(ct, boxes)
    truth = np.asarray(lab.array)
    for k in range(len(ORGANS)):  # the atlas read in a new scan's boxes is higher on the organ than off it
        assert prior[k][truth == k + 1].mean() > 2 * prior[k][truth != k + 1].mean()
    coords = box_coordinates(ct, boxes[0])
    assert coords.shape == (*ct.array.shape, 3)
    # the atlas alone, for a forest trained before it existed, is the one a full training counts
    alone = OrganContourer(ORGANS, **SMALL).fit_atlas([c[0] for c in cases[:4]], [np.asarray(c[1].array)
                                                                                 for c in cases[:4]],
                                                      [c[2] for c in cases[:4]])
    assert np.array_equal(alone.box_atlas_, atlas)
    loaded = OrganContourer.load(root / "model.npz")
    assert np.array_equal(loaded.box_atlas_, atlas)
    loaded.prior_weight = 1.0
    weighted = loaded.contour(ct, boxes).labels.array
    loaded.prior_weight, loaded.background_scale = (1.0,) * len(ORGANS), (1.0,) * len(ORGANS)
    assert np.array_equal(loaded.contour(ct, boxes).labels.array, weighted)  # per organ, the same values
    loaded.background_scale = (1.0, 2.0)
    with pytest.raises(InvalidInputError, match="one per organ"):
        loaded.contour(ct, boxes)
    scores = [_dice(weighted == k + 1, truth == k + 1) for k in range(len(ORGANS))]
    assert np.mean(scores) > 0.35, scores
    meta, arrays = load_model(root / "model.npz")
    arrays["prior.atlas"] = arrays["prior.atlas"] * 2
    save_model(tmp_path / "forged.npz", meta, arrays)
    with pytest.raises(ModelFormatError, match=r"prior\.atlas"):
        OrganContourer.load(tmp_path / "forged.npz")
    del arrays["prior.atlas"]  # a model from before the atlas loads and contours without it
    save_model(tmp_path / "old.npz", meta, arrays)
    old = OrganContourer.load(tmp_path / "old.npz")
    old.prior_weight = 1.0
    loaded.prior_weight, loaded.background_scale = 0.0, model.background_scale
    assert np.array_equal(old.contour(ct, boxes).labels.array, loaded.contour(ct, boxes).labels.array)


def test_training_refuses_what_it_cannot_learn_from():
    ct, lab, boxes = _case(0)
    with pytest.raises(InvalidInputError, match="organ names"):
        OrganContourer(**SMALL).fit_scans([ct], [np.asarray(lab.array)], [boxes])
    with pytest.raises(InvalidInputError, match="entangled_depths"):
        OrganContourer(ORGANS, **{**SMALL, "entangled_depths": (12,)}).fit_scans([ct], [np.asarray(lab.array)],
                                                                                [boxes])


def test_contour_command_writes_label_map_json_split_probabilities_and_overlay(trained):
    root, _, _ = trained
    scan = root / "scan.nii.gz"
    before = scan.read_bytes()
    out, doc_path, png = root / "out" / "organs.nii.gz", root / "out" / "report.json", root / "out" / "o.png"
    r = run("contour", scan, "--model", root / "model.npz", "-o", out, "--json", doc_path, "--overlay", png,
            "--probabilities", root / "out" / "prob")
    assert r.exit_code == 0, r.output
    assert scan.read_bytes() == before
    doc = json.loads(doc_path.read_text())
    assert [o["name"] for o in doc["organs"]] == list(ORGANS) and doc["model"]["name"] == "test-phantoms"
    assert [o["label"] for o in doc["organs"]] == list(range(1, 8)) and "total" in doc["timing_s"]
    labels = read_image(out)
    ct = read_image(scan)
    assert labels.array.shape == ct.array.shape and np.allclose(labels.spacing, ct.spacing)
    for row in doc["organs"]:
        n = int((labels.array == row["label"]).sum())
        assert row["present"] == (n > 0) and row["voxels"] == n
        if n:
            assert row["volume_ml"] > 0 and 0 < row["mean_posterior"] <= 1 and set(row["box_mm"]) == {"x", "y", "z"}
    prob = read_image(root / "out" / "prob" / "Brainstem.nii.gz")
    assert prob.array.dtype == np.float32 and prob.array.shape == ct.array.shape
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    r = run("contour", scan, "--model", root / "model.npz", "--split", "-o", root / "split", "--organs",
            "Brainstem,Mandible")
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (root / "split").iterdir()) == ["Brainstem.nii.gz", "Mandible.nii.gz"]
    assert json.loads(r.stdout)["organs"][0]["name"] == "Brainstem"


def test_a_scan_stored_in_ras_gets_its_label_map_in_the_same_axes(trained):
    root, _, _ = trained
    ras = sitk.DICOMOrient(sitk.ReadImage(str(root / "scan.nii.gz")), "RAS")
    sitk.WriteImage(ras, str(root / "ras_scan.nii.gz"))
    lps_out, ras_out = root / "orient" / "lps.nii.gz", root / "orient" / "ras"
    assert run("contour", root / "scan.nii.gz", "--model", root / "model.npz", "-o", lps_out).exit_code == 0
    r = run("contour", root / "ras_scan.nii.gz", "--model", root / "model.npz", "-o", ras_out, "--split")
    assert r.exit_code == 0, r.output
    lps_labels = sitk.ReadImage(str(lps_out))
    for mask_path in sorted(ras_out.iterdir()):  # each organ's mask, on the RAS file's grid
        mask = sitk.ReadImage(str(mask_path))
        assert mask.GetSize() == ras.GetSize()
        assert np.allclose(mask.GetDirection(), ras.GetDirection()) and np.allclose(mask.GetOrigin(), ras.GetOrigin())
        label = ORGANS.index(mask_path.name.split(".")[0]) + 1
        expected = sitk.GetArrayFromImage(sitk.DICOMOrient(lps_labels, "RAS")) == label
        assert np.array_equal(sitk.GetArrayFromImage(mask) == 1, expected)


@pytest.mark.parametrize("args, message", [
    (["missing.nii.gz"], "missing.nii.gz"),
    (["{scan}", "-o", "{scan}"], "input"),
    (["{scan}", "-o", "{root}/labels.png"], "label map"),
    (["{scan}", "--split"], "--split"),
    (["{scan}", "--organs", "Heart"], "Heart"),
    (["{scan}", "--model", "{root}/scan.nii.gz"], "scan.nii.gz"),
])
def test_contour_bad_input_is_one_line(trained, args, message):
    root, _, _ = trained
    scan = root / "scan.nii.gz"
    before = scan.read_bytes()
    given = [a.format(scan=scan, root=root) for a in args]
    if "--model" not in given:
        given += ["--model", str(root / "model.npz")]
    line = one_line_error(run("contour", *given))
    assert message in line
    assert scan.read_bytes() == before


def test_train_contour_command(tmp_path: Path):
    data = tmp_path / "data"
    data.mkdir()
    for seed in range(2):
        ct, lab, _ = _case(seed)
        write_image(ct, data / f"ph{seed}_ct.nii.gz")
        write_image(lab, data / f"ph{seed}_organs.nii.gz")
    r = run("train-contour", data, "-o", tmp_path / "m.npz", "--organs", ",".join(ORGANS), "--trees", 2,
            "--depth", 6)
    assert r.exit_code == 0, r.output
    model = OrganContourer.load(tmp_path / "m.npz")
    assert model.entangled_depths == () and model.model_card_["cases"] == ["ph0", "ph1"] and model.prior_maps
    line = one_line_error(run("train-contour", data, "-o", tmp_path / "m2.npz"))
    assert "--organs" in line
    r = run("train-contour", data, "-o", tmp_path / "m3.npz", "--organs", ",".join(ORGANS), "--trees", 2,
            "--depth", 6, "--entangled-depths", "3", "--no-prior-maps")
    assert r.exit_code == 0, r.output
    model = OrganContourer.load(tmp_path / "m3.npz")
    assert model.entangled_depths == (3,) and not model.prior_maps
    for bad, message in (("3,x", "--entangled-depths"), ("4,3", "entangled_depths")):
        line = one_line_error(run("train-contour", data, "-o", tmp_path / "m4.npz", "--organs", ",".join(ORGANS),
                                  "--depth", 6, "--entangled-depths", bad))
        assert message in line
    assert not (tmp_path / "m4.npz").exists()


def test_batch_in_process_reports_every_scan_and_resumes(trained, tmp_path: Path):
    from imageforest.apps.contour.batch import contour_many
    from imageforest.batches import REPORT_NAME

    root, _, cases = trained
    write_image(cases[3][0], tmp_path / "other_ct.nii.gz")
    (tmp_path / "broken_ct.nii.gz").write_bytes(b"not a scan")
    scans = [root / "scan.nii.gz", tmp_path / "broken_ct.nii.gz", tmp_path / "other_ct.nii.gz"]
    out = tmp_path / "labels"
    report = contour_many(scans, out, json=tmp_path / "docs", model=root / "model.npz", split=True,
                          probabilities=tmp_path / "prob")
    assert [e["status"] for e in report["entries"]] == ["ok", "failed", "ok"]
    assert report["entries"][1]["error"].startswith("ImageReadError") and report["entries"][1]["attempts"] == 2
    assert json.loads((tmp_path / "docs" / REPORT_NAME).read_text())["ok"] == 2
    document = json.loads((tmp_path / "docs" / "other_ct.json").read_text())
    assert document["scan"] == str(tmp_path / "other_ct.nii.gz") and "model_load" in document["timing_s"]
    present = [o["name"] for o in document["organs"] if o["present"]]
    assert sorted(p.name for p in (out / "other_ct").iterdir()) == sorted(f"{n}.nii.gz" for n in ORGANS)
    assert (tmp_path / "prob" / "scan" / "Brainstem.nii.gz").is_file() and present
    # a JSON cut short is not complete: --resume redoes that scan only
    (tmp_path / "docs" / "other_ct.json").write_text('{"scan": ')
    again = contour_many(scans, out, json=tmp_path / "docs", model=root / "model.npz", split=True,
                         probabilities=tmp_path / "prob", resume=True)
    assert [e["status"] for e in again["entries"]] == ["skipped", "failed", "ok"]
    listing = tmp_path / "scans.txt"
    listing.write_text(f"{scans[0]}\n{scans[2]}\n")
    r = run("contour", f"@{listing}", "--model", root / "model.npz", "-o", tmp_path / "cli", "--resume")
    assert r.exit_code == 0 and "2 contoured, 0 failed, 0 skipped" in r.stderr, r.output
    assert sorted(p.name for p in (tmp_path / "cli").iterdir()) == ["batch_report.json", "other_ct.json",
                                                                  "other_ct.nii.gz", "scan.json", "scan.nii.gz"]
    r = run("contour", f"@{listing}", "--model", root / "model.npz", "-o", tmp_path / "cli", "--resume")
    assert r.exit_code == 0 and "0 contoured, 0 failed, 2 skipped" in r.stderr, r.output
    assert "give -o OUT" in one_line_error(run("contour", scans[0], "--model", root / "model.npz", "--resume"))
    assert "not both" in one_line_error(run("contour", scans[0], "-o", tmp_path / "x", "--workers", "1",
                                            "--scheduler", "tcp://127.0.0.1:1"))


def _write_dicom_series(ct, folder: Path) -> None:
    """A CT series (one uncompressed slice per file) of a volume with an identity direction, as a scanner's
    export would hold it."""
    from pydicom.dataset import FileDataset, FileMetaDataset
    from pydicom.uid import CTImageStorage, ExplicitVRLittleEndian, generate_uid

    folder.mkdir()
    study, series, frame = generate_uid(), generate_uid(), generate_uid()
    arr = np.asarray(ct.array)
    for k in range(arr.shape[0]):
        meta = FileMetaDataset()
        meta.MediaStorageSOPClassUID = CTImageStorage
        meta.MediaStorageSOPInstanceUID = generate_uid()
        meta.TransferSyntaxUID = ExplicitVRLittleEndian
        ds = FileDataset(str(folder / f"s{k:03d}.dcm"), {}, file_meta=meta, preamble=b"\0" * 128)
        ds.SOPClassUID, ds.SOPInstanceUID = CTImageStorage, meta.MediaStorageSOPInstanceUID
        ds.StudyInstanceUID, ds.SeriesInstanceUID, ds.FrameOfReferenceUID = study, series, frame
        ds.Modality, ds.PatientName, ds.PatientID, ds.StudyDate = "CT", "Phantom^Head", "ph4", "20260101"
        ds.SeriesNumber, ds.InstanceNumber = 1, k + 1
        ds.ImagePositionPatient = [float(v) for v in ct.index_to_physical(np.array([[0, 0, k]]))[0]]
        ds.ImageOrientationPatient = [1, 0, 0, 0, 1, 0]
        ds.PixelSpacing = [float(ct.spacing[1]), float(ct.spacing[0])]
        ds.SliceThickness = float(ct.spacing[2])
        ds.Rows, ds.Columns = arr.shape[1], arr.shape[2]
        ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
        ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 16, 16, 15, 1
        ds.RescaleIntercept, ds.RescaleSlope = 0, 1
        ds.PixelData = arr[k].astype(np.int16).tobytes()
        ds.save_as(folder / f"s{k:03d}.dcm", enforce_file_format=True)


def test_dicom_seg_and_rtstruct_reference_the_series_and_match_the_label_map(trained, tmp_path: Path):
    pydicom = pytest.importorskip("pydicom", reason="DICOM outputs are the extra imageforest[dicom]")
    pytest.importorskip("highdicom", reason="DICOM outputs are the extra imageforest[dicom]")
    from skimage.draw import polygon

    root, _, cases = trained
    series = tmp_path / "series"
    _write_dicom_series(cases[4][0], series)
    slices = [pydicom.dcmread(f) for f in sorted(series.iterdir())]
    by_uid = {s.SOPInstanceUID: k for k, s in enumerate(slices)}
    model = ["--model", root / "model.npz"]
    r = run("contour", series, *model, "-o", tmp_path / "labels.nii.gz", "--json", tmp_path / "d.json")
    assert r.exit_code == 0, r.output
    labels = read_image(tmp_path / "labels.nii.gz").array
    present = [o for o in json.loads((tmp_path / "d.json").read_text())["organs"] if o["present"]]
    assert len(present) >= 4

    r = run("contour", series, *model, "--format", "dicom-seg", "-o", tmp_path / "seg.dcm")
    assert r.exit_code == 0, r.output
    seg = pydicom.dcmread(tmp_path / "seg.dcm")
    assert seg.Modality == "SEG" and seg.StudyInstanceUID == slices[0].StudyInstanceUID
    assert seg.ReferencedSeriesSequence[0].SeriesInstanceUID == slices[0].SeriesInstanceUID
    assert [s.SegmentLabel for s in seg.SegmentSequence] == [o["name"] for o in present]
    rebuilt = np.zeros_like(labels)
    frames = seg.pixel_array.reshape(-1, *labels.shape[1:])
    for frame, groups in zip(frames, seg.PerFrameFunctionalGroupsSequence, strict=True):
        number = groups.SegmentIdentificationSequence[0].ReferencedSegmentNumber
        source = groups.DerivationImageSequence[0].SourceImageSequence[0].ReferencedSOPInstanceUID
        rebuilt[by_uid[source]][frame > 0] = present[number - 1]["label"]
    assert np.array_equal(rebuilt, labels)

    r = run("contour", series, *model, "--format", "rtstruct", "-o", tmp_path / "rt.dcm")
    assert r.exit_code == 0, r.output
    rt = pydicom.dcmread(tmp_path / "rt.dcm")
    assert rt.Modality == "RTSTRUCT" and rt.StudyInstanceUID == slices[0].StudyInstanceUID
    referenced = rt.ReferencedFrameOfReferenceSequence[0].RTReferencedStudySequence[0].RTReferencedSeriesSequence[0]
    assert referenced.SeriesInstanceUID == slices[0].SeriesInstanceUID
    assert [roi.ROIName for roi in rt.StructureSetROISequence] == list(ORGANS)
    spacing, origin = slices[0].PixelSpacing, np.asarray(slices[0].ImagePositionPatient, dtype=float)
    for roi in rt.ROIContourSequence:
        label = int(roi.ReferencedROINumber)
        drawn = np.zeros(labels.shape, bool)
        for item in getattr(roi, "ContourSequence", []):
            k = by_uid[item.ContourImageSequence[0].ReferencedSOPInstanceUID]
            xyz = np.asarray(item.ContourData, dtype=float).reshape(-1, 3)
            assert np.allclose(xyz[:, 2], float(slices[k].ImagePositionPatient[2]))
            rows, cols = polygon((xyz[:, 1] - origin[1]) / float(spacing[0]),
                                 (xyz[:, 0] - origin[0]) / float(spacing[1]), labels.shape[1:])
            drawn[k][rows, cols] ^= True  # an inner contour (a hole) toggles its pixels back
        truth = labels == label
        assert drawn.any() == truth.any()
        if truth.sum() > 20:
            assert _dice(drawn, truth) > 0.8, roi.ReferencedROINumber

    assert "DICOM series" in one_line_error(run("contour", root / "scan.nii.gz", *model, "--format", "rtstruct",
                                                "-o", tmp_path / "x.dcm"))
    assert "--split" in one_line_error(run("contour", series, *model, "--format", "dicom-seg", "--split", "-o",
                                           tmp_path / "y"))
    assert ".dcm" in one_line_error(run("contour", series, *model, "--format", "dicom-seg", "-o",
                                        tmp_path / "z.nii.gz"))


def test_models_saved_before_posterior_smoothing_predict_as_they_did():
    from imageforest.apps.contour.model import OrganContourer

    assert OrganContourer.from_hyper_parameters({"organs": ["A"]}, {}).posterior_smoothing_mm == 0.0
    assert OrganContourer.from_hyper_parameters({"organs": ["A"], "posterior_smoothing_mm": 2.0},
                                                {}).posterior_smoothing_mm == 2.0
    assert OrganContourer(organs=("A",)).posterior_smoothing_mm == 2.0  # the recipe's, for new models
    # files from before the atlas was a context read no prior maps; new models do
    assert OrganContourer.from_hyper_parameters({"organs": ["A"]}, {}).prior_maps is False
    assert OrganContourer(organs=("A",)).prior_maps is True


def test_posterior_smoothing_keeps_a_region_uniform_map_and_its_edges():
    import numpy as np

    from imageforest.apps.contour.model import smooth_posteriors

    post = np.zeros((2, 6, 8, 8), np.float32)
    post[0] = 0.25
    post[1] = 0.75
    mask = np.zeros((6, 8, 8), bool)
    mask[1:5, 2:7, 1:6] = True
    out = smooth_posteriors(post, mask, np.array([1.0, 1.5, 1.5]))
    assert np.allclose(out[:, mask], post[:, mask], atol=1e-5)  # normalised by the region's own weight
    spike = post.copy()
    spike[1, 3, 4, 3] = 5.0
    smoothed = smooth_posteriors(spike, mask, np.array([1.0, 1.0, 1.0]))
    assert smoothed[1, 3, 4, 3] < 2.0 and smoothed[1, 3, 4, 4] > 0.75  # a spike spreads to its neighbours


def test_box_atlas_as_the_first_context(trained, tmp_path):
    """With `prior_maps`, the first stage's context tests read the box atlas in each organ's box, at training (the
    jittered boxes) and at contouring (the given ones); the model file keeps the setting."""
    _, _, cases = trained
    model = OrganContourer(ORGANS, **{**SMALL, "prior_maps": True}).fit_scans(
        [c[0] for c in cases[:4]], [np.asarray(c[1].array) for c in cases[:4]], [c[2] for c in cases[:4]])
    assert model.context_use()[0, model.n_image_channels:].sum() > 0
    ct, lab, boxes = cases[4]
    labels = model.contour(ct, boxes).labels.array
    truth = np.asarray(lab.array)
    scores = [_dice(labels == k + 1, truth == k + 1) for k in range(len(ORGANS))]
    assert np.mean(scores) > 0.35, scores
    model.save(tmp_path / "priors.npz")
    loaded = OrganContourer.load(tmp_path / "priors.npz")
    assert loaded.prior_maps and np.array_equal(loaded.contour(ct, boxes).labels.array, labels)


def test_cut_organ_removes_speckle_and_leaves_other_organs():
    from imageforest.apps.contour.model import cut_organ

    rng = np.random.default_rng(0)
    zz, yy, xx = np.mgrid[:12, :16, :16]
    ball = (zz - 6) ** 2 + (yy - 8) ** 2 + (xx - 8) ** 2 <= 16
    share = np.clip(np.where(ball, 0.7, 0.3) + rng.normal(0, 0.25, ball.shape), 0, 1).astype(np.float32)
    labels = (share > 0.5).astype(np.uint8)
    labels[0, 0, :4] = 2  # another organ's voxels
    share[0, 0, :4] = 0.99
    where = np.ones(ball.shape, bool)
    guide = np.zeros((*ball.shape, 1), np.float32)  # flat CT: the cut's cost is the boundary's area alone
    before = _dice(labels == 1, ball)
    cut_organ(labels, 1, share, where, guide, np.ones(3), 1.0)
    assert _dice(labels == 1, ball) > max(before + 0.3, 0.8), before
    assert np.all(labels[0, 0, :4] == 2)  # another organ's voxels stay with it
    inside = xx + yy < 16  # not a box: the cut runs over its bounding box, the organ stays within it
    labels0 = ((share > 0.5) & inside).astype(np.uint8)
    cut_organ(labels0, 1, share, inside, guide, np.ones(3), 1.0)
    assert labels0[inside].any() and not labels0[~inside].any()


def test_cut_smoothness_in_contouring_and_the_model_file(trained, tmp_path):
    _, model, cases = trained
    ct, lab, boxes = cases[4]
    post, where = model.forest_posteriors(ct, boxes)
    plain = model.labels_from_posteriors(post, where).labels.array
    assert np.array_equal(plain, model.contour(ct, boxes).labels.array)  # the two steps are `contour`
    smooth = OrganContourer(ORGANS, **{**SMALL, "cut_smoothness": 0.5})
    smooth.__dict__.update({k: v for k, v in model.__dict__.items() if k.endswith("_")})
    cut = smooth.labels_from_posteriors(post, where).labels.array
    assert not np.array_equal(cut, plain)
    truth = np.asarray(lab.array)
    # a cut this weak smooths the phantom's two-voxel organs without erasing them
    scores = [_dice(cut == k + 1, truth == k + 1) for k in range(len(ORGANS))]
    assert min(scores) > 0.1 and np.mean(scores) > 0.3, scores
    smooth.model_card_ = {"name": "cut", "version": "0"}
    smooth.save(tmp_path / "cut.npz")
    assert np.array_equal(OrganContourer.load(tmp_path / "cut.npz").contour(ct, boxes).labels.array, cut)
    assert OrganContourer.from_hyper_parameters({"organs": ["A"]}, {}).cut_smoothness == 0.0
    with pytest.raises(InvalidInputError, match="cut_smoothness"):
        OrganContourer(ORGANS, **{**SMALL, "cut_smoothness": (1.0, 2.0)}).fit_scans(
            [c[0] for c in cases[:2]], [np.asarray(c[1].array) for c in cases[:2]], [c[2] for c in cases[:2]])


def test_drop_unexpected_clears_organs_far_smaller_than_their_atlas_expects():
    from imageforest.apps.contour.model import drop_unexpected

    labels = np.zeros((4, 10, 10), np.uint8)
    labels[0, 0, :5] = 1  # 5 voxels where the atlas expects 4 * 10 * 10 * 0.1 = 40
    labels[1:3, 2:6, 2:6] = 2  # 32 voxels where it expects 40
    prior = np.full((3, *labels.shape), 0.1, np.float32)
    drop_unexpected(labels, prior, 0.5)
    assert not (labels == 1).any() and (labels == 2).sum() == 32 and not (labels == 3).any()
    drop_unexpected(labels, prior, 0.9)
    assert not labels.any()


def test_min_expected_share_reports_small_organs_absent(trained, tmp_path):
    _, model, cases = trained
    ct, _, boxes = cases[4]
    post, where = model.forest_posteriors(ct, boxes)
    plain = model.labels_from_posteriors(post, where).labels.array
    strict = OrganContourer(ORGANS, **SMALL)
    strict.__dict__.update({k: v for k, v in model.__dict__.items() if k.endswith("_")})
    # The phantom's coarse atlas expects less than its blurred two-voxel organs hold; a bolder one expects more
    strict.box_atlas_ = np.minimum(4 * model.box_atlas_, 1).astype(np.float32)
    counts = np.bincount(plain.ravel(), minlength=len(ORGANS) + 1)[1:]
    ratio = counts / strict.box_prior(where.crop, boxes).reshape(len(ORGANS), -1).sum(axis=1)
    share = float(np.mean(np.sort(ratio)[2:4]))  # between the third and the fourth: three organs fall below
    assert 0 < share < 1
    strict.min_expected_share = share
    got = strict.labels_from_posteriors(post, where).labels.array
    for k in range(len(ORGANS)):
        kept = (got == k + 1).any()
        assert kept == (ratio[k] >= share), (k, ratio[k], share)
        if kept:
            assert np.array_equal(got == k + 1, plain == k + 1)
    assert sum((got == k + 1).any() for k in range(len(ORGANS))) == len(ORGANS) - 3
    strict.model_card_ = {"name": "strict", "version": "0"}
    strict.save(tmp_path / "strict.npz")
    assert OrganContourer.load(tmp_path / "strict.npz").min_expected_share == share
    assert OrganContourer.from_hyper_parameters({"organs": ["A"]}, {}).min_expected_share == 0.0
    with pytest.raises(InvalidInputError, match="min_expected_share"):
        OrganContourer(ORGANS, **{**SMALL, "min_expected_share": 2.0}).fit_scans(
            [c[0] for c in cases[:2]], [np.asarray(c[1].array) for c in cases[:2]], [c[2] for c in cases[:2]])


def test_absence_check_clears_the_organs_its_logistic_calls_absent(trained, tmp_path):
    """With the localizer's evidence, an organ whose absence probability passes the threshold loses its voxels;
    without evidence, or with the check off, the contours are as before; the setting is saved and checked."""
    _, model, cases = trained
    ct, _, boxes = cases[4]
    plain = model.contour(ct, boxes).labels.array
    present = [k for k in range(len(ORGANS)) if (plain == k + 1).any()]
    assert len(present) >= 3
    checked = OrganContourer(ORGANS, **SMALL)
    checked.__dict__.update({k: v for k, v in model.__dict__.items() if k.endswith("_")})
    # absent when the localizer's probability is under 0.5 (steep logistic); organ 0 sure, the others not
    checked.absence_logit = (50.0, 0.0, 0.0, -100.0, 0.0)
    evidence = np.column_stack([np.full(len(ORGANS), 0.3), np.full(len(ORGANS), 5.0)])
    evidence[present[0], 0] = 0.9
    evidence[present[1], 0] = np.nan  # no evidence for this organ: it is not judged
    got = checked.contour(ct, boxes, evidence).labels.array
    for k in range(len(ORGANS)):
        keep = k in (present[0], present[1])
        assert np.array_equal(got == k + 1, (plain == k + 1) if keep else np.zeros_like(plain, bool)), k
    assert np.array_equal(checked.contour(ct, boxes).labels.array, plain)  # no evidence: no check
    checked.absence_logit = None
    assert np.array_equal(checked.contour(ct, boxes, evidence).labels.array, plain)
    # the voxel count against the atlas's: a bar between two organs' ratios clears the organs below it
    _, where = model.forest_posteriors(ct, boxes)
    counts = np.bincount(plain.ravel(), minlength=len(ORGANS) + 1)[1:]
    ratio = counts / model.box_prior(where.crop, boxes).reshape(len(ORGANS), -1).sum(axis=1)
    bar = float(np.mean(np.sort(ratio[present])[:2]))  # between the two smallest
    checked.absence_logit = (100.0 * np.log(bar + 1e-3), -100.0, 0.0, 0.0, 0.0)
    checked.absence_threshold = 0.5
    got = checked.contour(ct, boxes, np.column_stack([np.ones(len(ORGANS)), np.zeros(len(ORGANS))])).labels.array
    for k in present:
        assert (got == k + 1).any() == (ratio[k] > bar), (k, ratio[k], bar)
    checked.absence_logit = (0.0, -100.0, 0.0, 0.0, 0.0)
    checked.model_card_ = {"name": "checked", "version": "0"}
    checked.save(tmp_path / "checked.npz")
    loaded = OrganContourer.load(tmp_path / "checked.npz")
    assert loaded.absence_logit == (0.0, -100.0, 0.0, 0.0, 0.0) and loaded.absence_threshold == 0.5
    assert OrganContourer.from_hyper_parameters({"organs": ["A"]}, {}).absence_logit is None
    checked.absence_logit = (1.0, 2.0)
    with pytest.raises(InvalidInputError, match="absence_logit"):
        checked.contour(ct, boxes, evidence)
    checked.absence_logit = None
    with pytest.raises(InvalidInputError, match="evidence"):
        checked.contour(ct, boxes, evidence[:2])


def test_the_json_warns_of_organs_the_localizer_boxed_but_the_contour_emptied(trained):
    from imageforest.apps.contour.api import contour_file

    root, model, _ = trained
    found, contours, _ = contour_file(root / "scan.nii.gz", model, posterior=False)
    boxed = [name for name, p in zip(ORGANS, contours.present, strict=True) if p]
    assert boxed and not any("boxed by the localizer" in w for w in found["warnings"])
    sure_absent = OrganContourer(ORGANS, **SMALL)
    sure_absent.__dict__.update({k: v for k, v in model.__dict__.items() if k.endswith("_")})
    sure_absent.absence_logit = (100.0, 0.0, 0.0, 0.0, 0.0)  # every organ with voxels called absent
    doc, contours, _ = contour_file(root / "scan.nii.gz", sure_absent, posterior=False)
    assert not contours.labels.array.any() and not any(o["present"] for o in doc["organs"])
    warning = next(w for w in doc["warnings"] if "boxed by the localizer" in w)
    assert all(name in warning for name in boxed)


def test_overlay_panels_are_cut_to_the_body_and_the_organs():
    from imageforest.apps.localize.overlay import body_box

    plane = np.full((50, 60), -1000.0)
    plane[15:30, 20:40] = 40.0  # the body
    labels = np.zeros(plane.shape, np.uint8)
    mm = (5.0, 2.0)  # rows, columns: the 10 mm margin is 2 rows and 5 columns
    assert body_box(plane, mm, labels) == (slice(13, 32), slice(15, 45))
    labels[40, 21] = 3  # an organ beyond the body (a masked scan) stays in view
    assert body_box(plane, mm, labels)[0] == slice(13, 43)
    assert body_box(np.full(plane.shape, -1000.0), mm) == (slice(None), slice(None))


def test_posterior_calibration_maps_the_written_posteriors_and_keeps_the_labels(trained, tmp_path):
    from imageforest.apps.contour.model import calibrated

    _, model, cases = trained
    ct, _, boxes = cases[4]
    post, where = model.forest_posteriors(ct, boxes)
    plain = model.labels_from_posteriors(post, where)
    pairs = tuple((0.5 + 0.1 * k, -0.3 * k) for k in range(len(ORGANS)))
    model_cal = OrganContourer(ORGANS, **{**SMALL, "posterior_calibration": pairs})
    model_cal.__dict__.update({k: v for k, v in model.__dict__.items() if k.endswith("_")})
    cal = model_cal.labels_from_posteriors(post, where)
    assert np.array_equal(cal.labels.array, plain.labels.array)  # the labels are chosen before the calibration
    k = 1
    s = plain.posterior[k]
    inside = s > 0
    a, b = pairs[k]
    z = np.log(np.clip(s[inside], 1e-6, 1 - 1e-6) / (1 - np.clip(s[inside], 1e-6, 1 - 1e-6)))
    assert np.allclose(cal.posterior[k][inside], 1 / (1 + np.exp(-(a * z + b))), atol=1e-5)
    assert not cal.posterior[k][~inside].any()  # outside the region stays 0
    mine = plain.labels.array == k + 1
    assert np.isclose(cal.mean_posterior[k], cal.posterior[k][mine].mean(), atol=1e-5)
    identity = calibrated(plain.posterior, np.tile([1.0, 0.0], (len(ORGANS), 1)))
    assert np.allclose(identity, plain.posterior, atol=1e-5)
    model_cal.model_card_ = {"name": "calibrated", "version": "0"}
    model_cal.save(tmp_path / "cal.npz")
    again = OrganContourer.load(tmp_path / "cal.npz")
    assert np.allclose(np.asarray(again.posterior_calibration), pairs)
    assert np.allclose(again.labels_from_posteriors(post, where).posterior, cal.posterior)
    assert OrganContourer.from_hyper_parameters({"organs": ["A"]}, {}).posterior_calibration is None
    model_cal.posterior_calibration = ((1.0, 0.0),)  # one pair for seven organs
    with pytest.raises(InvalidInputError, match="posterior_calibration"):
        model_cal.labels_from_posteriors(post, where)


def test_organs_of_low_calibrated_mean_posterior_are_named_for_review(trained, tmp_path):
    root, model, _ = trained
    r = run("contour", root / "scan.nii.gz", "--model", root / "model.npz", "--json", tmp_path / "plain.json")
    assert r.exit_code == 0, r.output
    plain = json.loads((tmp_path / "plain.json").read_text())
    assert not any("review these first" in w for w in plain["warnings"])  # no calibration: raw shares say little
    doubtful = OrganContourer(ORGANS, **{**SMALL, "posterior_calibration": tuple((1.0, -8.0) for _ in ORGANS)})
    doubtful.__dict__.update({k: v for k, v in model.__dict__.items() if k.endswith("_")})
    doubtful.save(tmp_path / "doubtful.npz")
    r = run("contour", root / "scan.nii.gz", "--model", tmp_path / "doubtful.npz", "--json", tmp_path / "d.json")
    assert r.exit_code == 0, r.output
    doc = json.loads((tmp_path / "d.json").read_text())
    present = [o["name"] for o in doc["organs"] if o["present"]]
    assert present and all(o["mean_posterior"] < 0.5 for o in doc["organs"] if o["present"])
    review = [w for w in doc["warnings"] if "review these first" in w]
    assert len(review) == 1 and all(name in review[0] for name in present)
