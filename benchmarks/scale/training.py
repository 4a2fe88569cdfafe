"""Training the localizer here, on a local Dask cluster of 1 worker and of 2: wall time and model bytes.

    python benchmarks/scale/training.py ../shared/data/openkbp-hn [--cases N]

The default recipe on the first N cases (default: all). `--workers N` grows the first stage's forest and every
fine- and slice-stage forest as Dask tasks; data preparation (reading, resampling, sampling voxels) stays in the
calling process, whose random stream fixes the model. Also printed: each job's time in the plain run, which bounds
what more workers can give (the first stage's forest is one job).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.scale._common import TreeMemory
from imageforest.apps.localize.recipe import PARAMETERS
from imageforest.apps.localize.training import train_localizer
from imageforest.imaging.ct_organs import openkbp_cases


def timed_jobs(times: list):
    def run(jobs: list) -> list:
        out = []
        for k, (function, args) in enumerate(jobs):
            jobs[k] = None
            t0 = time.perf_counter()
            out.append(function(*args))
            times.append((function.__name__, time.perf_counter() - t0))
        return out

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", type=Path)
    ap.add_argument("--cases", type=int, default=None)
    args = ap.parse_args()
    from imageforest.cluster import connect, dask_jobs, disconnect, local_threads

    cases, names = openkbp_cases(args.data)
    cases = cases[: args.cases] if args.cases else cases
    cores = os.cpu_count() or 1
    print(f"training on {len(cases)} cases of {args.data}, default recipe, {cores} cores")
    rows = []
    for label, workers in (("here", None), ("--workers 1", 1), ("--workers 2", 2)):
        client, times = None, []
        params = dict(PARAMETERS)
        with TreeMemory() as memory:
            if workers:
                client = connect(workers)
                client.wait_for_workers(workers)
                params["n_jobs"] = local_threads(workers)
            t0 = time.perf_counter()
            try:
                model = train_localizer(cases, names, run_jobs=dask_jobs(client) if client else timed_jobs(times),
                                        **params)
            finally:
                if client is not None:
                    disconnect(client)
            wall = time.perf_counter() - t0
        path = Path(f"/tmp/scale_training_{workers or 0}.npz")
        model.save(path)
        digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
        path.unlink()
        rows.append((label, wall, digest, memory.peak))
        print(f"{label:<12} {wall:8.1f} s  peak {memory.peak / 2**20:8.0f} MiB  model sha256 {digest}", flush=True)
        if times:
            trees = [t for name, t in times if name == "_grow_first_stage_tree"]
            others = [t for name, t in times if name != "_grow_first_stage_tree"]
            print(f"  jobs: first stage {len(trees)} trees {sum(trees):.1f} s (longest {max(trees):.1f} s), "
                  f"{len(others)} fine/slice forests {sum(others):.1f} s (longest {max(others):.1f} s); data "
                  f"preparation and the rest {wall - sum(trees) - sum(others):.1f} s")
    print(f"identical model bytes: {len({r[2] for r in rows}) == 1}; 2 workers against 1: "
          f"{rows[1][1] / rows[2][1]:.2f}x; against here: {rows[0][1] / rows[2][1]:.2f}x")


if __name__ == "__main__":
    main()
