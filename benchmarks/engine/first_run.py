"""First run in a new environment: the time a user waits the first time, numba compilation included.

Each measurement is a new Python process. "empty cache" points numba's cache at an empty folder (what a new
installation has); "filled cache" runs the same again with the folder the first run filled. The forests fit a
1000 x 10 set, and then, with 10 trees, a 20,000 x 60 float32 one: beyond 512 KiB the trainer grows small nodes
depth-first, whose kernels a first large fit compiles too. Beside them, the same first fit with scikit-learn's
ExtraTreesClassifier (no compilation, so its first run is its import and fit) and the localizer's command on the
synthetic head-and-neck phantom (128 x 128 x 112).

    python benchmarks/engine/first_run.py [--repeats 2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FIT = """
import numpy as np
rng = np.random.default_rng(0)
X = rng.normal(size=(1000, 10)); y = (X[:, 0] + X[:, 1] > 0).astype(int)
{body}
"""

CASES = {
    "ClassificationForest().fit(X, y).predict(X)":
        "from imageforest import ClassificationForest\nClassificationForest(random_state=0).fit(X, y).predict(X)",
    "RegressionForest().fit(X, y).predict(X)":
        "from imageforest import RegressionForest\nRegressionForest(random_state=0).fit(X, X[:, 0]).predict(X)",
    # beyond 512 KiB the trainer grows small nodes depth-first: a first large fit also compiles those kernels
    "ClassificationForest(10), 20,000 x 60 float32":
        "from imageforest import ClassificationForest\nXb = rng.normal(size=(20000, 60)).astype(np.float32)\n"
        "ClassificationForest(10, random_state=0).fit(Xb, (Xb[:, 0] > 0).astype(int)).predict(Xb)",
    "RegressionForest(10), 20,000 x 60 float32":
        "from imageforest import RegressionForest\nXb = rng.normal(size=(20000, 60)).astype(np.float32)\n"
        "RegressionForest(10, random_state=0).fit(Xb, Xb[:, 0] + Xb[:, 1]).predict(Xb)",
    "peer: ExtraTreesClassifier().fit(X, y).predict(X)":
        "from sklearn.ensemble import ExtraTreesClassifier\nExtraTreesClassifier(random_state=0).fit(X, y).predict(X)",
}


def _run(args: list[str], cache: str) -> float:
    env = {**os.environ, "NUMBA_CACHE_DIR": cache}
    t0 = time.perf_counter()
    subprocess.run(args, env=env, check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=2, help="new environments per case")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        phantom = Path(tmp) / "phantom.nii.gz"
        subprocess.run([sys.executable, "-c",
                        "from imageforest.apps.localize.phantom import head_neck_phantom\n"
                        "from imageforest.imaging.io import write_image\n"
                        f"write_image(head_neck_phantom(2026)[0], {str(phantom)!r})"], check=True)
        cases = {name: [sys.executable, "-c", FIT.format(body=body)] for name, body in CASES.items()}
        cases["imageforest localize phantom.nii.gz"] = [
            sys.executable, "-m", "imageforest.cli", "localize", str(phantom), "-o", str(Path(tmp) / "p.json")]
        print(f"{'first call in a new process':<52}{'empty cache s':>15}{'filled cache s':>16}")
        for name, command in cases.items():
            empty, filled = [], []
            for r in range(args.repeats):
                cache = tempfile.mkdtemp(dir=tmp, prefix=f"cache{r}_")
                empty.append(_run(command, cache))
                filled.append(_run(command, cache))
            print(f"{name:<52}{' / '.join(f'{t:.1f}' for t in empty):>15}"
                  f"{' / '.join(f'{t:.2f}' for t in filled):>16}")


if __name__ == "__main__":
    main()
