"""Latency of `imageforest localize` with the default model: 128^3 and 512 x 512 x 300 scans, warm and cold.

    python benchmarks/localize/speed.py [SCAN]

SCAN defaults to the generated phantom. The 512 x 512 x 300 scan is SCAN resampled (linear) onto a 0.98 x 0.98 x
1.0 mm grid and written as NIfTI, so read time (decompression) is included. Measured:
- in-process, warm: read + localize per scan (median of 5), and the peer a SimpleITK user would run first, one
  affine registration of an atlas to the scan (the unit of multi-atlas localization), on the same scans;
- a new process (`python -m imageforest.cli localize`), with the numba cache as installed (warm) and with an empty
  cache (cold: compilation included).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import SimpleITK as sitk

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks._measure import measure, mib
from benchmarks.localize.baselines import MultiAtlasAffine
from imageforest.apps.localize.api import load_localizer
from imageforest.apps.localize.phantom import head_neck_phantom
from imageforest.imaging.ct import read_scan
from imageforest.imaging.ct_organs import OrganSlices
from imageforest.imaging.io import Image, write_image


def big_version(scan: Image, path: Path) -> None:
    src = scan.to_sitk()
    size = (512, 512, 300)
    extent = np.array(src.GetSize()) * np.array(src.GetSpacing())
    spacing = tuple(float(e / s) for e, s in zip(extent, size, strict=True))
    out = sitk.Resample(src, size, sitk.Transform(), sitk.sitkLinear, src.GetOrigin(), spacing, src.GetDirection(),
                        -1024, sitk.sitkInt16)
    sitk.WriteImage(out, str(path), useCompression=True)


def cli_seconds(scan: Path, env_extra: dict | None = None) -> float:
    import os

    env = {**os.environ, **(env_extra or {})}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "imageforest.cli", "localize", str(scan), "-o", os.devnull],
                   check=True, env=env, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scan", type=Path, nargs="?", help="a 128^3-like CT scan (default: the generated phantom)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        if args.scan is not None:
            small = args.scan
        else:
            small = tmp_path / "phantom_ct.nii.gz"
            write_image(head_neck_phantom(2026)[0], small)
        big = tmp_path / "big_ct.nii.gz"
        big_version(read_scan(small), big)
        model = load_localizer()
        ct, labels = head_neck_phantom(7)
        boxes = OrganSlices.from_labels(labels, list(range(1, 8))).boxes()
        atlas = MultiAtlasAffine(n_atlases=1, n_candidates=1).fit([ct], [boxes])
        print(f"{'scan':<22}{'read+localize (s)':>18}{'peak MiB':>10}{'1 affine registration (s)':>28}")
        for name, path in (("128^3-like " + small.name[:10], small), ("512x512x300", big)):
            times, peak = [], 0
            for _ in range(5):
                _, dt, mem = measure(lambda p=path: model.localize(read_scan(p)))
                times.append(dt)
                peak = max(peak, mem)
            scan = read_scan(path)
            _, reg_s, _ = measure(lambda s=scan: atlas.predict(s))
            print(f"{name:<22}{statistics.median(times):18.3f}{mib(peak):>10}{reg_s:28.2f}")
        for name, path in (("128^3-like", small), ("512x512x300", big)):
            warm = statistics.median(cli_seconds(path) for _ in range(3))
            with tempfile.TemporaryDirectory() as cache:
                cold = cli_seconds(path, {"NUMBA_CACHE_DIR": cache})
            print(f"new process, {name:<12}: {warm:.2f} s with the installed numba cache, {cold:.2f} s with an "
                  "empty cache (compilation included)")


if __name__ == "__main__":
    main()
