"""imageforest: decision forests for medical and vision imaging.

One engine (seeds/000, Criminisi, Shotton & Konukoglu's unified model) behind every estimator:
``from imageforest import ClassificationForest, RegressionForest``.
"""

__version__ = "0.1.0"

from imageforest.estimators.classification import ClassificationForest
from imageforest.estimators.density import DensityForest
from imageforest.estimators.manifold import ManifoldForest
from imageforest.estimators.regression import RegressionForest
from imageforest.estimators.semi_supervised import SemiSupervisedForest
from imageforest.exceptions import (
    ImageForestError,
    InvalidInputError,
    ModelFormatError,
    NotFittedError,
)

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
