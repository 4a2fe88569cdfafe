"""imageforest: decision forests for medical and vision imaging.

One engine, Criminisi, Shotton & Konukoglu's unified model of decision forests, behind every estimator:
``from imageforest import ClassificationForest, RegressionForest``. Docstrings cite it as "Criminisi et al. 2012"
with its chapter, section and equation numbers.

Estimators are imported on first use (PEP 562), so that a command-line run pays only for the modules it needs
(scipy.stats alone costs more than a second of start-up).

References
----------
A. Criminisi, J. Shotton and E. Konukoglu, "Decision forests: a unified framework for classification, regression,
density estimation, manifold learning and semi-supervised learning", Foundations and Trends in Computer Graphics
and Vision 7(2-3), 2012.
"""

from __future__ import annotations

from imageforest.lazy import lazy_attributes

__version__ = "0.1.0"

from imageforest.exceptions import (
    ImageForestError,
    InvalidInputError,
    ModelFormatError,
    NotFittedError,
)

_LAZY = {
    "App": "imageforest.applications",
    "BaseForest": "imageforest.estimators.base",
    "ClassificationForest": "imageforest.estimators.classification",
    "DensityForest": "imageforest.estimators.density",
    "ManifoldForest": "imageforest.estimators.manifold",
    "RegressionForest": "imageforest.estimators.regression",
    "SemiSupervisedForest": "imageforest.estimators.semi_supervised",
}


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)


__all__ = [
    "App",
    "BaseForest",
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
