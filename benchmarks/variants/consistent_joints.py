"""Consistent regression forests on joint positions from depth images: sec. 7.2 (Fig. 5) of Denil, Matheson &
de Freitas, "Narrowing the Gap: Random Forests In Theory and In Practice" (ICML 2014), on rendered bodies.

    python benchmarks/variants/consistent_joints.py [--train 400] [--test 100] [--points 10000] [--probes 200]
        [--trees 50] [--runs 2] [--png OUT.png] [--json OUT.json]
    python benchmarks/variants/consistent_joints.py --plot OUT.json --png OUT.png   # the figure of a saved run

As the paper: every joint has its own forest, trained on pixels of the body parts around that joint, regressing
the 2-D offset (pixels) from a pixel to the joint; features are depth differences of two probes at offsets scaled
by the pixel's depth; the error is the mean squared offset error in pixels over all test pixels of those parts.
Scaled to this machine: bodies from `data_scripts/render_bodies.py` (320 x 240) instead of CMU poses, `--train`
poses (the paper: 2000) and `--test` poses (500), 20 pixels per part and pose, then `--points` of them per joint
(the paper: 40,000), and a fixed bank of `--probes` probe pairs computed once (the paper draws 1000 candidate pairs
at each node); each forest draws one third of the bank at a node. The methods and their settings are
`consistent.py`'s; the paper's ordering of the errors, largest first, is Biau08, Biau12, ours (Denil), Breiman.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks._figures import pyplot, save_png
from benchmarks._measure import write_results
from benchmarks.variants.consistent import METHODS
from imageforest import RegressionForest
from imageforest.apps.bodyparts.renderer import PART, render

# The paper's Fig. 5 shows the joints of the left side; each joint's forest sees the parts around it.
JOINT_PARTS = {
    "shoulder_left": ("shoulder_left", "upper_arm_left", "torso_upper_left"),
    "elbow_left": ("upper_arm_left", "elbow_left", "forearm_left"),
    "wrist_left": ("forearm_left", "wrist_left", "hand_left"),
    "hand_left": ("wrist_left", "hand_left"),
    "knee_left": ("upper_leg_left", "knee_left", "lower_leg_left"),
    "ankle_left": ("lower_leg_left", "ankle_left", "foot_left"),
}
ORDER = ("Biau08", "Biau12", "Ours", "Breiman")  # the paper's ordering, largest error first
PROBE_STD = 60.0  # pixel-metres: a probe offset of u / depth pixels (30 pixels at 2 m)
BACKGROUND_MM = 10_000.0  # what a probe off the body or the image reads


def bodies(n: int, seed: int) -> list[tuple[np.ndarray, np.ndarray, dict]]:
    """n rendered bodies (depth mm, parts, joints document), image k from the generator seeded (seed, k)."""
    return [render(np.random.default_rng((seed, k))) for k in range(n)]


def probe_features(depth: np.ndarray, yx: np.ndarray, probes: np.ndarray) -> np.ndarray:
    """(n, F) float32 depth differences d(p + u / d(p)) - d(p + v / d(p)) in mm of the pixels yx (n, 2) for the
    probe pairs (F, 4) [uy, ux, vy, vx] in pixel-metres."""
    h, w = depth.shape
    d = np.where(depth > 0, depth, BACKGROUND_MM).astype(np.float64)
    scale = 1000.0 / d[yx[:, 0], yx[:, 1]]  # 1 / depth in metres

    def read(dy: np.ndarray, dx: np.ndarray) -> np.ndarray:
        y = np.rint(yx[:, 0, None] + dy[None, :] * scale[:, None]).astype(np.int64)
        x = np.rint(yx[:, 1, None] + dx[None, :] * scale[:, None]).astype(np.int64)
        inside = (y >= 0) & (y < h) & (x >= 0) & (x < w)
        return np.where(inside, d[np.clip(y, 0, h - 1), np.clip(x, 0, w - 1)], BACKGROUND_MM)

    return (read(probes[:, 0], probes[:, 1]) - read(probes[:, 2], probes[:, 3])).astype(np.float32)


def joint_pixels(images, joint: str, per_part: int | None, rng: np.random.Generator, probes: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Features (n, F) and offsets (n, 2) pixels (y, x) to `joint` of the pixels of its parts: `per_part` random
    pixels per part and image (None: all of them)."""
    codes = [PART[p] for p in JOINT_PARTS[joint]]
    X, Y = [], []
    for depth, parts, doc in images:
        jx, jy = doc["joints"][joint]["pixel"]
        picks = []
        for code in codes:
            yx = np.argwhere(parts == code)
            if per_part is not None and len(yx) > per_part:
                yx = yx[rng.choice(len(yx), per_part, replace=False)]
            picks.append(yx)
        yx = np.concatenate(picks)
        if len(yx) == 0:
            continue
        X.append(probe_features(depth, yx, probes))
        Y.append(np.c_[jy - yx[:, 0], jx - yx[:, 1]])
    return np.concatenate(X), np.concatenate(Y).astype(np.float64)


def plot(results: dict, path: Path) -> None:
    """The paper's Fig. 5: per joint, the four methods' mean squared offset errors with one standard deviation."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 4))
    joints = list(results)
    width = 0.8 / len(ORDER)
    for k, m in enumerate(ORDER):
        means = [results[j][m]["mse_mean"] for j in joints]
        stds = [results[j][m]["mse_std"] for j in joints]
        ax.bar(np.arange(len(joints)) + (k - 1.5) * width, means, width, yerr=stds, capsize=2, label=m)
    ax.set_xticks(np.arange(len(joints)), [j.replace("_", " ") for j in joints])
    ax.set_ylabel("mean squared offset error (pixels²)")
    ax.set_title("Joint offsets from depth probes on rendered bodies: Biau08, Biau12, ours (Denil), Breiman")
    ax.legend(frameon=False)
    save_png(fig, path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train", type=int, default=400, help="training poses")
    ap.add_argument("--test", type=int, default=100, help="test poses")
    ap.add_argument("--points", type=int, default=10_000, help="training pixels per joint")
    ap.add_argument("--probes", type=int, default=200, help="probe pairs in the feature bank")
    ap.add_argument("--trees", type=int, default=50)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--joints", default=",".join(JOINT_PARTS))
    ap.add_argument("--png", type=Path)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--plot", type=Path, help="draw --png from the --json of an earlier run, and stop")
    args = ap.parse_args()
    if args.plot:
        import json

        plot(json.loads(args.plot.read_text())["results"], args.png)
        return
    t0 = time.perf_counter()
    train, test = bodies(args.train, 1), bodies(args.test, 2)
    print(f"rendered {args.train} + {args.test} bodies in {time.perf_counter() - t0:.1f} s; {args.points} training "
          f"pixels per joint, {args.probes} probe pairs, T = {args.trees}, {args.runs} runs")
    shared = {"n_trees": args.trees, "n_candidates": 1 / 3, "min_samples_leaf": 5, "criterion": "squared_error",
              "leaf_model": "constant", "n_jobs": 2}
    joints = args.joints.split(",")
    mse = {j: {m: [] for m in ORDER} for j in joints}
    fit_s = {m: [] for m in ORDER}
    for run in range(args.runs):
        rng = np.random.default_rng(run)
        probes = rng.normal(0.0, PROBE_STD, (args.probes, 4))
        for j in joints:
            X, Y = joint_pixels(train, j, 20, rng, probes)
            keep = rng.choice(len(X), min(args.points, len(X)), replace=False)
            X, Y = X[keep], Y[keep]
            Xt, Yt = joint_pixels(test, j, None, rng, probes)
            for m in ORDER:
                model = RegressionForest(**shared, **METHODS[m], random_state=run)
                t1 = time.perf_counter()
                model.fit(X, Y)
                fit_s[m].append(time.perf_counter() - t1)
                mse[j][m].append(float(np.mean(np.sum((model.predict(Xt) - Yt) ** 2, axis=1))))
            print(f"run {run} {j:<14} " + "  ".join(f"{m} {mse[j][m][-1]:8.1f}" for m in ORDER), flush=True)
    print(f"\nmean squared offset error, pixels^2 (mean +- std over {args.runs} runs); paper's ordering, largest "
          "first: " + " > ".join(ORDER))
    print(f"{'joint':<14}" + "".join(f"{m:>20}" for m in ORDER) + "  paper's order")
    results = {}
    for j in joints:
        means = {m: float(np.mean(mse[j][m])) for m in ORDER}
        same = all(means[a] > means[b] for a, b in itertools.pairwise(ORDER))
        print(f"{j:<14}" + "".join(f"{means[m]:11.1f} +- {np.std(mse[j][m]):5.1f}" for m in ORDER)
              + f"  {'yes' if same else 'no'}")
        results[j] = {m: {"mse_mean": means[m], "mse_std": float(np.std(mse[j][m]))} for m in ORDER}
    print("fit s per forest: " + ", ".join(f"{m} {np.mean(fit_s[m]):.2f}" for m in ORDER))
    if args.png:
        plot(results, args.png)
    if args.json:
        write_results(args.json, args, results)


if __name__ == "__main__":
    main()
