"""CT organ localization by regression voting: ``imageforest localize scan.nii.gz``.

The Python API (imported on first use, so that the command's start-up pays only for what it runs)::

    from imageforest.apps.localize import load_localizer, localize_file
    model = load_localizer()
    document, result, scan = localize_file("scan.nii.gz", model)
"""

from __future__ import annotations

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

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)
