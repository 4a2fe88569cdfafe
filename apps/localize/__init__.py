"""CT organ localization by regression voting: ``imageforest localize scan.nii.gz``.

The Python API (imported on first use, so that the command's start-up pays only for what it runs)::

    from imageforest.apps.localize import load_localizer, localize_file
    model = load_localizer()
    document, result, scan = localize_file("scan.nii.gz", model)
"""

from __future__ import annotations

from pathlib import Path

from imageforest.applications import App, lazy_command
from imageforest.lazy import lazy_attributes

_LAZY = {
    "DEFAULT_MODEL": "imageforest.apps.localize.api",
    "load_localizer": "imageforest.apps.localize.api",
    "localize_file": "imageforest.apps.localize.api",
    "localize_many": "imageforest.apps.localize.batch",
    "Localization": "imageforest.apps.localize.results",
    "OrganEstimate": "imageforest.apps.localize.results",
    "OrganLocalizer": "imageforest.apps.localize.model",
    "train_from_folder": "imageforest.apps.localize.training",
}

# What this application declares to the suite (its entry point in pyproject.toml names this object).
app = App(
    name="localize",
    description="CT organ bounding boxes by regression voting",
    commands=(
        lazy_command("localize", "imageforest.apps.localize.cli:localize",
                     "Find organs and their bounding boxes (LPS mm) in CT SCANs (NIfTI, NRRD, MHA, DICOM)."),
        lazy_command("train-localizer", "imageforest.apps.localize.cli:train_localizer",
                     "Train a localizer on DATA_DIR: CT scans with organ label maps."),
    ),
    readers={"OrganLocalizer": "imageforest.apps.localize.model_files:localizer_from_record"},
    warmup="imageforest.apps.localize.scripts.warmup:warm_up",
    models={"hn_organs": Path(__file__).parent / "models" / "hn_organs.npz"},
)

__all__ = sorted([*_LAZY, "app"])


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)
