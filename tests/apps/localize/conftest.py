"""Fixtures of the localizer's tests."""

import numpy as np
import pytest

from imageforest.apps.localize.model import OrganLocalizer


def _legacy_layout(model: OrganLocalizer) -> tuple[dict, dict[str, np.ndarray]]:
    """The (metadata, arrays) the localizer wrote before each stage became a named forest of its file: one record,
    the later stages' arrays under prefixes and their settings in the `refiners` / `slicers` lists."""
    meta, arrays = model.to_record()
    refiners, slicers = [], []
    for o, cascade in enumerate(model.refiners_):
        refiners.append(None if cascade is None else [r.saved_hyper_parameters() for r in cascade])
        for s, refiner in enumerate(cascade or []):
            prefix = f"refine.{o}." if s == 0 else f"refine.{o}.stage{s + 1}."
            arrays.update({prefix + k: v for k, v in refiner.to_record()[1].items()
                           if k.startswith(("forest.", "leaf."))})
    for o, slicer in enumerate(model.slicers_):
        slicers.append(None if slicer is None else slicer.saved_hyper_parameters())
        if slicer is not None:
            arrays.update({f"slice.{o}." + k: v for k, v in slicer.to_record()[1].items()
                           if k.startswith(("forest.", "leaf."))})
    return {**meta, "refiners": refiners, "slicers": slicers}, arrays


@pytest.fixture
def legacy_layout():
    """A function giving a model's (metadata, arrays) in the older single-record file layout."""
    return _legacy_layout
