"""Scoring organ boxes against the truth: wall and centroid errors, presence (shared by the benchmark and tests).

Errors are in mm: the mean absolute difference of the six walls (x_lo, x_hi, y_lo, y_hi, z_lo, z_hi), and the
distance between box centres. Presence is scored where the truth is known: an organ contoured in the scan must be
reported present; an organ cut out of the field of view (a slab of a scan whose full version shows it) must be
reported absent. A scan's organ that was never contoured may or may not be in view, so it is not scored.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from imageforest.exceptions import InvalidInputError

WALL_NAMES = ("x_lo", "x_hi", "y_lo", "y_hi", "z_lo", "z_hi")  # order of a box's six walls (mm, LPS)
# The walls of the head-and-neck data set by where a clinician stopped contouring, not by an edge in the image: the
# cord and the esophagus run on below every scan (benchmarks/localize/contour_ends.py measures how often).
CONTOUR_STOP_WALLS = "SpinalCord:z_lo,Esophagus:z_lo"


def parse_walls(spec: str, organs: list[str]) -> dict[int, list[int]]:
    """Walls named as "Organ:wall,..." (wall one of WALL_NAMES) -> {organ index: [wall indices]}; organs the
    list does not hold are skipped (a model of other organs), an unknown wall name raises InvalidInputError."""
    out: dict[int, list[int]] = {}
    for item in filter(None, (t.strip() for t in spec.split(","))):
        organ, _, wall = item.partition(":")
        if wall not in WALL_NAMES:
            raise InvalidInputError(f"{item!r}: a wall is Organ:{'|'.join(WALL_NAMES)}")
        if organ in organs:
            out.setdefault(organs.index(organ), []).append(WALL_NAMES.index(wall))
    return out


@dataclass
class OrganScores:
    """Accumulated scores of one method for every organ."""

    organs: list[str]
    walls: list[list[np.ndarray]] = field(default_factory=list)  # per organ, (6,) abs errors per scan
    centroid: list[list[float]] = field(default_factory=list)
    presence: list[list[bool]] = field(default_factory=list)  # per organ, correct or not, where the truth is known
    seconds: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        n = len(self.organs)
        self.walls = [[] for _ in range(n)]
        self.centroid = [[] for _ in range(n)]
        self.presence = [[] for _ in range(n)]

    def add(self, predicted: np.ndarray, present: np.ndarray, truth: np.ndarray, known: np.ndarray | None = None,
            seconds: float | None = None) -> None:
        """Score one scan.

        Parameters
        ----------
        predicted : (n_organs, 6) boxes in mm (a method's best box even when it calls the organ absent; NaN if none)
        present : (n_organs,) bool, the method's presence call
        truth : (n_organs, 6) true boxes, NaN rows where the organ is not in the truth
        known : (n_organs,) bool, whether an organ missing from `truth` is known to be out of view
        """
        known = np.zeros(len(self.organs), bool) if known is None else np.asarray(known, bool)
        for k in range(len(self.organs)):
            has = not np.isnan(truth[k, 0])
            if has:
                if np.all(np.isfinite(predicted[k])):
                    err = np.abs(predicted[k] - truth[k])
                    self.walls[k].append(err)
                    c_pred = 0.5 * (predicted[k][0::2] + predicted[k][1::2])
                    c_true = 0.5 * (truth[k][0::2] + truth[k][1::2])
                    self.centroid[k].append(float(np.linalg.norm(c_pred - c_true)))
                self.presence[k].append(bool(present[k]))
            elif known[k]:
                self.presence[k].append(not bool(present[k]))
        if seconds is not None:
            self.seconds.append(float(seconds))

    def organ_wall_error(self, k: int, leave_out: list[int] | tuple = ()) -> float:
        """Organ k's mean wall error over its scans and walls, without the walls `leave_out` (indices)."""
        if not self.walls[k]:
            return float("nan")
        keep = np.setdiff1d(np.arange(6), leave_out)
        return float(np.mean(np.array(self.walls[k])[:, keep]))

    def mean_wall_error(self, leave_out: dict[int, list[int]] | None = None) -> float:
        """Mean over organs of each organ's mean wall error; `leave_out` ({organ: [walls]}, see `parse_walls`)
        drops some walls from their organ's mean."""
        leave_out = leave_out or {}
        vals = [self.organ_wall_error(k, leave_out.get(k, ())) for k in range(len(self.organs)) if self.walls[k]]
        return float(np.mean(vals)) if vals else float("nan")

    def presence_accuracy(self) -> float:
        flat = [v for row in self.presence for v in row]
        return float(np.mean(flat)) if flat else float("nan")

    def rows(self) -> list[dict]:
        out = []
        for k, name in enumerate(self.organs):
            w = np.array(self.walls[k]) if self.walls[k] else np.full((1, 6), np.nan)
            out.append({"organ": name, "n": len(self.walls[k]), "wall_mm": float(np.mean(w)),
                        "walls_mm": np.mean(w, axis=0).round(2).tolist(),
                        "centroid_mm": float(np.mean(self.centroid[k])) if self.centroid[k] else float("nan"),
                        "presence": float(np.mean(self.presence[k])) if self.presence[k] else float("nan")})
        return out
