"""`imageforest contour --boxes`: contouring inside boxes a user gives (a `localize` document, as written or edited)
instead of the localizer's."""

import json
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import one_line_error, run

from imageforest.apps.contour.boxes import read_boxes, snap_to_faces
from imageforest.apps.localize.phantom import ORGANS, head_neck_phantom
from imageforest.exceptions import InvalidInputError
from imageforest.imaging.ct_organs import OrganSlices, index_box_to_mm
from imageforest.imaging.io import read_image, write_image


def _document(boxes: np.ndarray, scan: str = "scan.nii.gz", absent: tuple[str, ...] = ()) -> dict:
    organs = {}
    for name, box in zip(ORGANS, boxes, strict=True):
        organs[name] = ({"present": False} if name in absent else
                        {"present": True, "box_mm": {a: [float(box[2 * i]), float(box[2 * i + 1])]
                                                     for i, a in enumerate("xyz")}})
    return {"scan": scan, "coordinate_system": "LPS", "units": "mm", "organs": organs}


def test_contour_in_the_localizers_own_boxes_gives_the_localizers_labels(trained, tmp_path: Path):
    root, _, _ = trained
    scan = root / "scan.nii.gz"
    assert run("localize", scan, "-o", tmp_path / "scan.json").exit_code == 0
    plain, given = tmp_path / "plain.nii.gz", tmp_path / "given.nii.gz"
    r = run("contour", scan, "--model", root / "model.npz", "-o", plain, "--json", tmp_path / "plain.json")
    assert r.exit_code == 0, r.output
    r = run("contour", scan, "--model", root / "model.npz", "--boxes", tmp_path / "scan.json", "-o", given,
            "--json", tmp_path / "given.json")
    assert r.exit_code == 0, r.output
    # the document's walls are rounded to 0.01 mm; taken back onto the voxel faces they give the same labels
    assert np.array_equal(read_image(plain).array, read_image(given).array)
    document = json.loads((tmp_path / "given.json").read_text())
    assert document["boxes"] == str(tmp_path / "scan.json") and "boxes" in document["timing_s"]
    assert "localize" not in document["timing_s"]
    # a folder of documents named as `localize` names them serves one scan too
    r = run("contour", scan, "--model", root / "model.npz", "--boxes", tmp_path, "-o", tmp_path / "again.nii.gz")
    assert r.exit_code == 0, r.output
    assert np.array_equal(read_image(tmp_path / "again.nii.gz").array, read_image(given).array)


def test_boxes_by_hand_are_contoured_as_given_and_absent_organs_stay_empty(trained, tmp_path: Path):
    from imageforest.apps.contour.api import contour_file

    root, model, cases = trained
    ct, _, truth_boxes = cases[4]
    path = tmp_path / "scan.json"
    path.write_text(json.dumps(_document(truth_boxes, absent=("Larynx",))))
    document, contours, _ = contour_file(root / "scan.nii.gz", model, boxes=path)
    labels = contours.labels.array
    assert not (labels == ORGANS.index("Larynx") + 1).any()
    rows = {row["name"]: row for row in document["organs"]}
    assert not rows["Larynx"]["present"] and rows["Mandible"]["present"] and rows["Brainstem"]["present"]
    # no probability in the document: the boxes are taken as given, and the voxels stay inside them (plus margin)
    boxes, evidence = read_boxes(path, ORGANS)
    assert np.isnan(evidence).all() and np.isnan(boxes[ORGANS.index("Larynx")]).all()
    k = ORGANS.index("Brainstem")
    zz, yy, xx = np.nonzero(labels == k + 1)
    found = index_box_to_mm(ct, np.array([xx.min(), yy.min(), zz.min()]), np.array([xx.max(), yy.max(), zz.max()]))
    margin = model.margin_mm + max(ct.spacing)
    assert np.all(found[0::2] >= truth_boxes[k][0::2] - margin) and np.all(found[1::2] <= truth_boxes[k][1::2] + margin)


def test_the_localizers_evidence_in_a_document_is_read_for_the_absence_check(tmp_path: Path):
    boxes = np.tile([0.0, 10.0, 0.0, 10.0, 0.0, 10.0], (len(ORGANS), 1))
    document = _document(boxes)
    document["organs"]["Brainstem"].update(probability=0.8, box_std_mm={"x": [2.0, 4.0], "y": [2.0, 4.0],
                                                                         "z": [3.0, 3.0]})
    document["organs"]["Mandible"].update(probability=0.9)  # no spread: taken as given
    path = tmp_path / "d.json"
    path.write_text(json.dumps(document))
    _, evidence = read_boxes(path, ORGANS)
    assert np.allclose(evidence[0], (0.8, 3.0)) and np.isnan(evidence[1:]).all()
    # the contour JSON's list of organs (with their names) is read as well
    document["organs"] = [{"name": n, **e} for n, e in document["organs"].items()]
    path.write_text(json.dumps(document))
    assert np.allclose(read_boxes(path, ORGANS)[0], boxes)


def test_walls_rounded_to_a_hundredth_of_a_millimetre_snap_back_onto_voxel_faces():
    ct, lab = head_neck_phantom(3, size=(40, 40, 30), spacing=(3.337, 3.337, 2.113))
    exact = OrganSlices.from_labels(lab, list(range(1, 8))).boxes()
    rounded = np.round(exact, 2)
    assert np.nanmax(np.abs(rounded - exact)) > 1e-3
    assert np.allclose(snap_to_faces(rounded, ct), exact, atol=1e-9, rtol=0, equal_nan=True)
    moved = exact + 0.5  # half a millimetre off a face: the user's wall stays where it is
    assert np.allclose(snap_to_faces(moved, ct), moved, atol=1e-9, rtol=0, equal_nan=True)


@pytest.mark.parametrize("document, extra, message", [
    ({"scan": "another_ct.nii.gz"}, [], "another_ct.nii.gz"),
    ({"drop": "Mandible"}, [], "no entry for Mandible"),
    ({"flip": "Brainstem"}, [], "lo < hi"),
    ({"coordinate_system": "RAS"}, [], "LPS"),
    ("not json", [], "not JSON"),
    ([1, 2], [], "not a boxes document"),
    ({}, ["--localizer", "{root}/model.npz"], "not both"),
    (None, [], "no such file"),
])
def test_bad_boxes_are_one_line_and_write_nothing(trained, tmp_path: Path, document, extra, message):
    root, _, cases = trained
    path = tmp_path / "scan.json"
    if isinstance(document, dict):
        given = _document(cases[4][2], scan=document.get("scan", "scan.nii.gz"))
        if "coordinate_system" in document:
            given["coordinate_system"] = document["coordinate_system"]
        if "drop" in document:
            del given["organs"][document["drop"]]
        if "flip" in document:
            given["organs"][document["flip"]]["box_mm"]["x"].reverse()
        path.write_text(json.dumps(given))
    elif document is not None:
        path.write_text(document if isinstance(document, str) else json.dumps(document))
    out = tmp_path / "labels.nii.gz"
    args = ["contour", root / "scan.nii.gz", "--model", root / "model.npz", "--boxes", path, "-o", out]
    line = one_line_error(run(*args, *[a.format(root=root) for a in extra]))
    assert message in line
    assert not out.exists()


def test_a_batch_reads_each_scans_document_from_the_boxes_folder(trained, tmp_path: Path):
    from imageforest.apps.contour.batch import contour_many

    root, _, cases = trained
    scans = []
    for seed in (3, 4):
        write_image(cases[seed][0], tmp_path / f"s{seed}_ct.nii.gz")
        scans.append(tmp_path / f"s{seed}_ct.nii.gz")
    boxes = tmp_path / "boxes"
    boxes.mkdir()
    (boxes / "s3_ct.json").write_text(json.dumps(_document(cases[3][2], scan="s3_ct.nii.gz")))
    # s4 has no document: it fails alone
    report = contour_many(scans, tmp_path / "out", model=root / "model.npz", boxes=boxes, retries=0)
    assert [e["status"] for e in report["entries"]] == ["ok", "failed"]
    assert "s4_ct.json" in report["entries"][1]["error"]
    document = json.loads((tmp_path / "out" / "s3_ct.json").read_text())
    assert document["boxes"] == str(boxes / "s3_ct.json")
    line = one_line_error(run("contour", *scans, "--model", root / "model.npz", "--boxes", boxes / "s3_ct.json",
                              "-o", tmp_path / "cli"))
    assert "give a folder" in line


def test_read_boxes_refuses_an_unreadable_file(tmp_path: Path):
    with pytest.raises(InvalidInputError, match="cannot read"):
        read_boxes(tmp_path / "nothing.json", ORGANS)
