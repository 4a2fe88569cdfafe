"""Running the `imageforest` command in-process as a user would, and reading its one-line errors."""

from __future__ import annotations

from click.testing import CliRunner

from imageforest.cli import main


def run(*args):
    """Invoke `imageforest ARGS...` (arguments may be paths or numbers); returns click's Result."""
    return CliRunner().invoke(main, [str(a) for a in args])


def one_line_error(result) -> str:
    """The command failed with exactly one `Error: ...` line on stderr and no traceback; returns that line."""
    assert result.exit_code != 0
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = [ln for ln in result.stderr.strip().splitlines() if ln.startswith("Error")]
    assert len(lines) == 1 and "Traceback" not in result.output
    return lines[0]
