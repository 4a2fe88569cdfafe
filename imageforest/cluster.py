"""Dask clusters for the batch and training commands: a local one of N worker processes, or an existing one by
address.

Dask is an optional dependency (``pip install 'imageforest[dask]'``); without it these commands say so in one line.
"""

from __future__ import annotations

import logging
import os
import time

from imageforest.exceptions import InvalidInputError


def _dask():
    try:
        from dask import distributed
    except ImportError:
        raise InvalidInputError("--workers and --scheduler need Dask: pip install 'imageforest[dask]'") from None
    return distributed


def local_threads(workers: int, threads: int | None = None) -> int:
    """Numba threads per worker of a local cluster: `threads`, or the cores shared out among the workers."""
    return int(threads) if threads else max(1, (os.cpu_count() or 1) // workers)


def connect(workers: int | None = None, scheduler: str | None = None, threads: int | None = None,
            preload: tuple[str, ...] = ()):
    """A `dask.distributed.Client`: on `scheduler` (an address such as tcp://host:8786), else on a new local
    cluster of `workers` processes with one task at a time each (a task's forest runs on `local_threads`), which
    import the modules `preload` names as they start.

    Raises InvalidInputError when Dask is missing or the scheduler cannot be reached."""
    distributed = _dask()
    if scheduler is not None:
        try:
            return distributed.Client(scheduler, timeout="20s")
        except (OSError, TimeoutError) as exc:
            raise InvalidInputError(f"--scheduler {scheduler}: cannot connect ({exc})") from None
    if not workers or workers < 1:
        raise InvalidInputError(f"give at least one worker, got {workers}")
    # Dask starts workers with MALLOC_TRIM_THRESHOLD_=65536, which hands every freed large block back to the
    # system at once (a scan's many short-lived volume-sized arrays then page-fault afresh), and with one BLAS /
    # OpenMP thread. Measured against the plain loop: 21% slower per scan with both, 7% with glibc's threshold
    # back, within 1% without either. Workers get glibc's adaptive threshold, and as many BLAS and ITK (reading,
    # resampling) threads as numba threads, so that N workers do not ask for N times the cores.
    import dask

    per_worker = str(local_threads(int(workers), threads))
    environ = dict(dask.config.get("distributed.nanny.pre-spawn-environ", {}))
    environ.pop("MALLOC_TRIM_THRESHOLD_", None)
    environ.update({name: per_worker for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                                  "ITK_GLOBAL_DEFAULT_NUMBER_OF_THREADS")})
    dask.config.set({"distributed.nanny.pre-spawn-environ": environ,
                     # The statistical profiler samples every worker thread's stack 100 times a second, for the
                     # dashboard's profile page: 2-4% of a scan's time on two cores. Task stream and progress stay.
                     "distributed.worker.profile.enabled": False,
                     # Event-loop health ticks (every 20 ms), system monitors (every 0.5 s) and the nannies' memory
                     # checks (every 0.1 s) in every process take CPU from the scans once workers fill the cores:
                     # two workers on two cores 6% faster at these intervals, one worker unchanged.
                     "distributed.admin.tick.interval": "1s",
                     "distributed.admin.system-monitor.interval": "2s",
                     "distributed.worker.memory.monitor-interval": "1s"})
    # Worker processes: the forest's numba kernels release the GIL, but reading and resampling scans do not.
    # Workers import the application as they start, so that each one's first scan does not pay for it (0.9 s).
    cluster = distributed.LocalCluster(n_workers=int(workers), threads_per_worker=1, processes=True,
                                       dashboard_address=":8787", silence_logs=logging.ERROR,
                                       preload=list(preload))
    return distributed.Client(cluster)


def disconnect(client) -> None:
    """Close `client`, and its cluster when this process made it."""
    cluster = getattr(client, "cluster", None)
    client.close()
    if cluster is not None:
        cluster.close()


def dask_jobs(client):
    """A `run_jobs` for `OrganLocalizer.fit`: each ``(function, args)`` job becomes a task on `client`'s cluster,
    in order (the first stage's trees first); results come back in order. Each distinct argument object is
    scattered once, so data that several jobs share (the first stage's integral volumes) travels once to each
    worker that needs it."""

    def run(jobs: list[tuple]) -> list:
        futures, scattered, stamp = [], {}, f"{os.getpid()}-{time.time_ns()}"
        for k, (function, args) in enumerate(jobs):
            remote = []
            for arg in args:
                if isinstance(arg, (int, float, str)) or arg is None:
                    remote.append(arg)
                    continue
                if id(arg) not in scattered:
                    [scattered[id(arg)]] = client.scatter([arg], hash=False)
                remote.append(scattered[id(arg)])
            futures.append(client.submit(function, *remote, pure=False, key=f"train-job-{stamp}-{k}"))
            jobs[k] = None  # the cluster holds the data now
        scattered.clear()
        return client.gather(futures)

    return run
