"""Time and memory of `imageforest contour` end to end (a new process, as a user runs it), on a real 128^3 scan and
on the same scan resampled to 512 x 512 x 300 voxels, beside the multi-atlas peer's time on the real scan.

    python benchmarks/contour/speed.py ../shared/data/openkbp-hn [--case train_pt_1] [--atlas]

Each command runs twice: the first run of a process pays numba's cache loading; peak memory is the child's
maximum resident set (getrusage).
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from imageforest.imaging.ct import read_scan
from imageforest.imaging.io import Image, resample, write_image


def run(args: list[str]) -> tuple[float, float]:
    """(seconds, peak resident GB) of one `imageforest` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "imageforest.cli", *args], check=True, capture_output=True)
    elapsed = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return elapsed, max(peak, before) / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path)
    ap.add_argument("--case", default="train_pt_1")
    ap.add_argument("--atlas", action="store_true", help="also time the multi-atlas peer on the real scan")
    args = ap.parse_args()
    scan_path = args.data / f"{args.case}_ct.nii.gz"
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        scan = read_scan(scan_path)
        extent = np.asarray(scan.size) * np.asarray(scan.spacing)
        big = resample(Image(scan.array.astype(np.float32), scan.spacing, scan.origin, scan.direction),
                       extent / np.array([512, 512, 300]), "linear", fill=-1024.0)
        big.array = np.round(big.array).astype(np.int16)
        write_image(big, tmp / "big.nii.gz")
        for name, path in (("128^3 real scan", scan_path), ("512x512x300 (the same, resampled)", tmp / "big.nii.gz")):
            for attempt in (1, 2):
                seconds, gb = run(["contour", str(path), "-o", str(tmp / "out.nii.gz"), "--json",
                                   str(tmp / "out.json")])
                print(f"{name}: run {attempt} {seconds:.2f} s, peak {gb:.2f} GB", flush=True)
    if args.atlas:
        from benchmarks.contour.atlas import MultiAtlasSegmentation
        from imageforest.imaging.ct_organs import openkbp_cases
        from imageforest.imaging.io import read_image

        cases, _ = openkbp_cases(args.data)
        atlases = [c for c in cases if c.name != args.case][:30]
        model = MultiAtlasSegmentation(5).fit([read_scan(c.scan) for c in atlases],
                                              [np.asarray(read_image(c.labels).array) for c in atlases])
        t0 = time.perf_counter()
        model.predict(scan)
        print(f"multi-atlas (5 of 10 atlases, affine + demons): {time.perf_counter() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
