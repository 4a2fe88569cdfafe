"""Test error against tree depth for alternating and independently grown forests: Fig. 3(b) of Schulter et al.,
"Alternating decision forests" (CVPR 2013).

    python benchmarks/variants/adf_depth.py [--sets letter,usps] [--depths 2,4,6,8,10,12,15,20,25] [--runs 2]
        [--png OUT.png] [--json OUT.json]

Settings as `adf.py` (T = 100, sqrt(M) candidates, 10 thresholds, at least 5 points to split, tangent loss); one
forest per depth limit, since the alternating forest grown to depth d is the one the paper evaluates at d.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks._figures import pyplot, save_png
from benchmarks._measure import write_results
from benchmarks.variants.adf import splits
from imageforest import ClassificationForest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default="letter,usps")
    ap.add_argument("--depths", default="2,4,6,8,10,12,15,20,25")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--trees", type=int, default=100)
    ap.add_argument("--loss", default="tangent")
    ap.add_argument("--png", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    depths = [int(d) for d in args.depths.split(",")]
    results = {}
    for name in args.sets.split(","):
        curves = {"independent": np.zeros((args.runs, len(depths))), "alternating": np.zeros((args.runs, len(depths)))}
        for run, (X, y, Xt, yt) in enumerate(splits(name, args.runs)):
            for k, depth in enumerate(depths):
                for growth in curves:
                    model = ClassificationForest(args.trees, max_depth=depth, n_candidates="sqrt", n_thresholds=10,
                                                 min_samples_split=5, growth=growth, loss=args.loss,
                                                 random_state=run).fit(X, y)
                    curves[growth][run, k] = 100.0 * float(np.mean(model.predict(Xt) != yt))
            print(f"{name} run {run}: " + "  ".join(
                f"d{d} {curves['independent'][run, k]:.2f}/{curves['alternating'][run, k]:.2f}"
                for k, d in enumerate(depths)), flush=True)
        results[name] = {g: {"mean": c.mean(axis=0).tolist(), "std": c.std(axis=0).tolist()}
                         for g, c in curves.items()}
        results[name]["depths"] = depths
    if args.png:
        figure(results, args.png, args.loss)
    if args.json:
        write_results(args.json, args, results)


def figure(results: dict, path: Path, loss: str) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, len(results), figsize=(5.0 * len(results), 3.8), squeeze=False)
    for ax, (name, res) in zip(axes[0], results.items(), strict=True):
        d = np.array(res["depths"])
        for growth, colour, label in (("independent", "#1b7837", "independent trees"),
                                      ("alternating", "#2166ac", f"ADF, {loss} loss")):
            m, s = np.array(res[growth]["mean"]), np.array(res[growth]["std"])
            ax.plot(d, m, "o-", color=colour, label=label)
            ax.fill_between(d, m - s, m + s, color=colour, alpha=0.15)
        ax.set_yscale("log")
        ax.set_xlabel("maximum tree depth")
        ax.set_ylabel("test error % (log scale)")
        ax.set_title(name)
        ax.legend(fontsize=8)
    save_png(fig, path)


if __name__ == "__main__":
    main()
