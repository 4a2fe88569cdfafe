"""The command-line side of a batch (``--workers N | --scheduler ADDR``, ``--resume``), the same for every
application: check the options, start or reach the cluster, run `imageforest.batches.run_batch`, say what happened,
exit 1 when a scan failed."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import click

from imageforest.batches import REPORT_NAME, BatchItem, BatchJob, run_batch
from imageforest.cli import fail
from imageforest.exceptions import ImageForestError


def check_cluster_options(workers: int | None, scheduler: str | None) -> None:
    """Refuse --workers with --scheduler and fewer than one worker (one line, exit 1)."""
    if workers is not None and scheduler is not None:
        raise fail("give --workers (a local cluster) or --scheduler (an existing one), not both")
    if workers is not None and workers < 1:
        raise fail(f"--workers must be at least 1, got {workers}")


def run_batch_command(make_job: Callable[[int | None], BatchJob], plan: Callable[[], list[BatchItem]],
                      report_dir: Path, *, workers: int | None, scheduler: str | None, threads: int | None,
                      resume: bool, verb: str, model_name: str = "default", preload: tuple[str, ...] = ()) -> None:
    """Run a batch for a command and exit 1 when any scan failed.

    `make_job(threads)` builds the job once the numba threads per task are known (a local cluster shares the
    cores out); `plan()` gives the items (absolute paths); the report goes to `report_dir`; `verb` names the
    work in the summary line ("localized"); workers of a new local cluster import `preload` as they start."""
    check_cluster_options(workers, scheduler)
    client = None
    try:
        items = plan()
        if workers is not None or scheduler is not None:
            from imageforest.cluster import connect, local_threads

            client = connect(workers, scheduler, threads, preload=preload)
            click.echo(f"Dask dashboard: {client.dashboard_link}", err=True)
            if workers is not None:
                threads = local_threads(workers, threads)
        report = run_batch(make_job(threads), items, report_dir, client, resume=resume, model_name=model_name,
                           progress=lambda line: click.echo(line, err=True))
    except (ImageForestError, OSError) as exc:
        raise fail(str(exc)) from None
    finally:
        if client is not None:
            from imageforest.cluster import disconnect

            disconnect(client)
    click.echo(f"{report['ok']} {verb}, {report['failed']} failed, {report['skipped']} skipped (complete) in "
               f"{report['wall_s']:.1f} s; report: {Path(report_dir) / REPORT_NAME}", err=True)
    if report["failed"]:
        sys.exit(1)
