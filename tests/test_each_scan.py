"""The per-scan loop the scan commands share: one line per failed scan, the others go on."""

from __future__ import annotations

from pathlib import Path

import click
from click.testing import CliRunner

from imageforest.cli import each_scan
from imageforest.exceptions import InvalidInputError


def test_failed_scans_are_one_line_each_and_the_rest_go_on() -> None:
    def work(k: int, scan: Path) -> dict:
        if scan.name == "bad.nii.gz":
            raise InvalidInputError("bad.nii.gz is not a CT scan\nmore detail")
        if scan.name == "gone.nii.gz":
            raise OSError()  # no message: the scan and the error's kind are named instead
        if scan.name == "bug.nii.gz":
            raise ValueError("unexpected")
        return {"scan": scan.name, "k": k}

    scans = [Path(n) for n in ("a.nii.gz", "bad.nii.gz", "gone.nii.gz", "bug.nii.gz", "b.nii.gz")]
    got = {}

    @click.command()
    def run() -> None:
        got["documents"], got["failures"] = each_scan(scans, work, lambda d: f"done {d['scan']}")

    result = CliRunner().invoke(run)
    assert result.exit_code == 0
    assert got["failures"] == 3
    assert [d["scan"] for d in got["documents"]] == ["a.nii.gz", "b.nii.gz"]
    assert [d["k"] for d in got["documents"]] == [0, 4]
    lines = result.output.splitlines()
    assert "Error: bad.nii.gz is not a CT scan" in lines
    assert "more detail" not in result.output
    assert "Error: gone.nii.gz: OSError" in lines
    assert "Error: bug.nii.gz: internal error (ValueError: unexpected)" in lines
    assert "[5/5] b.nii.gz" in lines and "done b.nii.gz" in lines
