"""Fault tolerance of a batch: 1,000 scans on 2 local workers, a corrupt scan in the middle, one worker killed.

    python benchmarks/scale/faults.py ../shared/data/openkbp-hn [--scans 1000] [--kill-after 300]

The archive is a folder of symbolic links with distinct names over the data's scans, plus one file of garbage
bytes in the middle. `imageforest localize @LIST -o OUT --workers 2` runs as a user runs it; once `--kill-after`
JSON files exist, one worker process gets SIGKILL (its nanny starts a new one). Checked afterwards: every good
scan's JSON exists exactly once and is valid, no temporary file is left, the corrupt scan is reported failed, the
exit code is 1; then a `--resume` run redoes no finished scan.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.scale._common import archive_scans


def worker_processes(parent: psutil.Process) -> list[psutil.Process]:
    """The Dask worker processes a `localize --workers` process started (its multiprocessing children)."""
    out = []
    for child in parent.children(recursive=True):
        try:
            cmd = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if "spawn_main" in cmd or "forkserver" in cmd:
            out.append(child)
    return out


def run_cli(listing: Path, out: Path, log: Path, resume: bool = False, kill_after: int | None = None
            ) -> tuple[int, float, int | None]:
    cmd = [sys.executable, "-m", "imageforest.cli", "localize", f"@{listing}", "-o", str(out), "--workers", "2"]
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd + (["--resume"] if resume else []), stderr=fh, stdout=subprocess.DEVNULL)
        killed = None
        while proc.poll() is None:
            time.sleep(0.5)
            if kill_after is not None and killed is None and len(list(out.glob("*.json"))) >= kill_after:
                workers = worker_processes(psutil.Process(proc.pid))
                if workers:
                    killed = workers[0].pid
                    os.kill(killed, signal.SIGKILL)
                    print(f"killed worker process {killed} after {len(list(out.glob('*.json')))} scans", flush=True)
    return proc.returncode, time.perf_counter() - t0, killed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", type=Path)
    ap.add_argument("--scans", type=int, default=1000)
    ap.add_argument("--kill-after", type=int, default=300)
    args = ap.parse_args()
    sources = archive_scans(args.data, args.scans)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        archive = root / "archive"
        archive.mkdir()
        bad = args.scans // 2
        paths = []
        for k, src in enumerate(sources):
            path = archive / f"scan_{k:05d}_ct.nii.gz"
            if k == bad:
                path.write_bytes(os.urandom(4096))  # a corrupt scan in the middle
            else:
                path.symlink_to(src.resolve())
            paths.append(path)
        listing = root / "scans.txt"
        listing.write_text("\n".join(map(str, paths)) + "\n")
        out = root / "out"
        code, wall, killed = run_cli(listing, out, root / "run.log", kill_after=args.kill_after)
        report = json.loads((out / "batch_report.json").read_text())
        jsons = sorted(p.name for p in out.glob("*.json") if p.name != "batch_report.json")
        expected = sorted(f"scan_{k:05d}_ct.json" for k in range(len(paths)) if k != bad)
        valid = 0
        for name in jsons:
            doc = json.loads((out / name).read_text())
            valid += doc["scan"] == str(archive / name.replace(".json", ".nii.gz")) and len(doc["organs"]) > 0
        leftovers = [p.name for p in out.iterdir() if p.name.startswith(".")]
        failed = [e for e in report["entries"] if e["status"] == "failed"]
        retried = sum(e["attempts"] > 1 for e in report["entries"])
        print(f"{len(paths)} scans, 2 workers, {'one worker killed' if killed else 'NO worker killed'}: "
              f"{wall:.0f} s, exit code {code}")
        print(f"  JSON files: {len(jsons)} (expected {len(expected)}; the same names: {jsons == expected}), "
              f"valid {valid}; temporary files left: {len(leftovers)}")
        print(f"  report: ok {report['ok']}, failed {report['failed']} "
              f"({', '.join(Path(e['scan']).name + ': ' + e['error'] for e in failed)}), retried {retried}")
        before = {p.name: p.stat().st_mtime_ns for p in out.glob("scan_*.json")}
        code2, wall2, _ = run_cli(listing, out, root / "resume.log", resume=True)
        again = json.loads((out / "batch_report.json").read_text())
        after = {p.name: p.stat().st_mtime_ns for p in out.glob("scan_*.json")}
        print(f"--resume: {wall2:.1f} s, exit code {code2}; skipped {again['skipped']}, localized {again['ok']}, "
              f"failed {again['failed']} (the corrupt scan, tried again); finished outputs rewritten: "
              f"{sum(before[n] != after.get(n) for n in before)}")


if __name__ == "__main__":
    main()
