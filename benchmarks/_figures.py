"""Figures of the benchmarks: matplotlib without a display, PNGs written atomically."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig: Any, path: Path, dpi: int = 110) -> None:
    """Write `fig` to `path` through a temporary file (a reader never sees half a PNG) and close it."""
    tmp = path.with_suffix(".tmp.png")
    fig.tight_layout()
    fig.savefig(tmp, dpi=dpi)
    tmp.replace(path)
    pyplot().close(fig)
