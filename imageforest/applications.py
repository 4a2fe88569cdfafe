"""Applications as plug-ins: what an application declares (`App`) and how the suite finds the installed ones.

An application is any installed distribution that declares, in its ``pyproject.toml``::

    [project.entry-points."imageforest.apps"]
    myapp = "mypackage.myapp:app"

where ``app`` is an `App`. The suite finds applications only through that entry-point group: `imageforest --help`
lists their commands, `imageforest model-info` reads their model files with their readers, and
``python -m imageforest.warmup --apps`` (run by ``make install``) compiles their kernels. The suite's own
applications register themselves the same way.

Loading an entry point imports the module that defines ``app``, so keep that module light: name heavy commands
with `lazy_command` and readers and warm-ups as ``"module:function"`` strings, which are imported only when used.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import click

ENTRY_POINT_GROUP = "imageforest.apps"

# A model-file reader: (metadata, arrays, source) -> the validated model (raises ModelFormatError when it is not).
Reader = Callable[[dict, dict, str], Any]


def resolve(target: str | Callable) -> Any:
    """The object a ``"package.module:attribute"`` string names (imported now), or `target` itself."""
    if not isinstance(target, str):
        return target
    module, _, attribute = target.partition(":")
    value = importlib.import_module(module)
    for part in attribute.split(".") if attribute else ():
        value = getattr(value, part)
    return value


class LazyCommand(click.Command):
    """A command known by name and one-line help until it runs: its module is imported only then, so that
    ``imageforest --help`` does not pay for every application's imports."""

    def __init__(self, name: str, target: str, short_help: str) -> None:
        super().__init__(name, short_help=short_help, help=short_help)
        self.target = target

    def load(self) -> click.Command:
        """The real command (imported on first call)."""
        command = resolve(self.target)
        if not isinstance(command, click.Command):
            raise TypeError(f"{self.target} is not a click command")
        return command


def lazy_command(name: str, target: str, short_help: str) -> LazyCommand:
    """A command named `name` whose click command is ``target`` ("package.module:command"), imported when the
    command runs; `short_help` is what ``imageforest --help`` shows meanwhile."""
    return LazyCommand(name, target, short_help)


@dataclass(frozen=True)
class App:
    """What an application declares to the suite.

    Attributes
    ----------
    name : the application's name (its entry point's name)
    description : one line: what it does
    commands : click commands added to ``imageforest`` (plain commands, or `lazy_command` for heavy modules)
    readers : estimator name in a model file's metadata -> reader ``(meta, arrays, source) -> model`` (or its
        ``"module:function"``), which validates the file and returns the model `imageforest model-info` describes;
        a file of several named forests is read by the reader of the one estimator among its forests that has one
    warmup : a callable of no arguments (or its ``"module:function"``) that runs the application's kernels once
        so that numba caches them; None when it has none
    models : shipped model name -> its file
    """

    name: str
    description: str
    commands: tuple[click.Command, ...] = ()
    readers: Mapping[str, str | Reader] = field(default_factory=dict)
    warmup: str | Callable[[], Any] | None = None
    models: Mapping[str, Path] = field(default_factory=dict)


class AppLoadError(RuntimeError):
    """A named application is not installed (`run_warmups`)."""


@cache
def installed_apps() -> tuple[App, ...]:
    """Every application installed in this environment that loads, sorted by name (found once per process).

    An entry point that does not load or gives no `App` is left out with one line on stderr naming it, so that
    one broken package does not take every other application's commands with it; two applications that claim
    one command name keep it for the first by name, with a line that says so.
    """
    apps = []
    for point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            app = point.load()
        except Exception as exc:  # an outside package's import may raise anything: say which one failed
            _notice(f"the application {point.name!r} ({point.value}) does not load ({type(exc).__name__}: "
                    f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}); its commands are unavailable")
            continue
        if not isinstance(app, App):
            _notice(f"the application {point.name!r} ({point.value}) is a {type(app).__name__}, not an "
                    "imageforest.App; left out")
            continue
        apps.append(app)
    return tuple(sorted(apps, key=lambda a: a.name))


def _notice(message: str) -> None:
    print(f"imageforest: {message}", file=sys.stderr)


def app_commands() -> dict[str, click.Command]:
    """Command name -> command over every installed application (the first by name keeps a claimed name)."""
    commands: dict[str, click.Command] = {}
    owner: dict[str, str] = {}
    for app in installed_apps():
        for command in app.commands:
            if command.name in commands:
                _notice(f"the command {command.name!r} of the application {app.name!r} is already the "
                        f"{owner[command.name]!r} application's; left out")
                continue
            commands[command.name] = command
            owner[command.name] = app.name
    return commands


def model_readers() -> dict[str, Reader | str]:
    """Estimator name -> reader over every installed application."""
    return {estimator: reader for app in installed_apps() for estimator, reader in app.readers.items()}


def shipped_models() -> dict[str, Path]:
    """``"<application>/<model>"`` -> file of every model the installed applications ship."""
    return {f"{app.name}/{name}": Path(path) for app in installed_apps() for name, path in app.models.items()}


def run_warmups(names: list[str] | None = None) -> None:
    """Run the warm-up of every installed application (or of those named), printing each one's time; a name that
    is no installed application raises AppLoadError."""
    import time

    unknown = sorted(set(names or ()) - {app.name for app in installed_apps()})
    if unknown:
        raise AppLoadError(f"no installed imageforest application is named {', '.join(unknown)}")
    for app in installed_apps():
        if app.warmup is None or (names and app.name not in names):
            continue
        t0 = time.perf_counter()
        resolve(app.warmup)()
        print(f"{app.name}: kernels compiled and cached in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
