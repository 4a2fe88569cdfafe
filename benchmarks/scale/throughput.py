"""Batch localization throughput: a plain in-process loop against a local Dask cluster of 1 and 2 workers.

    python benchmarks/scale/throughput.py ../shared/data/openkbp-hn [--scans 200] [--rounds 1] [--json OUT.json]

Every configuration localizes the same scans with the default model into a fresh folder (`localize_many`, JSON
outputs). The plain loop is `client=None`: what `imageforest localize SCANS -o OUT` does. A cluster's start-up
(worker processes) is timed apart from the batch; the batch includes each worker's model load. Dask's overhead per
scan is the batch time of 1 worker minus the plain loop's, on the same thread count, over the scans (numba, BLAS
and ITK threads all follow the configuration's count, in the plain loop as in a worker). Peak memory is the
resident total of this process and its workers.

Each configuration runs in a new Python process (a configuration must not inherit the threads, caches and heap of
the ones before it), and with `--rounds R` the whole list runs R times, in reverse order every other round; the
table gives each configuration's median over the rounds, and the ratios are of those medians.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np

from benchmarks.scale._common import TreeMemory, archive_scans
from imageforest.apps.localize.batch import localize_many


def run(scans: list[Path], workers: int | None, threads: int) -> dict:
    from imageforest.cluster import connect, disconnect

    with tempfile.TemporaryDirectory() as out, TreeMemory() as memory:
        client, startup = None, 0.0
        if workers:
            t0 = time.perf_counter()
            client = connect(workers, threads=threads, preload=("imageforest.apps.localize.api",))
            client.wait_for_workers(workers)
            startup = time.perf_counter() - t0
        try:
            t0 = time.perf_counter()
            report = localize_many(scans, out, client, threads=threads)
            wall = time.perf_counter() - t0
        finally:
            if client is not None:
                disconnect(client)
    per_scan = [e["timing_s"]["total"] for e in report["entries"] if e["status"] == "ok"]
    return {"workers": workers or 0, "threads": threads, "startup_s": round(startup, 2), "batch_s": round(wall, 2),
            "scans_per_s": round(len(scans) / wall, 3), "ok": report["ok"], "failed": report["failed"],
            "median_scan_s": round(sorted(per_scan)[len(per_scan) // 2], 3), "peak_mib": round(memory.peak / 2**20)}


def configurations(cores: int) -> list[tuple[str, int | None, int]]:
    """(name, workers, numba threads) of every configuration, in table order."""
    return [("plain loop", None, cores), ("--workers 1", 1, cores), ("plain loop", None, 1), ("--workers 1", 1, 1),
            ("--workers 2", 2, 1)]


def run_isolated(data: Path, n_scans: int, index: int) -> dict:
    """Configuration `index` of `configurations` in a new Python process; its row."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "row.json"
        # BLAS and ITK (reading, resampling) get the configuration's thread count too, as local workers do
        # (`cluster.connect`): a 1-thread plain loop would otherwise resample on every core.
        threads = str(configurations(os.cpu_count() or 1)[index][2])
        env = {**os.environ, **{name: threads for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                                            "ITK_GLOBAL_DEFAULT_NUMBER_OF_THREADS")}}
        subprocess.run([sys.executable, __file__, str(data), "--scans", str(n_scans), "--only", str(index),
                        "--json", str(out)], check=True, stdout=subprocess.DEVNULL, env=env)
        return json.loads(out.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", type=Path)
    ap.add_argument("--scans", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=1, help="times the whole list runs (medians are reported)")
    ap.add_argument("--only", type=int, default=None, help=argparse.SUPPRESS)  # one configuration, this process
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    scans = archive_scans(args.data, args.scans)
    cores = os.cpu_count() or 1
    configs = configurations(cores)
    if args.only is not None:
        name, workers, threads = configs[args.only]
        row = {**run(scans, workers, threads), "name": name}
        args.json.write_text(json.dumps(row))
        return
    print(f"{len(scans)} scans of {args.data}, default model, {cores} cores, {args.rounds} round(s), each "
          "configuration in a new process")
    runs: dict[int, list[dict]] = {k: [] for k in range(len(configs))}
    for r in range(args.rounds):
        for k in (range(len(configs)) if r % 2 == 0 else reversed(range(len(configs)))):
            runs[k].append(run_isolated(args.data, args.scans, k))
    print(f"{'configuration':<14} {'threads':>7} {'start s':>8} {'batch s':>8} {'scans/s':>8} {'median s':>9} "
          f"{'peak MiB':>9}   batch s of each round")
    rows = []
    for k, (name, workers, threads) in enumerate(configs):
        done = runs[k]
        row = {key: float(np.median([d[key] for d in done])) for key in
               ("startup_s", "batch_s", "scans_per_s", "median_scan_s", "peak_mib")}
        row.update(name=name, workers=workers or 0, threads=threads, rounds=[d["batch_s"] for d in done])
        rows.append(row)
        print(f"{name:<14} {threads:>7} {row['startup_s']:8.2f} {row['batch_s']:8.2f} {row['scans_per_s']:8.3f} "
              f"{row['median_scan_s']:9.3f} {row['peak_mib']:9.0f}   "
              + " ".join(f"{b:.1f}" for b in row["rounds"]), flush=True)
    by = {(r["workers"], r["threads"]): r for r in rows}
    for threads in sorted({cores, 1}, reverse=True):
        plain, one = by[(0, threads)], by[(1, threads)]
        print(f"Dask overhead at 1 worker ({threads} thread{'s' if threads > 1 else ''}): "
              f"{(one['batch_s'] - plain['batch_s']) / len(scans) * 1000:+.1f} ms per scan, "
              f"{100 * (one['batch_s'] / plain['batch_s'] - 1):+.1f}% of the plain loop's time")
    two = by[(2, 1)]["scans_per_s"]
    print(f"2 workers (1 thread each) against 1 worker on 1 thread: {two / by[(1, 1)]['scans_per_s']:.2f}x"
          f"; on {cores} threads: {two / by[(1, cores)]['scans_per_s']:.2f}x; against the plain loop "
          f"on {cores} threads: {two / by[(0, cores)]['scans_per_s']:.2f}x")
    if args.json:
        args.json.write_text(json.dumps({"scans": len(scans), "rounds": args.rounds, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
