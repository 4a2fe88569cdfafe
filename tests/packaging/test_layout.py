"""The installed layout: applications import as imageforest.apps.<name>, nothing installs a top-level `apps`, and
importing the library or its command imports no application."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _declared_packages() -> list[str]:
    tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11's")
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]


def _package_folders() -> set[str]:
    """Every folder that holds Python modules or package data, by its import name."""
    names = set()
    for root, prefix in ((REPO / "imageforest", "imageforest"), (REPO / "apps", "imageforest.apps")):
        for folder in [root, *[p for p in root.rglob("*") if p.is_dir()]]:
            if folder.name == "__pycache__" or not any(f.is_file() and f.suffix in (".py", ".npz")
                                                       for f in folder.iterdir()):
                continue
            names.add(".".join([prefix, *folder.relative_to(root).parts]))
    return names


def test_every_package_folder_is_declared():
    assert _package_folders() == set(_declared_packages())


def test_importing_the_library_or_its_command_imports_no_application():
    code = ("import sys, imageforest, imageforest.cli; "
            "print(sorted(m for m in sys.modules if m == 'apps' or m.startswith(('apps.', 'imageforest.apps'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert out.stdout.strip() == "[]"


def test_the_command_lists_every_application_command():
    from click.testing import CliRunner

    from imageforest.applications import app_commands
    from imageforest.cli import main

    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    for name in [*app_commands(), "model-info"]:
        assert name in result.output


@pytest.mark.slow
def test_the_wheel_installs_no_top_level_apps(tmp_path):
    import configparser
    import shutil

    # setuptools' build folder (setup.cfg) keeps the modules of earlier builds: a renamed module would ship twice
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    shutil.rmtree(config["build"]["build_base"], ignore_errors=True)
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(REPO)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"could not build a wheel here (no build backend reachable): {proc.stderr.strip()[-200:]}")
    wheel = next(tmp_path.glob("imageforest-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert top == {"imageforest"}
    assert "imageforest/apps/localize/models/hn_organs.npz" in names
    assert "imageforest/apps/localize/README.md" in names
    # Exactly the sources' modules: a module left over from an earlier build would be installed too.
    sources = {f"{prefix}/{p.relative_to(REPO / folder).as_posix()}"
               for folder, prefix in (("imageforest", "imageforest"), ("apps", "imageforest/apps"))
               for p in (REPO / folder).rglob("*.py")}
    assert {n for n in names if n.endswith(".py")} == sources
    assert not (REPO / "build").exists()
