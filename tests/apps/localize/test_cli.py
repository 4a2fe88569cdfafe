"""`imageforest localize` and `imageforest train-localizer`: outputs, and one-line errors for bad input."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk
from cli_helpers import one_line_error, run

from imageforest.apps.localize.model import OrganLocalizer
from imageforest.apps.localize.phantom import ORGANS, head_neck_phantom
from imageforest.imaging.ct_organs import OrganSlices
from imageforest.imaging.io import Image, read_image, write_image


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    data = root / "data"
    data.mkdir()
    scans, truths = [], []
    for seed in range(4):
        ct, lab = head_neck_phantom(seed)
        write_image(ct, data / f"ph{seed}_ct.nii.gz")
        write_image(lab, data / f"ph{seed}_organs.nii.gz")
        scans.append(ct)
        truths.append(OrganSlices.from_labels(lab, list(range(1, 8))))
    # small fine and slice stages: these tests are about files and messages, not accuracy
    model = OrganLocalizer(list(ORGANS), n_trees=3, max_depth=8, n_candidates=20, min_samples_leaf=10,
                           points_per_scan=400, refine_trees=1, refine_points=300, slice_trees=1, slice_points=200,
                           random_state=0).fit(scans, truths)
    model.model_card_ = {"name": "test-phantoms", "version": "0"}
    model.save(root / "model.npz")
    return root


def test_localize_writes_json_overlay_and_mask(workspace: Path):
    scan = workspace / "data" / "ph0_ct.nii.gz"
    before = scan.read_bytes()
    out, png, mask = workspace / "out.json", workspace / "o.png", workspace / "m.nii.gz"
    r = run("localize", scan, "--model", workspace / "model.npz", "-o", out, "--overlay", png, "--mask", mask)
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert doc["model"] == {"name": "test-phantoms", "version": "0"}
    assert set(doc["organs"]) == set(ORGANS) and doc["coordinate_system"] == "LPS"
    assert {"read", "localize", "total"} <= set(doc["timing_s"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    labels = read_image(mask)
    assert labels.array.shape == read_image(scan).array.shape
    assert "Brainstem" in r.stderr  # the readable table
    assert scan.read_bytes() == before  # inputs untouched
    # a scan stored in RAS gets its mask in RAS too: the same boxes, voxel for voxel in the file's own axes
    ras = sitk.DICOMOrient(sitk.ReadImage(str(scan)), "RAS")
    sitk.WriteImage(ras, str(workspace / "ras_ct.nii.gz"))
    r = run("localize", workspace / "ras_ct.nii.gz", "--model", workspace / "model.npz", "-o", workspace / "r.json",
            "--mask", workspace / "ras_mask.nii.gz")
    assert r.exit_code == 0, r.output
    ras_mask = sitk.ReadImage(str(workspace / "ras_mask.nii.gz"))
    assert np.allclose(ras_mask.GetDirection(), ras.GetDirection()) and ras_mask.GetSize() == ras.GetSize()
    assert np.array_equal(sitk.GetArrayFromImage(ras_mask),
                          sitk.GetArrayFromImage(sitk.DICOMOrient(sitk.ReadImage(str(mask)), "RAS")))


def test_localize_several_scans_to_a_folder_and_organ_selection(workspace: Path):
    folder = workspace / "many"
    folder.mkdir()
    scans = [workspace / "data" / f"ph{k}_ct.nii.gz" for k in (1, 2)]
    r = run("localize", *scans, "--model", workspace / "model.npz", "-o", folder, "--organs", "Brainstem,Larynx")
    assert r.exit_code == 0, r.output
    docs = [json.loads((folder / f"ph{k}_ct.json").read_text()) for k in (1, 2)]
    assert all(list(d["organs"]) == ["Brainstem", "Larynx"] for d in docs)


def test_stdout_json_when_no_output(workspace: Path):
    r = run("localize", workspace / "data" / "ph3_ct.nii.gz", "--model", workspace / "model.npz")
    assert r.exit_code == 0
    assert json.loads(r.stdout)["scan"].endswith("ph3_ct.nii.gz")


def test_bad_inputs_end_with_one_line(workspace: Path, tmp_path: Path):
    model = workspace / "model.npz"
    assert "no such file" in one_line_error(run("localize", tmp_path / "missing.nii.gz", "--model", model))
    corrupt = tmp_path / "corrupt.nii.gz"
    corrupt.write_bytes((workspace / "data" / "ph0_ct.nii.gz").read_bytes()[:5000])
    one_line_error(run("localize", corrupt, "--model", model))
    four_d = tmp_path / "four.nii.gz"
    sitk.WriteImage(sitk.GetImageFromArray(np.zeros((2, 3, 4, 5), np.int16)), str(four_d))
    one_line_error(run("localize", four_d, "--model", model))
    flat = tmp_path / "flat.png"
    sitk.WriteImage(sitk.GetImageFromArray(np.zeros((20, 20), np.uint8)), str(flat))
    one_line_error(run("localize", flat, "--model", model))
    empty = tmp_path / "empty.nii.gz"
    sitk.WriteImage(sitk.GetImageFromArray(np.full((8, 8, 8), -1024, np.int16)), str(empty))
    assert "covers only" in one_line_error(run("localize", empty, "--model", model))  # 8 mm of nothing
    air = sitk.GetImageFromArray((np.random.default_rng(0).normal(-1000, 20, (30, 40, 40))).astype(np.int16))
    air.SetSpacing((3.0, 3.0, 3.0))
    sitk.WriteImage(air, str(tmp_path / "air.nii.gz"))
    r = run("localize", tmp_path / "air.nii.gz", "--model", model)  # air only: every organ absent, not an error
    doc = json.loads(r.stdout)
    assert r.exit_code == 0 and not any(e["present"] for e in doc["organs"].values())
    assert any("hardly any body" in w for w in doc["warnings"])
    scan = workspace / "data" / "ph0_ct.nii.gz"
    # a missing output folder is created, as by every command; a file in its place is refused
    assert run("localize", scan, "--model", model, "-o", tmp_path / "made" / "x.json").exit_code == 0
    assert (tmp_path / "made" / "x.json").is_file()
    (tmp_path / "plain").write_text("a file")
    assert "is a file" in one_line_error(run("localize", scan, "--model", model, "-o", tmp_path / "plain" / "x.json"))
    assert "is an input;" in one_line_error(run("localize", scan, "--model", model, "--mask", scan))
    assert "unknown organ" in one_line_error(run("localize", scan, "--model", model, "--organs", "Liver"))
    assert "model" in one_line_error(run("localize", scan, "--model", corrupt)).lower()
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        assert "not writable" in one_line_error(run("localize", scan, "--model", model, "-o", locked / "x.json"))


def test_train_localizer_command(workspace: Path, tmp_path: Path):
    import shutil

    data = tmp_path / "two"  # two of the phantoms are enough to train from a folder
    data.mkdir()
    for name in ("ph0_ct", "ph0_organs", "ph1_ct", "ph1_organs"):
        shutil.copy(workspace / "data" / f"{name}.nii.gz", data)
    out = tmp_path / "trained.npz"
    r = run("train-localizer", data, "-o", out, "--organs", ",".join(ORGANS), "--trees", "2",
            "--depth", "6", "--points-per-scan", "300", "--name", "mine")
    assert r.exit_code == 0, r.output
    assert "read 2/2 scans" in r.stderr
    model = OrganLocalizer.load(out)
    assert model.organs == list(ORGANS) and model.model_card_["name"] == "mine"
    # what the flags leave unsaid comes from the default model's recipe
    from imageforest.apps.localize.recipe import PARAMETERS

    assert (model.n_trees, model.max_depth) == (2, 6)
    assert model.min_samples_leaf == PARAMETERS["min_samples_leaf"]
    assert model.refine_jitter_mm == PARAMETERS["refine_jitter_mm"]
    assert all(len(c) == len(PARAMETERS["refine_jitter_mm"]) for c in model.refiners_ if c is not None)
    assert "organ names" in one_line_error(run("train-localizer", workspace / "data", "-o", tmp_path / "x.npz"))


def test_console_script_runs_without_traceback(tmp_path: Path):
    """The installed entry point itself (a new process): a missing scan gives one line and exit code 1."""
    proc = subprocess.run([sys.executable, "-m", "imageforest.cli", "localize", str(tmp_path / "none.nii.gz")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr


def test_nothing_is_lost_in_a_batch(workspace: Path, tmp_path: Path, monkeypatch):
    """Outputs never land on an input, a device or each other; folders are created; scans with one name in two
    folders keep two documents; one scan's unexpected failure does not stop the batch."""
    import shutil

    model = workspace / "model.npz"
    d = tmp_path / "d"
    d.mkdir()
    shutil.copy(workspace / "data" / "ph1_ct.nii.gz", d / "a.nii.gz")
    shutil.copy(workspace / "data" / "ph2_ct.nii.gz", d / "a_boxes.nii.gz")
    before = (d / "a_boxes.nii.gz").read_bytes()
    line = one_line_error(run("localize", d / "a.nii.gz", d / "a_boxes.nii.gz", "--model", model, "--mask", d))
    assert "is an input;" in line and (d / "a_boxes.nii.gz").read_bytes() == before

    for k in (1, 2):
        (tmp_path / f"p{k}").mkdir()
        shutil.copy(workspace / "data" / f"ph{k}_ct.nii.gz", tmp_path / f"p{k}" / "ct.nii.gz")
    new = tmp_path / "new" / "folder"
    r = run("localize", tmp_path / "p1" / "ct.nii.gz", tmp_path / "p2" / "ct.nii.gz", "--model", model, "-o", new)
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in new.iterdir()) == ["p1_ct.json", "p2_ct.json"]

    r = run("localize", d / "a.nii.gz", "--model", model, "-o", os.devnull)  # discards, and stays a device
    assert r.exit_code == 0, r.output
    assert Path(os.devnull).is_char_device()

    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    assert "not a regular file" in one_line_error(run("localize", d / "a.nii.gz", "--model", model, "-o", fifo))
    assert "is not a regular file" in one_line_error(run("localize", fifo, "--model", model))  # no hang
    assert "write the mask as" in one_line_error(run("localize", d / "a.nii.gz", "--model", model,
                                                     "--mask", tmp_path / "m.txt"))

    from imageforest.apps.localize import api

    real = api.localize_file

    def flaky(path, *args, **kwargs):
        if Path(path).parent.name == "p1":
            raise TypeError("unexpected")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(api, "localize_file", flaky)
    r = run("localize", tmp_path / "p1" / "ct.nii.gz", tmp_path / "p2" / "ct.nii.gz", "--model", model, "--compact")
    assert r.exit_code == 1 and "internal error (TypeError: unexpected)" in r.stderr
    docs = json.loads(r.stdout)
    assert len(docs) == 1 and docs[0]["scan"].endswith("p2/ct.nii.gz") and len(r.stdout.strip().splitlines()) == 1


def test_usage_errors_are_one_line_and_model_info(workspace: Path, tmp_path: Path, legacy_layout):
    proc = subprocess.run([sys.executable, "-m", "imageforest.cli", "localize", "--threads", "abc", "x.nii.gz"],
                          capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stderr.strip().count("\n") == 0 and proc.stderr.startswith("Error: ")
    r = run("model-info", workspace / "model.npz")
    assert r.exit_code == 0 and "organs: Brainstem" in r.output and "name: test-phantoms" in r.output
    # a file of the older single-record layout gets the same card
    from imageforest.forest.serialization import save_model

    save_model(tmp_path / "old.npz", *legacy_layout(OrganLocalizer.load(workspace / "model.npz")))
    old = run("model-info", tmp_path / "old.npz")
    assert old.exit_code == 0 and old.output.splitlines()[1:] == r.output.splitlines()[1:]
    assert "no such model file" in one_line_error(run("model-info", workspace / "missing.npz"))


def test_scans_that_are_no_ct_or_would_not_fit_are_refused_or_flagged(workspace: Path, tmp_path: Path):
    """A constant or 2 x 2 x 2 volume is refused; an MR-like scan (no air at -1000 HU) is answered with a warning in
    the JSON; a scan whose 4 mm working grid would hold billions of voxels is refused from its header."""
    import SimpleITK as sitk

    model = workspace / "model.npz"
    ct = read_image(workspace / "data" / "ph3_ct.nii.gz")
    cases = {"constant": np.full((40, 40, 40), 3000, np.int16), "tiny": np.zeros((2, 2, 2), np.int16)}
    for name, arr in cases.items():
        write_image(Image(arr, np.array([2.0, 2.0, 2.0]), np.zeros(3), np.eye(3)), tmp_path / f"{name}.nii.gz")
    assert "constant volume" in one_line_error(run("localize", tmp_path / "constant.nii.gz", "--model", model))
    assert "at least 8 voxels" in one_line_error(run("localize", tmp_path / "tiny.nii.gz", "--model", model))
    # 2 x 2 x 2 voxels of 100 mm covers 200 mm, but is no CT: it gave 6 of 7 organs "present"
    write_image(Image(np.zeros((2, 2, 2), np.int16), np.full(3, 100.0), np.zeros(3), np.eye(3)),
                tmp_path / "coarse.nii.gz")
    assert "at least 8 voxels" in one_line_error(run("localize", tmp_path / "coarse.nii.gz", "--model", model))
    write_image(Image(np.zeros((10, 10, 10), np.int16), np.full(3, 30.0), np.zeros(3), np.eye(3)),
                tmp_path / "thick.nii.gz")
    assert "coarser than any CT" in one_line_error(run("localize", tmp_path / "thick.nii.gz", "--model", model))
    mr = Image((ct.array.astype(np.float32) + 1024.0) * 2.0, ct.spacing, ct.origin, ct.direction)
    write_image(mr, tmp_path / "mr.nii.gz")
    r = run("localize", tmp_path / "mr.nii.gz", "--model", model)
    doc = json.loads(r.stdout)
    assert r.exit_code == 0 and any("Hounsfield" in w for w in doc["warnings"]) and "Warning:" in r.stderr
    assert json.loads(run("localize", workspace / "data" / "ph3_ct.nii.gz", "--model", model).stdout)["warnings"] == []
    huge = sitk.GetImageFromArray(np.zeros((40, 64, 64), np.int16))
    huge.SetSpacing((100.0, 100.0, 100.0))
    sitk.WriteImage(huge, str(tmp_path / "huge.nii.gz"))
    line = one_line_error(run("localize", tmp_path / "huge.nii.gz", "--model", model))
    assert "working grid would hold" in line and "IMAGEFOREST_MAX_WORKING_VOXELS" in line
