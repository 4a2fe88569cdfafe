"""What the applications' batch and training commands share: checks of inputs and planned outputs, the per-file
loop that reports one line per file and goes on past a bad one, and the checks of a training command's options."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import click

from imageforest.cli import fail
from imageforest.exceptions import ImageForestError
from imageforest.outputs import check_destination, resolved


def check_batch_inputs(inputs: list[Path], suffixes: tuple[str, ...], read_as: str, overlay: Path | None,
                       threads: int | None) -> None:
    """Refuse an input of a type the command cannot read (`read_as`: "images are", "depth is"), a single overlay
    that is not a .png, and fewer than one thread."""
    for path in inputs:
        if path.suffix.lower() not in suffixes:
            raise fail(f"{path}: {read_as} read from {', '.join(suffixes)} files")
    if overlay is not None and len(inputs) == 1 and overlay.suffix.lower() != ".png":
        raise fail(f"--overlay: {overlay}: the overlay is a .png")
    if threads is not None and threads < 1:
        raise fail(f"--threads must be at least 1, got {threads}")


def check_planned_outputs(plans: dict[str, list[Path | None]], inputs: list[Path]) -> None:
    """Every planned file under --out (all plans but "overlay", which `plan_outputs` checked) may be written
    without touching an input, and no two outputs are the same file."""
    sources = {resolved(p, "input") for p in inputs}
    for key, paths in plans.items():
        for path in paths if key != "overlay" else ():
            if path is not None:
                check_destination(path, sources, "--out", devices=False)
    every = [p.resolve() for paths in plans.values() for p in paths if p is not None]
    if len(every) != len(set(every)):
        raise fail("two outputs would go to the same file; give --out and --overlay different places")


def run_batch(inputs: list[Path], process: Callable[[int, Path], tuple[str, Path]]) -> None:
    """Run ``process(k, path) -> (summary, main output)`` on every input, one line per file on stderr; a file that
    fails is one error line and the batch goes on; exit code 1 when any failed."""
    failures = 0
    for k, path in enumerate(inputs):
        t0 = time.perf_counter()
        try:
            summary, written = process(k, path)
        except (ImageForestError, OSError) as exc:
            failures += 1
            click.echo(f"Error: {str(exc).strip().splitlines()[0]}", err=True)
            continue
        click.echo(f"{path}: {summary}, {time.perf_counter() - t0:.3f} s -> {written}", err=True)
    if failures:
        raise SystemExit(1)


def check_training_options(out: Path, least: tuple[tuple[str, int, int], ...]) -> None:
    """The model file is a writable .npz, and each (flag, value, least) count is at least its least."""
    if out.suffix.lower() != ".npz":
        raise fail(f"-o: {out}: a model file ends in .npz")
    check_destination(out, set(), "-o", devices=False)
    for flag, value, low in least:
        if value < low:
            raise fail(f"{flag} must be at least {low}, got {value}")
