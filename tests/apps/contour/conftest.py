"""The small phantom-trained contour model the contour tests share (trained once per test module)."""

import pytest
from contour_phantoms import trained_phantom_model


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return trained_phantom_model(tmp_path_factory.mktemp("contour"))
