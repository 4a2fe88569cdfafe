"""The `imageforest` command: a thin shell over the installed applications (errors become one line and a non-zero
exit).

Commands come from the applications' entry points (`imageforest.applications`) beside the suite's own
`model-info`; a command's module is imported only when it runs, so `imageforest --version` or one application's
command never pays for the others.
"""

from __future__ import annotations

import click

from imageforest.applications import LazyCommand, app_commands, lazy_command

# The suite's own commands (the applications add theirs through their entry points).
OWN_COMMANDS = {
    "model-info": lazy_command("model-info", "imageforest.model_info:model_info",
                               "Print a model file's card (any imageforest model)."),
}


def fail(message: str) -> click.ClickException:
    """A click error carrying the first line of `message` (exit code 1)."""
    return click.ClickException(message.strip().splitlines()[0] if message.strip() else "failed")


def each_scan(scans: list, work, summary) -> tuple[list[dict], int]:
    """Run `work(k, scan)` -> JSON document on every scan of a command's list, one after the other: progress lines
    for more than three scans, each document's `summary(document)` on stderr, and a scan that fails reported in one
    line while the others go on (the suite's errors and OSError by their message, anything else as an internal
    error). Returns the documents of the scans that succeeded and the number that failed."""
    from imageforest.exceptions import ImageForestError

    documents, failures = [], 0
    for k, scan in enumerate(scans):
        if len(scans) > 3:
            click.echo(f"[{k + 1}/{len(scans)}] {scan}", err=True)
        try:
            document = work(k, scan)
        except (ImageForestError, OSError) as exc:
            failures += 1
            lines = str(exc).strip().splitlines()
            click.echo(f"Error: {lines[0] if lines else f'{scan}: {type(exc).__name__}'}", err=True)
            continue
        except Exception as exc:
            failures += 1
            click.echo(f"Error: {scan}: internal error ({type(exc).__name__}: {str(exc).strip()[:200]})", err=True)
            continue
        documents.append(document)
        click.echo(summary(document), err=True)
    return documents, failures


class _LazyGroup(click.Group):
    """A group whose commands are the installed applications', imported on first use."""

    def _known(self) -> dict[str, click.Command]:
        return {**app_commands(), **OWN_COMMANDS}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._known()})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        command = self._known().get(name) or super().get_command(ctx, name)
        return command.load() if isinstance(command, LazyCommand) else command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list from each command's one-line help, without importing lazy commands."""
        known = self._known()
        rows = []
        for name in self.list_commands(ctx):
            command = known.get(name) or super().get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(formatter.width - 6 - len(name))))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="imageforest")
def main() -> None:
    """Decision forests for medical and vision imaging."""


def run() -> None:
    """The `imageforest` script: click's own handling, except that a usage error (a missing argument, an unknown
    option, a value of the wrong type) is one line on stderr and exit code 1, like every other bad input. A
    termination signal (SIGTERM) ends the command as Ctrl-C does, so that it removes its temporary files."""
    import signal

    def terminated(signum, frame):
        raise KeyboardInterrupt

    try:
        signal.signal(signal.SIGTERM, terminated)
    except ValueError:  # not the main thread: leave the handler as it is
        pass
    try:
        main.main(standalone_mode=False)
    except click.exceptions.UsageError as exc:
        click.echo(f"Error: {exc.format_message()}", err=True)
        raise SystemExit(1) from None
    except click.ClickException as exc:
        exc.show()
        raise SystemExit(exc.exit_code) from None
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("Aborted.", err=True)
        raise SystemExit(1) from None
    except click.exceptions.Exit as exc:
        raise SystemExit(exc.exit_code) from None


if __name__ == "__main__":
    run()
