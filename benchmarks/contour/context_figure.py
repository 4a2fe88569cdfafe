"""Which context a contour forest learns: the share of its splits' information gain read from the CT and from each
organ's context map (the box atlas, or an entangled stage's posteriors), per stage, and how far from the voxel the
context tests look.

    python benchmarks/contour/context_figure.py [MODEL.npz ...] [--png apps/contour/docs/context.png]

Default model: the shipped one. Montillo et al. (IPMI 2011) drew the same analysis for their entangled forest.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from imageforest.apps.contour.api import DEFAULT_MODEL
from imageforest.apps.contour.model import OrganContourer


def image_channel_names(model: OrganContourer) -> list[str]:
    """The names of the channels the model's image tests read: the CT, then its windows."""
    return ["CT", *(f"CT {lo:g}..{hi:g} HU" for lo, hi in model.windows())]


def context_gain(model: OrganContourer) -> tuple[np.ndarray, list[np.ndarray]]:
    """(n_stages, n_image_channels + n_organs) share of each stage's summed split gain (gain x node weight) by the
    channel its first box reads (the CT and its windows, then each organ's context), and per stage the distance (mm)
    of the context tests' first box from the voxel."""
    forest = model.forest_
    split = forest.child >= 0
    stage = np.searchsorted(model.stage_trees_, forest.node_tree(), side="right") - 1
    channel = forest.params[:, 0].astype(np.int64)
    gain = forest.gain * forest.weight
    n_image = model.n_image_channels
    share = np.zeros((model.stage_trees_.size - 1, n_image + len(model.organs)))
    np.add.at(share, (stage[split], channel[split]), gain[split])
    share /= np.maximum(share.sum(axis=1, keepdims=True), 1e-12)
    reach = np.linalg.norm(forest.params[:, 1:4], axis=1)
    distances = [reach[split & (stage == k) & (channel >= n_image)] for k in range(share.shape[0])]
    return share, distances


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", type=Path)
    ap.add_argument("--png", type=Path, default=Path("apps/contour/docs/context.png"))
    args = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = args.models or [DEFAULT_MODEL]
    models = [OrganContourer.load(p) for p in paths]
    organs = models[0].organs
    image_names = list(dict.fromkeys(n for m in models for n in image_channel_names(m)))  # every model's, in order
    names = [*image_names, *(f"{o} map" for o in organs)]
    rows = []  # (label, share row over `names`, context distances)
    for path, model in zip(paths, models, strict=True):
        own, distances = context_gain(model)
        columns = [names.index(n) for n in image_channel_names(model)] + \
            [len(image_names) + k for k in range(len(organs))]
        share = np.zeros((own.shape[0], len(names)))
        share[:, columns] = own
        kind = "atlas" if model.prior_maps else "posteriors"
        for k in range(share.shape[0]):
            reads = "atlas" if k == 0 and model.prior_maps else "posteriors" if k else "nothing"
            label = f"{path.stem}: stage {k + 1} (context: {reads})" if share.shape[0] > 1 else \
                f"{path.stem} (context: {kind})"
            rows.append((label, share[k], distances[k]))
            print(f"{label}: " + ", ".join(f"{n} {v:.2f}" for n, v in zip(names, share[k], strict=True))
                + (f"; context tests' median reach {np.median(distances[k]):.0f} mm" if distances[k].size else ""))
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 0.7 * len(rows) + 2.2),
                                      gridspec_kw={"width_ratios": [3, 2]})
    colours = [*(str(g) for g in np.linspace(0.35, 0.8, len(image_names))), *plt.get_cmap("tab10").colors[:len(organs)]]
    y = np.arange(len(rows))[::-1]
    for (_label, share, _), yy in zip(rows, y, strict=True):
        start = 0.0
        for c, value in enumerate(share):
            left.barh(yy, value, left=start, color=colours[c], label=names[c] if yy == y[0] else None)
            start += value
    left.set_yticks(y, [r[0] for r in rows], fontsize=8)
    left.set_xlim(0, 1)
    left.set_xlabel("share of the splits' information gain, by the map the test reads")
    left.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.18))
    bins = np.linspace(0, 105, 22)
    for (label, _, dist), c in zip(rows, plt.get_cmap("Dark2").colors, strict=False):
        if dist.size:
            right.hist(dist, bins=bins, histtype="step", color=c, lw=1.6, density=True, label=label)
    right.set_xlabel("distance of a context test's box from the voxel (mm)")
    right.set_ylabel("density")
    right.legend(fontsize=7)
    fig.suptitle("What the contour forests read", fontsize=11)
    fig.tight_layout()
    args.png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.png, dpi=110)
    print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
