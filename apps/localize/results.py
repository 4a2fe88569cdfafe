"""What the localizer's stages pass down: one `OrganEstimate` per organ, and the scan's `Localization`."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from imageforest.imaging.io import Image


@dataclass
class OrganEstimate:
    """One organ in one scan: presence probability, box and per-wall spread (mm, LPS)."""

    name: str
    present: bool
    probability: float
    box_mm: np.ndarray  # (6,) x_lo, x_hi, y_lo, y_hi, z_lo, z_hi; NaN when no confident vote exists
    box_std_mm: np.ndarray  # (6,)
    n_votes: int
    # (6,) the walls as voted, before the last stage moves them to the outer faces of the scan's voxels
    # (`box_mm`); every estimate `OrganLocalizer.localize` returns has it
    voted_box_mm: np.ndarray | None = None


@dataclass
class Localization:
    """The localizer's answer for one scan."""

    organs: list[OrganEstimate]
    work: Image  # the working-grid scan the votes came from
    timing_s: dict[str, float] = field(default_factory=dict)

    def boxes(self) -> np.ndarray:
        """(n_organs, 6) boxes in mm, NaN rows for organs judged absent."""
        return np.array([o.box_mm if o.present else np.full(6, np.nan) for o in self.organs])
