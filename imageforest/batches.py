"""Running an application over an archive of scans: in this process, or as Dask tasks on a local or remote cluster.

An application describes one scan's work as a `BatchJob` (its model files, how to load them, how to process one
`BatchItem`); `run_batch` does the rest, the same way for every application::

    items = plan_batch(scans, "out/", {"mask": ("masks/", "_boxes.nii.gz")})
    report = run_batch(job, items, "out/")                 # in this process, one scan after another
    report = run_batch(job, items, "out/", client=client)  # on a dask.distributed cluster

Each scan's outputs are written by whoever processes it, as it finishes, atomically and the JSON last: a JSON file
that exists is a finished scan, so a batch killed half-way keeps what it finished and `resume=True` skips it. A
scan that fails (a bad file, a worker out of memory, a worker lost) is tried once more on another worker, then
reported; the others go on. The report (every scan's status, error line and timings) is returned and written to
``OUT/batch_report.json``, also while the batch runs.

A worker loads a job's models once (`_worker_model` keeps them for the worker's lifetime). Workers of a remote
cluster read the scans and write the outputs by the same paths as the client, so the archive and OUT sit on a
shared file system; their Python environment holds imageforest.
"""

from __future__ import annotations

import glob
import json
import os
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from imageforest.exceptions import InvalidInputError
from imageforest.outputs import write_json

REPORT_NAME = "batch_report.json"
REPORT_VERSION = 1
REPORT_EVERY_S = 30.0  # a running batch rewrites its report this often (and when stopped)
GLOB_CHARS = set("*?[")
# Suffixes a scan's name loses in its outputs' names (a DICOM series is a folder: its name is kept whole)
SCAN_SUFFIXES = (".nii.gz", ".nii", ".nrrd", ".nhdr", ".mha", ".mhd")


@dataclass(frozen=True)
class BatchItem:
    """One scan and where its outputs go: the JSON document (written last) and the other outputs asked for, by
    kind (a file, or a folder of files)."""

    scan: Path
    json: Path
    outputs: dict[str, Path] = field(default_factory=dict)

    def __getattr__(self, kind: str) -> Path | None:
        """An output by kind (``item.mask``); None when it was not asked for."""
        if kind.startswith("_"):
            raise AttributeError(kind)
        return self.__dict__.get("outputs", {}).get(kind)


class BatchJob(Protocol):
    """One application's work on one scan, sent to the workers: it must pickle (a frozen dataclass of paths and
    plain settings does)."""

    task_name: str  # names the Dask tasks

    def model_files(self) -> list[str]:
        """The model files `load` reads (a worker reloads when one of them changes)."""

    def load(self) -> Any:
        """The models, loaded once per worker."""

    def check(self, models: Any) -> None:
        """Raise ImageForestError for a setting the models refuse (checked once before any task runs)."""

    def run(self, models: Any, item: BatchItem, timing: dict[str, float]) -> dict:
        """Process `item.scan`, write its outputs (the JSON last, atomically, with `timing` added to its
        ``timing_s``) and return its JSON document."""


def expand_scan_arguments(arguments: Iterable[str | os.PathLike]) -> list[Path]:
    """Scan paths from command-line arguments: ``@list.txt`` stands for the paths it lists (one per line; blank
    lines and lines starting with # are skipped; relative paths are taken from the current folder), and an
    argument with glob characters that names no file (``'archive/**/*.nii.gz'``, quoted so that the shell leaves
    it alone) for the files it matches, sorted. Anything else is a scan path (a file or a DICOM folder)."""
    out: list[Path] = []
    for arg in map(str, arguments):
        if arg.startswith("@") and len(arg) > 1:
            listing = Path(arg[1:])
            try:
                lines = listing.read_text(encoding="utf-8").splitlines()
            except (OSError, UnicodeDecodeError) as exc:
                raise InvalidInputError(f"{arg}: cannot read the list ({getattr(exc, 'strerror', None) or exc})"
                                        ) from None
            out.extend(Path(s.strip()) for s in lines if s.strip() and not s.strip().startswith("#"))
        elif GLOB_CHARS & set(arg) and not os.path.lexists(arg):
            matches = sorted(glob.glob(arg, recursive=True))
            if not matches:
                raise InvalidInputError(f"{arg}: no file matches the pattern")
            out.extend(Path(m) for m in matches)
        else:
            out.append(Path(arg))
    return out


def plan_batch(scans: list[Path], out: str | os.PathLike, outputs: dict[str, tuple[Any, str]] | None = None,
               suffixes: tuple[str, ...] = SCAN_SUFFIXES) -> list[BatchItem]:
    """Every scan's outputs: ``<stem>.json`` in the folder `out`, and for each ``kind: (target, suffix)`` of
    `outputs` whose target is not False/None, ``<stem><suffix>`` in `out` (target True) or in the folder given (a
    suffix ending in "/" names a folder per scan). Folders are created when missing; stems are the scans' names
    without `suffixes`, as the commands name their outputs.

    Raises InvalidInputError when there is no scan, a folder is a file, or an output would overwrite an input."""
    from imageforest.outputs import make_folder, output_stems

    if not scans:
        raise InvalidInputError("no scans given")

    def folder_of(target) -> Path | None:
        if target is False or target is None:
            return None
        folder = Path(out) if target is True else Path(target)
        make_folder(folder, "is a file; a batch writes into a folder")
        return folder

    json_dir = folder_of(True)
    wanted = {kind: (folder_of(target), suffix) for kind, (target, suffix) in (outputs or {}).items()}
    stems = output_stems(scans, suffixes)
    items = [BatchItem(scan, json_dir / f"{stem}.json",
                       {kind: folder / f"{stem}{suffix.rstrip('/')}" for kind, (folder, suffix) in wanted.items()
                        if folder is not None})
             for scan, stem in zip(scans, stems, strict=True)]
    inputs = {p.resolve() for p in scans}
    for item in items:
        for path in (item.json, *item.outputs.values()):
            if path.resolve() in inputs:
                raise InvalidInputError(f"{path} is an input; refusing to overwrite it")
    return items


def is_complete(item: BatchItem) -> bool:
    """Whether `item` is done: its JSON parses, names its scan and holds its timings, and every other output asked
    for exists (the JSON is written last)."""
    try:
        document = json.loads(item.json.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(document, dict) or document.get("scan") != str(item.scan) or "timing_s" not in document:
        return False
    return all(p.exists() for p in item.outputs.values())


# A worker's models, loaded on its first scan: (job's kind, model files with their sizes and times, the job's
# settings) -> (models, load seconds). File sizes and times are in the key so that a long-lived worker never answers
# from a replaced model.
_WORKER_MODELS: dict = {}


def _worker_model(job: BatchJob) -> tuple[Any, float]:
    stats = tuple((f, os.stat(f).st_size, os.stat(f).st_mtime_ns) for f in job.model_files())
    key = (type(job).__qualname__, stats, repr(job))
    if key not in _WORKER_MODELS:
        _WORKER_MODELS.clear()  # a worker serves one model at a time: let a replaced one go
        t0 = time.perf_counter()
        models = job.load()
        _WORKER_MODELS[key] = (models, time.perf_counter() - t0)
        return _WORKER_MODELS[key]
    return _WORKER_MODELS[key][0], 0.0


def _worker_address() -> str:
    """The Dask worker's address when run as a task, else host:pid."""
    try:
        from distributed import get_worker

        return get_worker().address
    except (ImportError, ValueError):
        return f"{socket.gethostname()}:{os.getpid()}"


def run_item(job: BatchJob, item: BatchItem) -> dict:
    """Process one scan and write its outputs; the task a worker runs.

    Returns the scan's report entry; a failure is caught and reported (status "failed", its first line) so that
    the caller can try it elsewhere."""
    t0 = time.perf_counter()
    entry: dict = {"scan": str(item.scan), "json": str(item.json), "worker": _worker_address()}
    try:
        models, load_s = _worker_model(job)
        document = job.run(models, item, {"model_load": round(load_s, 4)})
        entry.update(status="ok", error=None, timing_s=dict(document["timing_s"]))
    except Exception as exc:  # reported, not raised: one bad scan must not stop an archive
        text = str(exc).strip().splitlines()
        line = text[0] if text else ""
        entry.update(status="failed", error=f"{type(exc).__name__}: {line}"[:300], timing_s={})
    entry["timing_s"]["wall"] = round(time.perf_counter() - t0, 4)
    return entry


def _workers_other_than(client, address: str | None) -> list[str] | None:
    workers = list(client.scheduler_info(n_workers=-1)["workers"])
    others = [w for w in workers if w != address]
    return others or None


def run_batch(job: BatchJob, items: list[BatchItem], out: str | os.PathLike, client=None, *, resume: bool = False,
              retries: int = 1, model_name: str = "default", progress: Callable[[str], None] | None = None) -> dict:
    """Run `job` on every item; returns the batch report (also written to ``out/batch_report.json``).

    Parameters
    ----------
    job : the application's work on one scan (`BatchJob`)
    items : from `plan_batch`; scan paths absolute when a remote cluster runs them
    out : folder of the report
    client : dask.distributed.Client or None
        None processes the scans here, one after another; with a client every scan is a task.
    resume : skip scans whose outputs are already complete (`is_complete`)
    retries : further attempts for a failed scan (on another worker when there is one)
    model_name : what the report names as the model
    progress : callable(str), one line per finished scan

    Report: ``{"format_version", "out", "model", "workers", "finished", "scans": n, "ok", "failed", "skipped",
    "pending", "wall_s", "scans_per_s", "entries": [{"scan", "json", "status" (ok | failed | skipped | pending),
    "error", "attempts", "worker", "timing_s": {..., "total", "model_load", "wall"}}, ...]}`` in input order. It is
    rewritten every `REPORT_EVERY_S` while the batch runs and when it stops (`finished` false, unfinished scans
    "pending"), and at the end.
    """
    say = progress or (lambda _msg: None)
    t_start = time.perf_counter()
    # Checked here once, so that a bad model or setting stops the batch before any task runs; in this process the
    # models loaded for the check are the ones the scans use.
    job.check(_worker_model(job)[0] if client is None else job.load())
    entries: list[dict | None] = [None] * len(items)
    todo = []
    for k, item in enumerate(items):
        if resume and is_complete(item):
            entries[k] = {"scan": str(item.scan), "json": str(item.json), "status": "skipped", "error": None,
                          "attempts": 0, "worker": None, "timing_s": {}}
        else:
            todo.append(k)
    counts = {"ok": 0, "failed": 0}
    workers = 0 if client is None else len(client.scheduler_info(n_workers=-1)["workers"])
    last_write = [time.perf_counter()]

    def write_report(finished: bool) -> dict:
        wall = time.perf_counter() - t_start
        ok, failed = counts["ok"], counts["failed"]
        report = {"format_version": REPORT_VERSION, "out": str(out), "model": model_name,
                  "workers": workers, "finished": finished, "scans": len(items), "ok": ok, "failed": failed,
                  "skipped": len(items) - len(todo), "pending": len(todo) - ok - failed, "wall_s": round(wall, 3),
                  "scans_per_s": round((ok + failed) / wall, 4) if wall > 0 else None,
                  "entries": [e if e is not None else {"scan": str(items[k].scan), "json": str(items[k].json),
                                                       "status": "pending"} for k, e in enumerate(entries)]}
        write_json(report, Path(out) / REPORT_NAME, indent=1)
        last_write[0] = time.perf_counter()
        return report

    def record(k: int, entry: dict, attempts: int) -> None:
        entries[k] = {**entry, "attempts": attempts}
        counts[entry["status"]] += 1
        done = counts["ok"] + counts["failed"]
        say(f"[{done}/{len(todo)}] {entry['status']:<6} {entry['timing_s'].get('wall', 0.0):6.2f} s  "
            f"{items[k].scan}" + (f"  ({entry['error']})" if entry["error"] else "")
            + f"  (done {counts['ok']}, failed {counts['failed']})")
        if time.perf_counter() - last_write[0] > REPORT_EVERY_S:
            write_report(False)  # a batch stopped half-way still says what it did

    try:
        if client is None:
            for k in todo:
                entry = run_item(job, items[k])
                attempts = 1
                while entry["status"] == "failed" and attempts <= retries:
                    entry = run_item(job, items[k])
                    attempts += 1
                record(k, entry, attempts)
        else:
            _run_on_cluster(client, job, items, todo, retries, record)
    except BaseException:
        write_report(False)
        raise
    return write_report(True)


def _run_on_cluster(client, job: BatchJob, items: list[BatchItem], todo: list[int], retries: int, record) -> None:
    """Submit one task per scan; a failed attempt (reported by the task, or a task lost with its worker) goes
    once more to another worker; `record` gets every scan's final entry."""
    from dask.distributed import as_completed

    stamp = f"{os.getpid()}-{time.time_ns()}"

    def submit(k: int, attempt: int, workers: list[str] | None = None):
        return client.submit(run_item, job, items[k], pure=False, key=f"{job.task_name}-{stamp}-{k}-{attempt}",
                             workers=workers, allow_other_workers=workers is not None)

    pending = {}
    for k in todo:
        pending[submit(k, 1)] = (k, 1)
    queue = as_completed(list(pending), with_results=False)
    for fut in queue:
        k, attempt = pending.pop(fut)
        if fut.status == "finished":
            entry = fut.result()
        else:  # the task was lost: e.g. its worker died while running it too often (KilledWorker)
            exc = fut.exception()
            lines = str(exc).strip().splitlines()
            entry = {"scan": str(items[k].scan), "json": str(items[k].json), "worker": None, "status": "failed",
                     "error": f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300], "timing_s": {}}
        fut.release()
        if entry["status"] == "failed" and attempt <= retries:
            again = submit(k, attempt + 1, _workers_other_than(client, entry.get("worker")))
            pending[again] = (k, attempt + 1)
            queue.add(again)
            continue
        record(k, entry, attempt)
