"""Online forests on a stream: `partial_fit` in chunks of 1,000 points against a batch forest of the same size fitted
on the same points so far, and scikit-learn's `SGDClassifier.partial_fit`, on Letter and MNIST.

    python benchmarks/variants/online.py [--sets letter,mnist] [--trees 50,20] [--alpha A] [--memory M] [--chunk 1000]
        [--checkpoints 1000,2000,4000,8000,16000,32000,60000] [--png OUT.png] [--json OUT.json]

The training set streams in its published order. After every chunk the online forest and SGD (inputs scaled to
[0, 1]) are scored on the test set; the batch forest (same T, rho and leaf size, grown by `fit`) is refitted at the
checkpoints only. Time per 1,000 points is the `partial_fit` call (the update), and apart from it the first read of
the forest after it (the export, which completes the leaves); peak memory is the resident-set growth over the whole
stream.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks._figures import pyplot, save_png
from benchmarks._measure import measure, mib, rss_bytes, write_results
from imageforest import ClassificationForest

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "ml-benchmarks"


def load(name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
    """Train and test arrays (float32) and the inputs' largest value (for SGD's scaling)."""
    d = np.load(DATA / f"{name}.npz")
    scale = 255.0 if name == "mnist" else 15.0
    return (d["X_train"].astype(np.float32), d["y_train"], d["X_test"].astype(np.float32), d["y_test"], scale)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default="letter,mnist")
    ap.add_argument("--trees", default="50,20", help="T per set, in the order of --sets")
    ap.add_argument("--alpha", type=int, help="online_min_samples (default: the estimator's)")
    ap.add_argument("--memory", type=int, help="online_memory (default: the estimator's)")
    ap.add_argument("--chunk", type=int, default=1000)
    ap.add_argument("--checkpoints", default="1000,2000,4000,8000,16000,32000,60000")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--png", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    from sklearn.linear_model import SGDClassifier

    checkpoints = {int(c) for c in args.checkpoints.split(",")}
    results = {}
    for name, trees in zip(args.sets.split(","), [int(t) for t in args.trees.split(",")], strict=True):
        X, y, Xt, yt, scale = load(name)
        classes = np.unique(y)
        online = ClassificationForest(trees, random_state=args.seed, n_jobs=2)
        if args.alpha is not None:
            online.set_params(online_min_samples=args.alpha)
        if args.memory is not None:
            online.set_params(online_memory=args.memory)
        alpha, memory = online.online_min_samples, online.online_memory
        ClassificationForest(2, random_state=0).partial_fit(X[:200], y[:200], classes=classes).predict(X[:5])  # compile
        sgd = SGDClassifier(random_state=args.seed)
        rows = []
        start_rss = rss_bytes()
        peak = 0
        for a in range(0, X.shape[0], args.chunk):
            b = min(a + args.chunk, X.shape[0])
            X_c, y_c = X[a:b], y[a:b]
            _, sec, _ = measure(lambda m=online, u=X_c, v=y_c, c=classes: m.partial_fit(u, v, classes=c))
            _, export_s, _ = measure(lambda m=online: m.forest_)  # the trees are exported when first read
            peak = max(peak, rss_bytes() - start_rss)
            sgd.partial_fit(X[a:b] / scale, y[a:b], classes=classes)
            row = {"points": b, "online_error": 100 * (1 - online.score(Xt, yt)),
                   "sgd_error": 100 * (1 - sgd.score(Xt / scale, yt)),
                   "update_s_per_1000": sec * 1000 / (b - a), "export_s": export_s,
                   "online_s_per_1000": (sec + export_s) * 1000 / (b - a)}
            if b in checkpoints or b == X.shape[0]:
                batch = ClassificationForest(trees, random_state=args.seed, n_jobs=2)
                _, fit_s, _ = measure(lambda b=b, m=batch, X=X, y=y: m.fit(X[:b], y[:b]))
                row["batch_error"] = 100 * (1 - batch.score(Xt, yt))
                row["batch_fit_s"] = fit_s
                print(f"{name} {b:6d} points: online {row['online_error']:6.2f}%  batch {row['batch_error']:6.2f}%  "
                      f"SGD {row['sgd_error']:6.2f}%  online {row['update_s_per_1000']:.3f} s per 1000 + export "
                      f"{row['export_s']:.3f} s, "
                      f"batch fit {fit_s:.2f} s", flush=True)
            rows.append(row)
        last = rows[-1]
        print(f"{name}: T = {trees}, alpha = {alpha}, memory = {memory}: after the stream online "
              f"{last['online_error']:.2f}% vs "
              f"batch {last['batch_error']:.2f}% (gap {last['online_error'] - last['batch_error']:+.2f} points), "
              f"SGD {last['sgd_error']:.2f}%; mean update {np.mean([r['update_s_per_1000'] for r in rows]):.3f} s "
              f"per 1000 points, export {np.mean([r['export_s'] for r in rows]):.3f} s; peak memory "
              f"{mib(peak).strip()} MiB; {online.forest_.n_nodes} nodes")
        results[name] = {"trees": trees, "alpha": alpha, "memory": memory, "rows": rows, "peak_mib": peak / 2**20}
    if args.png:
        figure(results, args.png)
    if args.json:
        write_results(args.json, args, results)


def figure(results: dict, path: Path) -> None:
    """Test error against points seen, one panel per data set."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(results), figsize=(5.5 * len(results), 4.0), squeeze=False)
    for ax, (name, res) in zip(axes[0], results.items(), strict=True):
        rows = res["rows"]
        n = [r["points"] for r in rows]
        ax.plot(n, [r["online_error"] for r in rows], "-", color="#2166ac", label="online forest (partial_fit)")
        batch = [(r["points"], r["batch_error"]) for r in rows if "batch_error" in r]
        ax.plot(*zip(*batch, strict=True), "o--", color="#1b7837", label="batch forest, same points")
        ax.plot(n, [r["sgd_error"] for r in rows], "-", color="#777777", label="SGDClassifier.partial_fit")
        ax.set_xscale("log")
        ax.set_xlabel("training points seen")
        ax.set_ylabel("test error %")
        ax.set_title(f"{name}: T = {res['trees']}")
        ax.legend(fontsize=8)
    save_png(fig, path)


if __name__ == "__main__":
    _t0 = time.perf_counter()
    main()
    print(f"total {time.perf_counter() - _t0:.0f} s")
