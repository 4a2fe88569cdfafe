"""imageforest: decision forests for medical and vision imaging.

One engine (seeds/000, Criminisi, Shotton & Konukoglu's unified model) behind every estimator:
``from imageforest import ClassificationForest, RegressionForest``.

Estimators are imported on first use (PEP 562), so that a command-line run pays only for the modules it needs
(scipy.stats alone costs more than a second of start-up).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

from imageforest.exceptions import (
    ImageForestError,
    InvalidInputError,
    ModelFormatError,
    NotFittedError,
)

_LAZY = {
    "ClassificationForest": "imageforest.estimators.classification",
    "DensityForest": "imageforest.estimators.density",
    "ManifoldForest": "imageforest.estimators.manifold",
    "RegressionForest": "imageforest.estimators.regression",
    "SemiSupervisedForest": "imageforest.estimators.semi_supervised",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'imageforest' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


__all__ = [
    "ClassificationForest",
    "DensityForest",
    "ImageForestError",
    "InvalidInputError",
    "ManifoldForest",
    "ModelFormatError",
    "NotFittedError",
    "RegressionForest",
    "SemiSupervisedForest",
    "__version__",
]
