"""The `imageforest` command: a thin shell over the applications (errors become one line and a non-zero exit).

Each application's `cli.py` holds its click commands (and `imageforest.model_info` the one that reads every kind
of model file); they are imported only when named, so `imageforest --version` or one application's command never
pays for the others.
"""

from __future__ import annotations

import importlib

import click

# command name -> the application module whose `commands` group defines it
APP_COMMANDS = {
    "localize": "imageforest.apps.localize.cli",
    "train-localizer": "imageforest.apps.localize.cli",
    "model-info": "imageforest.model_info",
    "segment": "imageforest.apps.segment.cli",
    "bodyparts": "imageforest.apps.bodyparts.cli",
    "train-bodyparts": "imageforest.apps.bodyparts.cli",
    "detect": "imageforest.apps.detect.cli",
    "train-detector": "imageforest.apps.detect.cli",
}


def fail(message: str) -> click.ClickException:
    """A click error carrying the first line of `message` (exit code 1)."""
    return click.ClickException(message.strip().splitlines()[0] if message.strip() else "failed")


class _LazyGroup(click.Group):
    """A group whose application commands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *APP_COMMANDS})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in APP_COMMANDS:
            return importlib.import_module(APP_COMMANDS[name]).commands.get_command(ctx, name)
        return super().get_command(ctx, name)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="imageforest")
def main() -> None:
    """Decision forests for medical and vision imaging."""


def run() -> None:
    """The `imageforest` script: click's own handling, except that a usage error (a missing argument, an unknown
    option, a value of the wrong type) is one line on stderr and exit code 1, like every other bad input."""
    try:
        main.main(standalone_mode=False)
    except click.exceptions.UsageError as exc:
        click.echo(f"Error: {exc.format_message()}", err=True)
        raise SystemExit(1) from None
    except click.ClickException as exc:
        exc.show()
        raise SystemExit(exc.exit_code) from None
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        raise SystemExit(1) from None
    except click.exceptions.Exit as exc:
        raise SystemExit(exc.exit_code) from None


if __name__ == "__main__":
    run()
