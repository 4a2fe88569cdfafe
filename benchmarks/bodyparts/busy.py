"""Frame time of the shipped body model on a busy machine: the default threads against one thread.

    python benchmarks/bodyparts/busy.py [--busy] [--rounds 4] [--frames 9]

With --busy a busy loop runs on one core for the whole measurement (as another program would on a shared 2-core
machine). Each round times `--frames` frames of a 640 x 480 render with the default threads, then with one thread;
the medians of each round are printed. The default must never be slower than one thread.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--busy", action="store_true", help="keep one core busy while measuring")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--frames", type=int, default=9)
    args = ap.parse_args()
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.busy else None
    try:
        from imageforest.apps.bodyparts import load_body_model
        from imageforest.apps.bodyparts.renderer import render

        model = load_body_model()
        depth = render(np.random.default_rng([5, 0]), 640, 480)[0].astype(np.float32)
        medians: dict[str, list[float]] = {"default threads": [], "one thread": []}
        for _ in range(args.rounds):
            for name, threads in (("default threads", None), ("one thread", 1)):
                model.n_jobs = threads
                model.parse(depth)
                times = []
                for _ in range(args.frames):
                    t0 = time.perf_counter()
                    model.parse(depth)
                    times.append(time.perf_counter() - t0)
                medians[name].append(1000.0 * float(np.median(times)))
        print(f"{'busy' if busy else 'idle'} machine, OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')} "
              "(imageforest sets PASSIVE unless it is set)")
        for name, values in medians.items():
            print(f"  {name:16s} ms per frame, each round's median: {' '.join(f'{v:6.1f}' for v in values)}")
    finally:
        if busy is not None:
            busy.kill()


if __name__ == "__main__":
    main()
