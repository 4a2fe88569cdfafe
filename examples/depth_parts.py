"""Depth-probe forests on depth data nobody on this project made (Criminisi et al. 2012, sec. 3.6, Shotton et al.).

1. hand-depth-parts: 4-part labelling (forearm, palm, fingers, thumb) of rendered hand depth maps. Trains on the
   first images, reports per-class pixel accuracy on images held out from training, and draws predicted parts beside
   the truth.
2. kinect-depth-patches: real Kinect patches (face, left hand, right hand; the file's "other" array only repeats
   those patches, so it is left out); classifies each patch centre from depth probes, against scikit-learn's
   ExtraTrees on the raw 30 x 30 pixels, in the same run.

    python examples/depth_parts.py [--data ../shared/data] [--out depth_parts_out]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from imageforest.imaging import DepthProbes, ImageClassificationForest, read_image

HAND_COLOURS = {(255, 0, 0): 1, (0, 0, 255): 2, (0, 255, 0): 3, (124, 30, 255): 4}
HAND_PARTS = ["forearm", "palm", "fingers", "thumb"]
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def load_hand(depth_path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Depth map (y, x) uint16 and part labels (0 background, 1-4) from the RGBA label PNG."""
    depth = read_image(depth_path).array
    rgba = read_image(depth_path.with_name(depth_path.name.replace("_depth", "_labels"))).array
    labels = np.zeros(depth.shape, dtype=np.int64)
    for colour, part in HAND_COLOURS.items():
        labels[np.all(rgba[..., :3] == colour, axis=-1) & (rgba[..., 3] == 255)] = part
    return depth, labels


def hand_parts(data: Path, out: Path, n_train: int, per_image: int) -> dict:
    files = sorted((data / "hand-depth-parts" / "train").glob("*_depth.png"))
    train_files, test_files = files[:n_train], files[-96:]  # the last 96 never seen in training
    rng = np.random.default_rng(0)
    images, pts, labels = [], [], []
    for k, f in enumerate(train_files):
        depth, lab = load_hand(f)
        yy, xx = np.nonzero(lab > 0)
        sel = rng.choice(yy.size, min(per_image, yy.size), replace=False)
        images.append(depth)
        pts.append(np.c_[np.full(sel.size, k), yy[sel], xx[sel]])
        labels.append(lab[yy[sel], xx[sel]])
    pts, labels = np.concatenate(pts), np.concatenate(labels)
    forest = ImageClassificationForest(DepthProbes(max_offset=60 * 13_000.0), n_trees=3, max_depth=20,
                                       n_candidates=200, random_state=0)
    t0 = time.perf_counter()
    forest.fit(images, pts, labels)
    fit_s = time.perf_counter() - t0

    confusion = np.zeros((5, 5), dtype=np.int64)
    times, shown = [], []
    for f in test_files:
        depth, lab = load_hand(f)
        t0 = time.perf_counter()
        pred = forest.classes_[forest.predict_image(depth, mask=lab > 0).array]
        times.append(time.perf_counter() - t0)
        fg = lab > 0
        np.add.at(confusion, (lab[fg], pred[fg]), 1)
        if len(shown) < 4:
            shown.append((depth, lab, np.where(fg, pred, 0)))
    per_class = confusion.diagonal()[1:] / np.maximum(confusion[1:].sum(axis=1), 1)
    overall = confusion.diagonal()[1:].sum() / confusion[1:].sum()
    print(f"hand-depth-parts: {len(train_files)} training images ({len(pts)} pixels), {len(test_files)} held out")
    print(f"  fit {fit_s:.1f} s, T=3, max_depth=20, rho=200; predict {np.median(times) * 1e3:.1f} ms per 240x424 map")
    print("  per-class pixel accuracy: " + ", ".join(f"{n} {a:.3f}" for n, a in zip(HAND_PARTS, per_class,
                                                                                     strict=True))
          + f"; overall {overall:.3f}")
    _draw_hands(shown, out / "hand_parts.png")
    return {"per_class": dict(zip(HAND_PARTS, per_class.tolist(), strict=True)), "overall": float(overall)}


def _draw_hands(shown, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    palette = np.array([[0, 0, 0], [230, 60, 60], [60, 90, 230], [60, 200, 80], [150, 60, 240]], dtype=np.uint8)
    fig, axes = plt.subplots(len(shown), 3, figsize=(9, 2.0 * len(shown)), squeeze=False)
    for row, (depth, lab, pred) in zip(axes, shown, strict=True):
        d = depth.astype(float)
        d[d == 0] = np.nan
        row[0].imshow(d, cmap="gray")
        row[1].imshow(palette[lab])
        row[2].imshow(palette[pred])
        for ax, title in zip(row, ["depth (held out)", "truth", "imageforest"], strict=True):
            ax.set_title(title, fontsize=8)
            ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def kinect_patches(data: Path) -> dict:
    import scipy.io
    from sklearn.ensemble import ExtraTreesClassifier

    mat = scipy.io.loadmat(data / "kinect-depth-patches" / "bodyPart_DepthImgs.mat")
    # The file's "other" array holds no other body parts: it is the 763 labelled patches below, each five times
    # (checked byte for byte), so it would only teach that every patch is also "other". It is left out.
    names = ["face", "l_hand", "r_hand"]
    patches, labels = [], []
    dropped = 0
    for k, name in enumerate(names):
        items = mat[name]
        if items.dtype == object:  # a cell array: a few patches are cut (0 x 0, 28 x 30); keep the 30 x 30 ones
            cells = [items[i, 0] for i in range(items.shape[0])]
            dropped += sum(c.shape != (30, 30) for c in cells)
            arr = np.stack([c for c in cells if c.shape == (30, 30)])
        else:
            arr = items
        patches.append(arr.astype(np.uint16))
        labels.append(np.full(arr.shape[0], k))
    patches, labels = np.concatenate(patches), np.concatenate(labels)
    rng = np.random.default_rng(0)
    test = rng.random(labels.size) < 0.3
    train_p, test_p = list(patches[~test]), list(patches[test])

    def centres(n: int) -> np.ndarray:  # the centre pixel of each of n patches: (image, y, x)
        return np.c_[np.arange(n), np.full(n, 15), np.full(n, 15)]

    forest = ImageClassificationForest(DepthProbes(max_offset=15 * 120.0, background=1000.0), n_trees=50,
                                       max_depth=None, n_candidates=100, class_weight="balanced", random_state=0)
    forest.fit(train_p, centres(len(train_p)), labels[~test])
    pred = forest.predict(test_p, centres(len(test_p)))
    peer = ExtraTreesClassifier(n_estimators=50, class_weight="balanced", random_state=0, n_jobs=2)
    peer.fit(patches[~test].reshape(-1, 900), labels[~test])
    peer_pred = peer.predict(patches[test].reshape(-1, 900))

    def per_class(p):
        return [float(np.mean(p[labels[test] == k] == k)) for k in range(len(names))]

    ours, theirs = per_class(pred), per_class(peer_pred)
    print(f"kinect-depth-patches: {int((~test).sum())} training / {int(test.sum())} held-out patch centres "
          f"({dropped} patches not 30 x 30 left out)")
    print("  per-class accuracy, depth probes (T=50):   " + ", ".join(f"{n} {a:.3f}" for n, a in
                                                                        zip(names, ours, strict=True))
          + f"; balanced {np.mean(ours):.3f}")
    print("  per-class accuracy, ExtraTrees on 900 px: " + ", ".join(f"{n} {a:.3f}" for n, a in
                                                                        zip(names, theirs, strict=True))
          + f"; balanced {np.mean(theirs):.3f}")
    return {"ours": dict(zip(names, ours, strict=True)), "extra_trees_raw": dict(zip(names, theirs, strict=True))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--out", type=Path, default=Path("depth_parts_out"))
    parser.add_argument("--train-images", type=int, default=256)
    parser.add_argument("--pixels-per-image", type=int, default=1500)
    args = parser.parse_args()
    if not (args.data / "hand-depth-parts").is_dir():
        raise SystemExit(f"shared data not found under {args.data}")
    args.out.mkdir(parents=True, exist_ok=True)
    hand_parts(args.data, args.out, args.train_images, args.pixels_per_image)
    kinect_patches(args.data)
    print(f"picture: {args.out / 'hand_parts.png'}")


if __name__ == "__main__":
    main()
