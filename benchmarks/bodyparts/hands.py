"""Hand parts on depth data we did not render (hand-depth-parts), beside scikit-learn and a small U-Net.

    python benchmarks/bodyparts/hands.py [../shared/data/hand-depth-parts] [--train-images 416] [--pixels 3000]
        [--candidates 500] [--depth 22] [--trees 6] [--tree-share 0.5] [--thresholds range] [--unet-minutes 15]
        [--no-unet] [--model-out M]

The last 96 of the 512 maps are never trained on; every method trains on the first `--train-images`. Scores: mean
per-part pixel accuracy over the 4 parts (forearm, palm, fingers, thumb) and overall pixel accuracy on the hand's
pixels, and milliseconds per 240 x 424 map. In the same process on the same maps:

- imageforest: `train_bodyparts` (depth probes, balanced parts) and `BodyPartsForest.parse`;
- scikit-learn's RandomForestClassifier (same trees and depth, balanced) on 200 fixed depth-probe pairs computed up
  front at the same training pixels;
- a U-Net of about 1 M parameters (PyTorch, CPU, both cores) trained for `--unet-minutes` on the whole training
  maps (depth normalised per map, class-balanced cross-entropy over the hand's pixels); skipped when PyTorch is
  not installed (`pip install torch`; a benchmark-only dependency).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks._measure import measure, mib
from benchmarks.bodyparts.common import Confusion, probe_forest_peer
from imageforest.apps.bodyparts import open_dataset, train_bodyparts
from imageforest.apps.bodyparts.model import THRESHOLD_SAMPLINGS

DEFAULT = Path(__file__).resolve().parents[3] / "shared" / "data" / "hand-depth-parts"
N_TEST = 96


def report(name: str, conf: Confusion, ms: float, extra: str = "") -> dict:
    per = conf.per_part()
    print(f"{name:<34} mean per-part {conf.mean_per_part():.3f}  pixel {conf.pixel():.3f}  "
          f"({', '.join(f'{a:.2f}' for a in per)})  {ms:6.1f} ms/map {extra}")
    return {"mean_per_part": conf.mean_per_part(), "pixel": conf.pixel(), "per_part": per.tolist(), "ms": ms}


def unet_peer(data, train, test, minutes: float) -> tuple[Confusion, float] | None:
    try:
        import torch
        from torch import nn
    except ImportError:
        print("U-Net: PyTorch is not installed (pip install torch); skipped")
        return None
    torch.manual_seed(0)
    torch.set_num_threads(2)

    def block(i, o):
        return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(inplace=True),
                             nn.Conv2d(o, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(inplace=True))

    class UNet(nn.Module):
        def __init__(self, w=24, k=5):
            super().__init__()
            self.e1, self.e2, self.e3, self.e4 = block(1, w), block(w, 2 * w), block(2 * w, 4 * w), block(4 * w, 8 * w)
            self.pool = nn.MaxPool2d(2)
            self.u3, self.d3 = nn.ConvTranspose2d(8 * w, 4 * w, 2, 2), block(8 * w, 4 * w)
            self.u2, self.d2 = nn.ConvTranspose2d(4 * w, 2 * w, 2, 2), block(4 * w, 2 * w)
            self.u1, self.d1 = nn.ConvTranspose2d(2 * w, w, 2, 2), block(2 * w, w)
            self.out = nn.Conv2d(w, k, 1)

        def forward(self, x):
            e1 = self.e1(x)
            e2 = self.e2(self.pool(e1))
            e3 = self.e3(self.pool(e2))
            e4 = self.e4(self.pool(e3))
            d3 = self.d3(torch.cat([self.u3(e4), e3], 1))
            d2 = self.d2(torch.cat([self.u2(d3), e2], 1))
            d1 = self.d1(torch.cat([self.u1(d2), e1], 1))
            return self.out(d1)

    def tensor(depth):  # (240, 424) -> (1, 240, 424) normalised: 0 background, body depth centred per map
        body = depth > 0
        x = np.zeros(depth.shape, dtype=np.float32)
        x[body] = (depth[body] - depth[body].mean()) / 100.0 + 1.0
        return x[None]

    xs, ys = [], []
    for s in train:
        d, lab = data.load(s)
        xs.append(tensor(d))
        ys.append(lab.astype(np.int64))
    X, Y = torch.from_numpy(np.stack(xs)), torch.from_numpy(np.stack(ys))
    counts = np.bincount(Y.numpy().ravel(), minlength=5)[1:].astype(np.float64)
    weight = torch.tensor(np.r_[0.0, counts.sum() / (4 * np.maximum(counts, 1))], dtype=torch.float32)
    net = UNet()
    n_params = sum(p.numel() for p in net.parameters())
    opt = torch.optim.Adam(net.parameters(), lr=2e-3)
    loss_fn = nn.CrossEntropyLoss(weight=weight, ignore_index=0)
    pad = (0, 8, 0, 0)  # 424 -> 432 columns, divisible by 8
    t0 = time.perf_counter()
    epochs = 0
    rng = np.random.default_rng(0)
    while time.perf_counter() - t0 < 60 * minutes:
        net.train()
        for idx in np.array_split(rng.permutation(len(X)), max(1, len(X) // 8)):
            x = nn.functional.pad(X[idx], pad)
            y = nn.functional.pad(Y[idx], pad)
            opt.zero_grad()
            loss = loss_fn(net(x), y)
            loss.backward()
            opt.step()
            if time.perf_counter() - t0 > 60 * minutes:
                break
        epochs += 1
    print(f"U-Net: {n_params / 1e6:.2f} M parameters, {epochs} epochs in {time.perf_counter() - t0:.0f} s")
    net.eval()
    conf = Confusion(4)
    times = []
    with torch.no_grad():
        for s in test:
            d, lab = data.load(s)
            t1 = time.perf_counter()
            logits = net(nn.functional.pad(torch.from_numpy(tensor(d))[None], pad))[0, 1:, :, :424]
            pred = np.where(d > 0, logits.argmax(0).numpy() + 1, 0)
            times.append(time.perf_counter() - t1)
            conf.add(lab, pred)
    return conf, 1e3 * float(np.median(times))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", nargs="?", type=Path, default=DEFAULT)
    ap.add_argument("--train-images", type=int, default=416)
    ap.add_argument("--pixels", type=int, default=3000)
    ap.add_argument("--candidates", type=int, default=500)
    ap.add_argument("--depth", type=int, default=22)
    ap.add_argument("--trees", type=int, default=6)
    ap.add_argument("--tree-share", type=float, default=0.5, help="share of the pixels each tree grows on (1: all)")
    ap.add_argument("--reach", type=float, default=2.0, help="probe reach (m at the default focal length)")
    ap.add_argument("--thresholds", choices=THRESHOLD_SAMPLINGS, default="range",
                    help="how probe thresholds are drawn (the hands do better with range; bodies with data)")
    ap.add_argument("--unet-minutes", type=float, default=15.0)
    ap.add_argument("--no-unet", action="store_true")
    ap.add_argument("--no-sklearn", action="store_true")
    ap.add_argument("--model-out", type=Path, default=None)
    args = ap.parse_args()
    if not args.data.is_dir():
        sys.exit(f"{args.data}: no hand-depth-parts folder (see ../shared/data/README.md)")
    data = open_dataset(args.data)
    if len(data.samples) <= N_TEST:
        sys.exit(f"{args.data}: {len(data.samples)} maps; need more than {N_TEST}")
    n_train = min(args.train_images, len(data.samples) - N_TEST)
    train, test = data.samples[:n_train], data.samples[-N_TEST:]
    print(f"hand-depth-parts: train on {n_train} maps x {args.pixels} pixels, test on the last {N_TEST}")

    (model, _), fit_s, fit_mem = measure(lambda: train_bodyparts(
        args.data, n_trees=args.trees, max_depth=args.depth, n_images=n_train, pixels_per_image=args.pixels,
        n_candidates=args.candidates, reach_m=args.reach, class_weight="balanced", max_samples=args.tree_share,
        threshold_sampling=args.thresholds, random_state=0))
    if args.model_out is not None:
        model.save(args.model_out)
    conf, times = Confusion(4), []
    for s in test:
        d, lab = data.load(s)
        t0 = time.perf_counter()
        r = model.parse(d, joints=False)
        times.append(time.perf_counter() - t0)
        conf.add(lab, r.labels)
    share = f" share={args.tree_share:g}"
    report(f"imageforest T={args.trees} D={args.depth} rho={args.candidates}{share}", conf, 1e3 * np.median(times),
           f"fit {fit_s:.0f} s, peak MiB {mib(fit_mem)}")

    if not args.no_sklearn:
        conf, rf_s, rf_mem, rf_map_s = probe_forest_peer(data, train, data, test, args.pixels,
                                                         float(model.family_.max_offset), args.trees, args.depth)
        report("scikit-learn RF, 200 probe pairs", conf, 1e3 * rf_map_s, f"fit {rf_s:.0f} s, peak MiB {mib(rf_mem)}")
    if not args.no_unet:
        got = unet_peer(data, train, test, args.unet_minutes)
        if got is not None:
            report(f"U-Net ({args.unet_minutes:g} min CPU)", *got)


if __name__ == "__main__":
    main()
