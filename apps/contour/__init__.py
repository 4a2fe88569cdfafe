"""CT organ contouring by entangled decision forests: ``imageforest contour scan.nii.gz -o organs.nii.gz``.

The Python API (imported on first use, so that the command's start-up pays only for what it runs)::

    from imageforest.apps.contour import load_contourer, contour_file
    model = load_contourer()
    document, contours, scan = contour_file("scan.nii.gz", model)
"""

from __future__ import annotations

from pathlib import Path

from imageforest.applications import App, lazy_command
from imageforest.lazy import lazy_attributes

_LAZY = {
    "DEFAULT_MODEL": "imageforest.apps.contour.api",
    "load_contourer": "imageforest.apps.contour.api",
    "contour_file": "imageforest.apps.contour.api",
    "contour_scan": "imageforest.apps.contour.api",
    "Contours": "imageforest.apps.contour.model",
    "OrganContourer": "imageforest.apps.contour.model",
    "train_from_folder": "imageforest.apps.contour.training",
}

# What this application declares to the suite (its entry point in pyproject.toml names this object).
app = App(
    name="contour",
    description="CT organ contours by entangled decision forests inside the localizer's boxes",
    commands=(
        lazy_command("contour", "imageforest.apps.contour.cli:contour",
                     "Contour organs in CT SCANs: a label map and a JSON report per scan."),
        lazy_command("train-contour", "imageforest.apps.contour.cli:train_contour",
                     "Train a contour model on DATA_DIR: CT scans with organ label maps."),
    ),
    readers={"OrganContourer": "imageforest.apps.contour.model:contourer_from_record"},
    warmup="imageforest.apps.contour.scripts.warmup:warm_up",
    models={"hn_contours": Path(__file__).parent / "models" / "hn_contours.npz"},
)

__all__ = sorted([*_LAZY, "app"])


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)
