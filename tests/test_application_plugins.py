"""Applications as plug-ins: the toy application of imageforest/README.md, registered through the entry-point group
as an installed distribution is, adds a command and a model reader with no change to the library; the library
names no application; `imageforest --help` imports no application's modules."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from imageforest.applications import ENTRY_POINT_GROUP, App, installed_apps
from imageforest.testing import check_estimator

REPO = Path(__file__).resolve().parents[1]
README = REPO / "imageforest" / "README.md"


def _readme_block(info: str) -> str:
    """The README's fenced code block whose info string is `info` (e.g. "python toy_app.py")."""
    match = re.search(rf"^```{re.escape(info)}\n(.*?)^```$", README.read_text(), re.S | re.M)
    assert match, f"imageforest/README.md has no ```{info} block"
    return match.group(1)


@pytest.fixture(scope="module")
def toy_site(tmp_path_factory) -> Path:
    """A folder that holds the toy application as an installed distribution: its module and a dist-info whose
    entry_points.txt is what the README's pyproject.toml declares (what pip would write)."""
    site = tmp_path_factory.mktemp("site")
    (site / "toy_app.py").write_text(_readme_block("python toy_app.py"))
    tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11's")
    declared = tomllib.loads(_readme_block("toml pyproject.toml"))["project"]["entry-points"][ENTRY_POINT_GROUP]
    info = site / "toy_app-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-app\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n"
                                           + "".join(f"{k} = {v}\n" for k, v in declared.items()))
    return site


def _imageforest(site: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "imageforest.cli", *args], capture_output=True, text=True, env=env,
                          cwd=site, timeout=300)


def test_the_toy_application_adds_a_command_and_a_model_reader(toy_site: Path):
    listed = _imageforest(toy_site, "--help")
    assert listed.returncode == 0 and "train-mean" in listed.stdout and "localize" in listed.stdout
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 3))
    np.save(toy_site / "table.npy", np.c_[X, 2.0 * X[:, 0]])
    trained = _imageforest(toy_site, "train-mean", "table.npy", "-o", "mean.npz")
    assert trained.returncode == 0, trained.stderr
    card = _imageforest(toy_site, "model-info", "mean.npz")
    assert card.returncode == 0, card.stderr
    assert "model: MeanForest (toy-mean)" in card.stdout and "10 trees" in card.stdout
    # a bad input to the new command is one line and exit 1, as for every command
    bad = _imageforest(toy_site, "train-mean", "missing.npy", "-o", "m.npz")
    assert bad.returncode == 1 and bad.stderr.strip().count("\n") == 0


def test_the_toy_forest_passes_the_conformance_check(toy_site: Path):
    spec = importlib.util.spec_from_file_location("toy_app", toy_site / "toy_app.py")
    toy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(toy)
    assert isinstance(toy.app, App)
    rng = np.random.default_rng(1)
    X = rng.normal(size=(200, 3))
    y = X[:, 0] - X[:, 1]
    check_estimator(toy.MeanForest(3, max_depth=4, random_state=0), lambda est: est.fit(X, y))
    assert np.corrcoef(toy.MeanForest(20, random_state=0).fit(X, y).predict(X), y)[0, 1] > 0.9


def test_the_suite_registers_its_own_applications_through_the_group():
    apps = {app.name: app for app in installed_apps()}
    assert {"localize", "segment", "bodyparts", "detect"} <= set(apps)
    commands = {c.name for app in apps.values() for c in app.commands}
    assert {"localize", "train-localizer", "segment", "bodyparts", "train-bodyparts", "detect",
            "train-detector"} <= commands
    for app in apps.values():
        for path in app.models.values():
            assert Path(path).is_file(), f"{app.name} ships {path}, which is missing"


def test_the_library_names_no_application():
    """Nothing under imageforest/ imports or names an application module (the entry-point group's name aside)."""
    pattern = re.compile(r"imageforest\.apps\.|\bapps/|from imageforest import apps")
    hits = [f"{path.relative_to(REPO)}:{n}" for path in (REPO / "imageforest").rglob("*")
            if path.is_file() and path.suffix in (".py", ".md", ".toml", ".txt")
            for n, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    assert not hits, hits


def test_help_imports_no_application_module():
    code = ("import sys; from imageforest.cli import run; sys.argv = ['imageforest', '--help']\n"
            "try:\n    run()\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith('imageforest.apps.') and m.count('.') > 2))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert out.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("recipe, estimator", [
    ("imageforest.apps.localize.recipe:PARAMETERS", "imageforest.apps.localize.model:OrganLocalizer"),
    ("imageforest.apps.detect.recipe:RECIPE", "imageforest.apps.detect.model:HoughForestDetector"),
    ("imageforest.apps.bodyparts.recipe:RECIPE", "imageforest.apps.bodyparts.model:BodyPartsForest"),
    ("imageforest.apps.segment.recipe:PICTURE", "imageforest.apps.segment.model:SegmentationForest"),
    ("imageforest.apps.contour.recipe:RECIPE", "imageforest.apps.contour.model:OrganContourer"),
])
def test_each_recipe_is_its_estimators_defaults(recipe, estimator):
    """The shipped model's settings (recipe.py) are the estimator's defaults, its seed aside."""
    from imageforest.applications import resolve

    settings, cls = resolve(recipe), resolve(estimator)
    defaults = cls().get_params()
    shared = [k for k in settings if k in defaults and k != "random_state"]
    assert len(shared) >= 3
    assert {k: defaults[k] for k in shared} == {k: settings[k] for k in shared}


def test_a_broken_application_leaves_the_others_working(toy_site: Path, tmp_path: Path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "broken_app.py").write_text("raise ImportError('a dependency is missing')\n")
    info = site / "broken_app-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-app\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nbroken = broken_app:app\n")
    listed = _imageforest(site, "--help")
    assert listed.returncode == 0 and "localize" in listed.stdout
    assert "'broken'" in listed.stderr and "does not load" in listed.stderr
