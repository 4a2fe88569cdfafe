"""CT organ localization by regression voting: ``imageforest localize scan.nii.gz``.

The Python API (imported on first use, so that the command's start-up pays only for what it runs)::

    from imageforest.apps.localize import load_localizer, localize_file
    model = load_localizer()
    document, result, scan = localize_file("scan.nii.gz", model)
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "DEFAULT_MODEL": "imageforest.apps.localize.api",
    "load_localizer": "imageforest.apps.localize.api",
    "localize_file": "imageforest.apps.localize.api",
    "Localization": "imageforest.apps.localize.model",
    "OrganEstimate": "imageforest.apps.localize.model",
    "OrganLocalizer": "imageforest.apps.localize.model",
    "train_from_folder": "imageforest.apps.localize.training",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
