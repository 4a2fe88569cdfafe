"""Batches of scans (`localize_many`, `localize --workers/--resume`) and training through Dask jobs."""

import json
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import one_line_error, run

from imageforest.apps.localize.batch import REPORT_NAME, expand_scan_arguments, is_complete, localize_many, plan_batch
from imageforest.apps.localize.model import OrganLocalizer
from imageforest.apps.localize.phantom import ORGANS, head_neck_phantom
from imageforest.exceptions import InvalidInputError
from imageforest.imaging.ct_organs import OrganSlices
from imageforest.imaging.io import write_image

TINY = dict(n_trees=2, max_depth=6, n_candidates=20, min_samples_leaf=10, points_per_scan=300, refine_trees=1,
            refine_points=300, slice_trees=1, slice_points=200, random_state=3)


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    """Two phantom scans, a corrupt one between them, and a tiny model trained on the phantoms."""
    root = tmp_path_factory.mktemp("archive")
    scans, truths = [], []
    for seed in range(2):
        ct, lab = head_neck_phantom(seed)
        write_image(ct, root / f"case{seed}_ct.nii.gz")
        scans.append(ct)
        truths.append(OrganSlices.from_labels(lab, list(range(1, len(ORGANS) + 1))))
    (root / "broken_ct.nii.gz").write_bytes(b"not a scan")
    model = OrganLocalizer(list(ORGANS), **TINY).fit(scans, truths)
    model.save(root / "model.npz")
    return root, scans, truths


def batch_paths(root: Path) -> list[Path]:
    return [root / "case0_ct.nii.gz", root / "broken_ct.nii.gz", root / "case1_ct.nii.gz"]


def test_scan_arguments_lists_and_globs(archive, tmp_path: Path, monkeypatch):
    root = archive[0]
    listing = tmp_path / "list.txt"
    listing.write_text(f"# the archive\n{root / 'case1_ct.nii.gz'}\n\n{root / 'case0_ct.nii.gz'}\n")
    got = expand_scan_arguments([f"@{listing}", str(root / "case*_ct.nii.gz"), root / "case1_ct.nii.gz"])
    assert got == [root / "case1_ct.nii.gz", root / "case0_ct.nii.gz", root / "case0_ct.nii.gz",
                   root / "case1_ct.nii.gz", root / "case1_ct.nii.gz"]
    with pytest.raises(InvalidInputError, match="no file matches"):
        expand_scan_arguments([str(root / "nothing*.nii.gz")])
    with pytest.raises(InvalidInputError, match="cannot read the list"):
        expand_scan_arguments([f"@{tmp_path / 'missing.txt'}"])
    with pytest.raises(InvalidInputError, match="is an input"):
        plan_batch([root / "case0_ct.nii.gz", root / "case0_ct.json"], root)


def test_batch_in_process_reports_every_scan_and_resumes(archive, tmp_path: Path):
    root = archive[0]
    out = tmp_path / "out"
    lines = []
    report = localize_many(batch_paths(root), out, model=root / "model.npz", mask=tmp_path / "masks",
                           progress=lines.append)
    assert (report["ok"], report["failed"], report["skipped"], report["pending"]) == (2, 1, 0, 0)
    assert report["finished"] is True
    assert len(lines) == 3 and "failed" in lines[1]
    entries = report["entries"]
    assert [e["status"] for e in entries] == ["ok", "failed", "ok"]
    assert entries[1]["attempts"] == 2 and entries[1]["error"].startswith("ImageReadError")
    on_disk = json.loads((out / REPORT_NAME).read_text())
    assert on_disk["entries"] == json.loads(json.dumps(entries))
    for k in (0, 1):
        document = json.loads((out / f"case{k}_ct.json").read_text())
        assert document["scan"] == str(root / f"case{k}_ct.nii.gz") and set(document["organs"]) == set(ORGANS)
        assert (tmp_path / "masks" / f"case{k}_ct_boxes.nii.gz").stat().st_size > 100
    assert not (out / "broken_ct.json").exists()
    # a JSON cut short by a crash is not complete: --resume redoes that scan and skips the others
    (out / "case1_ct.json").write_text('{"scan": ')
    again = localize_many(batch_paths(root), out, model=root / "model.npz", mask=tmp_path / "masks", resume=True)
    assert [e["status"] for e in again["entries"]] == ["skipped", "failed", "ok"]
    assert is_complete(plan_batch([root / "case1_ct.nii.gz"], out, mask=tmp_path / "masks")[0])
    (tmp_path / "masks" / "case0_ct_boxes.nii.gz").unlink()  # an output asked for is missing: not complete
    assert not is_complete(plan_batch([root / "case0_ct.nii.gz"], out, mask=tmp_path / "masks")[0])


def test_a_stopped_batch_leaves_a_report_of_what_it_did(archive, tmp_path: Path):
    root = archive[0]

    def stop(_line):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        localize_many(batch_paths(root), tmp_path, model=root / "model.npz", progress=stop)
    report = json.loads((tmp_path / REPORT_NAME).read_text())
    assert report["finished"] is False and (report["ok"], report["pending"]) == (1, 2)
    assert [e["status"] for e in report["entries"]] == ["ok", "pending", "pending"]


def test_batch_on_a_dask_cluster_and_training_jobs_give_the_same_bytes(archive, tmp_path: Path):
    distributed = pytest.importorskip("dask.distributed", reason="Dask is an optional extra: imageforest[dask]")
    from imageforest.cluster import dask_jobs

    root, scans, truths = archive
    here = localize_many(batch_paths(root)[:2], tmp_path / "here", model=root / "model.npz")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as c, \
            distributed.Client(c) as client:
        report = localize_many(batch_paths(root)[:2], tmp_path / "dask", client, model=root / "model.npz",
                               threads=1)
        assert report["workers"] == 2 and [e["status"] for e in report["entries"]] == ["ok", "failed"]
        assert report["entries"][1]["attempts"] == 2
        assert all(e["worker"].startswith(("tcp://", "inproc://")) for e in report["entries"])
        for name in ("case0_ct.json",):
            a, b = (json.loads((tmp_path / d / name).read_text()) for d in ("here", "dask"))
            assert a["organs"] == b["organs"]
        assert here["entries"][1]["error"] == report["entries"][1]["error"]
        model = OrganLocalizer(list(ORGANS), **TINY).fit(scans, truths, run_jobs=dask_jobs(client))
    model.save(tmp_path / "dask.npz")
    assert (tmp_path / "dask.npz").read_bytes() == (root / "model.npz").read_bytes()


def test_batch_command_line(archive, tmp_path: Path):
    root = archive[0]
    listing = tmp_path / "scans.txt"
    listing.write_text("\n".join(map(str, batch_paths(root))) + "\n")
    out = tmp_path / "out"
    r = run("localize", f"@{listing}", "--model", root / "model.npz", "-o", out, "--resume", "--mask", tmp_path / "m")
    assert r.exit_code == 1, r.output  # the broken scan
    assert "2 localized, 1 failed, 0 skipped" in r.stderr
    assert len(list((tmp_path / "m").glob("*_boxes.nii.gz"))) == 2
    r = run("localize", str(root / "case*_ct.nii.gz"), "--model", root / "model.npz", "-o", out, "--resume")
    assert r.exit_code == 0 and "0 localized, 0 failed, 2 skipped" in r.stderr
    assert "give -o OUT" in one_line_error(run("localize", root / "case0_ct.nii.gz", "--resume"))
    assert "not both" in one_line_error(run("localize", root / "case0_ct.nii.gz", "-o", out, "--workers", "1",
                                            "--scheduler", "tcp://127.0.0.1:1"))
    assert "at least 1" in one_line_error(run("localize", root / "case0_ct.nii.gz", "-o", out, "--workers", "0"))
    assert "no file matches" in one_line_error(run("localize", str(root / "zz*.nii.gz"), "-o", out))
    assert np.all([p.suffix == ".json" for p in out.iterdir()])
