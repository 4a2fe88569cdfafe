"""Exception types raised at imageforest's boundaries.

Users catch these; a numba traceback is never a user's error message.
"""

from __future__ import annotations


class ImageForestError(Exception):
    """Base class of every error imageforest raises on purpose."""


class InvalidInputError(ImageForestError, ValueError):
    """Input data is unusable: NaN/inf, wrong shape, empty, a single class, ..."""


class NotFittedError(ImageForestError, AttributeError, ValueError):
    """An estimator was used before `fit` (or `load`)."""


class ModelFormatError(ImageForestError, ValueError):
    """A model file is damaged, foreign, of another task, or of an unsupported format version."""
