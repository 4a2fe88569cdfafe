"""The localizer's entry points shared by the CLI, the demo and the benchmarks.

    from imageforest.apps.localize.api import load_localizer, localize_file
    model = load_localizer()                     # the default head-and-neck model shipped in the package
    document, result, scan = localize_file("scan.nii.gz", model)
"""

from __future__ import annotations

import time
from pathlib import Path

from imageforest.apps.localize.model import OrganLocalizer
from imageforest.apps.localize.report import localization_json
from imageforest.apps.localize.results import Localization
from imageforest.exceptions import InvalidInputError
from imageforest.forest.serialization import model_file
from imageforest.imaging.ct import read_scan, scan_warnings
from imageforest.imaging.io import Image

DEFAULT_MODEL = Path(__file__).parent / "models" / "hn_organs.npz"


def load_localizer(path: str | Path | None = None) -> OrganLocalizer:
    """Load a localizer model file (default: the shipped head-and-neck model)."""
    return OrganLocalizer.load(model_file(path, DEFAULT_MODEL))


def model_identity(model: OrganLocalizer) -> dict:
    """{"name", "version"} of a model from its model card."""
    card = getattr(model, "model_card_", {}) or {}
    return {"name": str(card.get("name", "custom")), "version": str(card.get("version", "unversioned"))}


def check_organs(model: OrganLocalizer, organs: list[str] | None) -> list[str] | None:
    """Validate a user's organ selection against the model's organs."""
    if not organs:
        return None
    unknown = [o for o in organs if o not in model.organs]
    if unknown:
        raise InvalidInputError(f"unknown organ(s) {', '.join(unknown)}; this model knows "
                                f"{', '.join(model.organs)}")
    return organs


def localize_file(path: str | Path, model: OrganLocalizer, organs: list[str] | None = None
                  ) -> tuple[dict, Localization, Image]:
    """Read a scan, localize its organs, and build the JSON document (see `imageforest.apps.localize.report`)."""
    t0 = time.perf_counter()
    scan = read_scan(path)
    t1 = time.perf_counter()
    result = model.localize(scan)
    t2 = time.perf_counter()
    timing = {"read": t1 - t0, "localize": t2 - t1, "total": t2 - t0}
    document = localization_json(result, scan, str(path), model_identity(model), timing, organs)
    document["warnings"] = scan_warnings(scan) + region_warnings(result, model)
    return document, result, scan


def region_warnings(result: Localization, model: OrganLocalizer) -> list[str]:
    """Why "absent" may not mean absent: a scan where none of the model's organs is found most likely shows none
    of the anatomy the model was trained on (a thorax or abdomen scan for a head-and-neck model)."""
    if any(organ.present for organ in result.organs):
        return []
    card = getattr(model, "model_card_", {}) or {}
    trained = f"model {card['name']}, trained on {', '.join(model.organs)}" if "name" in card else \
        f"trained on {', '.join(model.organs)}"
    return [f"none of the model's {len(model.organs)} organs was found: the scan may show none of the anatomy the "
            f"model knows ({trained}); then 'absent' says nothing of the organs"]
