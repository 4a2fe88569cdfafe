"""`make demo`: the main job end to end with nothing but the repository.

Generates the synthetic head-and-neck phantom (deterministic), writes it as NIfTI, runs `imageforest localize` on
it with the default model shipped in the package, prints the boxes and their errors against the phantom's truth, and
writes the overlay PNG (solid: found, dashed: truth).

    python -m imageforest.apps.localize.scripts.demo --out demo_out
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from imageforest.apps.localize.api import load_localizer
from imageforest.apps.localize.evaluate import OrganScores
from imageforest.apps.localize.overlay import write_overlay
from imageforest.apps.localize.phantom import ORGANS, head_neck_phantom
from imageforest.imaging.ct_organs import OrganSlices
from imageforest.imaging.io import write_image


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("demo_out"))
    ap.add_argument("--seed", type=int, default=2026, help="phantom seed")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    ct, labels = head_neck_phantom(args.seed)
    scan = args.out / "phantom_ct.nii.gz"
    write_image(ct, scan)
    write_image(labels, args.out / "phantom_organs.nii.gz")
    truth = OrganSlices.from_labels(labels, list(range(1, len(ORGANS) + 1))).boxes()
    spacing = tuple(float(s) for s in ct.spacing)
    print(f"phantom written to {scan} ({ct.array.shape[::-1]} voxels, spacing {spacing} mm)")

    # The command a user runs, in a new process: its time includes start-up (and numba compilation on a
    # fresh install).
    json_path = args.out / "phantom_localization.json"
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "imageforest.cli", "localize", str(scan), "-o", str(json_path),
                           "--overlay", str(args.out / "phantom_overlay_cli.png")], check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(proc.returncode)
    doc = json.loads(json_path.read_text())
    print(f"imageforest localize: {wall:.2f} s in a new process (start-up included); "
          f"localize {doc['timing_s']['localize']:.2f} s")

    model = load_localizer()
    names = list(model.organs)
    predicted = np.full((len(names), 6), np.nan)
    present = np.zeros(len(names), bool)
    for k, name in enumerate(names):
        e = doc["organs"][name]
        present[k] = e["present"]
        if e["present"]:
            predicted[k] = [v for axis in "xyz" for v in e["box_mm"][axis]]
    order = [ORGANS.index(n) for n in names]
    truth = truth[order]
    scores = OrganScores(names)
    scores.add(predicted, present, truth)
    print(f"\n{'organ':<14}{'present':>8}{'prob':>6}   {'mean wall error (mm)':>20}  walls x_lo..z_hi (mm)")
    for k, (name, row) in enumerate(zip(names, scores.rows(), strict=True)):
        e = doc["organs"][name]
        walls = " ".join(f"{v:5.1f}" for v in row["walls_mm"]) if row["n"] else "-"
        err = f"{row['wall_mm']:20.1f}" if row["n"] else f"{'(not found)' if not np.isnan(truth[k, 0]) else '-':>20}"
        print(f"{name:<14}{'yes' if e['present'] else 'no':>8}{e['probability']:6.2f}   {err}  {walls}")
    print(f"mean wall error over organs: {scores.mean_wall_error():.1f} mm; presence correct: "
          f"{scores.presence_accuracy():.0%}")
    result = model.localize(ct)
    png = args.out / "phantom_overlay.png"
    write_overlay(result, png, truth=truth, title=f"phantom seed {args.seed}, default model")
    print(f"overlay: {png}\nJSON: {json_path}")


if __name__ == "__main__":
    main()
