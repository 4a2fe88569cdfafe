"""The shipped default model on real CT (skipped when ../shared/data is absent) and on the phantom of `make demo`."""

from pathlib import Path

import numpy as np
import pytest

from imageforest.apps.localize.api import DEFAULT_MODEL, load_localizer
from imageforest.apps.localize.phantom import head_neck_phantom
from imageforest.imaging.ct import read_scan
from imageforest.imaging.ct_organs import OrganSlices, openkbp_cases

DATA = Path(__file__).resolve().parents[3].parent / "shared" / "data"
OPENKBP = DATA / "openkbp-hn"
TOTALSEG = DATA / "totalseg-examples"

needs_model = pytest.mark.skipif(not DEFAULT_MODEL.is_file(), reason="the default model file is not in this checkout")


@pytest.fixture(scope="module")
def model():
    return load_localizer()


@needs_model
def test_default_model_card(model):
    card = model.model_card_
    assert card["name"] == "openkbp-hn-7-organs" and len(card["cases"]) == 203
    assert card["working_spacing_mm"] == 4.0 and card["organs"] == model.organs
    assert DEFAULT_MODEL.stat().st_size <= 20_000_000  # a model shipped in the package stays small


@needs_model
def test_demo_phantom_is_localized(model):
    ct, labels = head_neck_phantom(2026)
    truth = OrganSlices.from_labels(labels, list(range(1, 8))).boxes()
    result = model.localize(ct)
    found = [o for o in result.organs if o.present]
    assert len(found) >= 5
    # The method's walls (before they move to voxel faces, at most half a voxel): a synthetic phantom the model
    # never saw, so coarse agreement only.
    centre_err = [np.linalg.norm(0.5 * (o.voted_box_mm[0::2] + o.voted_box_mm[1::2])
                                 - 0.5 * (truth[k, 0::2] + truth[k, 1::2]))
                  for k, o in enumerate(result.organs) if o.present and not np.isnan(truth[k, 0])]
    assert np.median(centre_err) < 25.0
    for o in found:
        assert np.all(np.abs(o.box_mm - o.voted_box_mm) <= np.repeat(ct.spacing, 2) / 2 + 1e-6)


@needs_model
@pytest.mark.skipif(not OPENKBP.is_dir(), reason="../shared/data/openkbp-hn is not available")
def test_real_head_and_neck_scans(model):
    cases, organs = openkbp_cases(OPENKBP)
    assert organs == model.organs
    errors = []
    for case in cases[::60]:
        result = model.localize(read_scan(case.scan))
        for k, o in enumerate(result.organs):
            if not np.isnan(case.boxes[k, 0]):
                assert o.present, (case.name, o.name)
                errors.append(np.abs(o.box_mm - case.boxes[k]).mean())
    assert np.mean(errors) < 8.0  # training scans of the default model: a pipeline check, not the benchmark


@needs_model
@pytest.mark.skipif(not TOTALSEG.is_dir(), reason="../shared/data/totalseg-examples is not available")
def test_abdominal_scan_has_no_head_organs(model):
    result = model.localize(read_scan(TOTALSEG / "example_ct.nii.gz"))
    by_name = {o.name: o for o in result.organs}
    for name in ("Brainstem", "RightParotid", "LeftParotid", "Larynx", "Mandible"):
        assert not by_name[name].present, (name, by_name[name].probability)
