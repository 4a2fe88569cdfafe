"""The localizer's model file: each stage's forest by name, and files written in the older layout.

A model file holds (`imageforest.estimators.files`), organs by index:

- ``first``: the first stage (an `OrganLocalizer`: its forest, leaves, settings and model card);
- ``fine/<organ>/<stage>``: the organ's fine stages (`WallRefiner`), one per fine-stage setting, or none;
- ``slice/<organ>``: the slice stage of an elongated organ (`SliceWallRefiner`), or none.

Files written before this layout held one record, the later stages' arrays under prefixes (``refine.<organ>.``,
``refine.<organ>.stage<k>.``, ``slice.<organ>.``) with their settings in the ``refiners`` and ``slicers``
metadata lists; `legacy_record` reads them into the named layout, so they load as before.
"""

from __future__ import annotations

import os

import numpy as np

from imageforest.apps.localize.model import OrganLocalizer
from imageforest.apps.localize.refine import WallRefiner
from imageforest.apps.localize.slices import SliceWallRefiner
from imageforest.estimators.base import BaseForest
from imageforest.estimators.files import FORESTS_KEY, save_forests, unpack_forests
from imageforest.exceptions import InvalidInputError, ModelFormatError
from imageforest.forest.serialization import load_model

FIRST = "first"
STAGE_CLASSES = (OrganLocalizer, WallRefiner, SliceWallRefiner)


def fine_name(organ: int, stage: int) -> str:
    """Name of organ `organ`'s fine stage `stage` (both counted from 0) in a model file."""
    return f"fine/{organ}/{stage}"


def slice_name(organ: int) -> str:
    """Name of organ `organ`'s slice stage in a model file."""
    return f"slice/{organ}"


def named_forests(model: OrganLocalizer) -> dict[str, BaseForest]:
    """Every fitted stage of `model` under its name in the model file."""
    forests: dict[str, BaseForest] = {FIRST: model}
    for o, cascade in enumerate(getattr(model, "refiners_", None) or []):
        for s, refiner in enumerate(cascade or []):
            forests[fine_name(o, s)] = refiner
    for o, slicer in enumerate(getattr(model, "slicers_", None) or []):
        if slicer is not None:
            forests[slice_name(o)] = slicer
    return forests


def write_localizer(model: OrganLocalizer, path: str | os.PathLike) -> None:
    """Write `model` to `path` (atomic)."""
    save_forests(path, named_forests(model))


def read_localizer(path: str | os.PathLike) -> OrganLocalizer:
    """The localizer in `path`, every stage checked, and the stages checked against the first stage's settings."""
    meta, arrays = load_model(path)
    return localizer_from_record(meta, arrays, str(path))


def localizer_from_record(meta: dict, arrays: dict[str, np.ndarray], source: str = "model") -> OrganLocalizer:
    """The localizer a model file's (metadata, arrays) hold, checked as `read_localizer` checks a file; `source`
    names it in error messages."""
    if FORESTS_KEY not in meta:
        meta, arrays = legacy_record(meta, arrays, source)
    _, forests = unpack_forests(meta, arrays, STAGE_CLASSES, source)
    first = forests.pop(FIRST, None)
    if type(first) is not OrganLocalizer:
        raise ModelFormatError(f"{source}: holds no first stage of an organ localizer")
    n_org = len(first.organs)
    try:
        n_stages = len(first.fine_stages())
    except InvalidInputError as exc:
        raise ModelFormatError(f"{source}: fine-stage settings: {exc}") from None
    refiners: list[list[WallRefiner] | None] = []
    for o in range(n_org):
        cascade = [forests.pop(fine_name(o, s), None) for s in range(n_stages)]
        if all(r is None for r in cascade):
            refiners.append(None)
        elif all(type(r) is WallRefiner for r in cascade):
            refiners.append(cascade)
        else:
            raise ModelFormatError(f"{source}: organ {o}'s fine-stage forests do not match its {n_stages} "
                                   "fine-stage settings")
    slicers = [forests.pop(slice_name(o), None) for o in range(n_org)]
    if not all(s is None or type(s) is SliceWallRefiner for s in slicers):
        raise ModelFormatError(f"{source}: a slice-stage entry is not a slice-stage forest")
    if forests:
        raise ModelFormatError(f"{source}: forests {', '.join(sorted(forests))} belong to no stage of the "
                               f"model's {n_org} organs and {n_stages} fine stages")
    first.refiners_, first.slicers_ = refiners, slicers
    return first


def legacy_record(meta: dict, arrays: dict[str, np.ndarray], source: str = "model"
                  ) -> tuple[dict, dict[str, np.ndarray]]:
    """A file of the older single-record layout as the named layout's (metadata, arrays)."""
    n_org = len(meta.get("organs") or [])
    refiners = meta.get("refiners") or []
    slicers = meta.get("slicers") or []
    if len(refiners) not in (0, n_org):
        raise ModelFormatError(f"{source}: the file lists {len(refiners)} second-stage forests for {n_org} organs")
    if not all(h is None or isinstance(h, (dict, list)) for h in refiners):
        raise ModelFormatError(f"{source}: the file's fine-stage entries are neither forests nor lists of them")
    if len(slicers) not in (0, n_org) or not all(h is None or isinstance(h, dict) for h in slicers):
        raise ModelFormatError(f"{source}: the file's slice-stage entries do not give one forest or null per organ")
    stages: dict[str, tuple[type[WallRefiner], dict, str]] = {}
    for o, entry in enumerate(refiners):
        # files written before the cascade hold one fine stage per organ (a dict instead of a list)
        for s, hyper in enumerate([] if entry is None else [entry] if isinstance(entry, dict) else entry):
            prefix = f"refine.{o}." if s == 0 else f"refine.{o}.stage{s + 1}."
            stages[fine_name(o, s)] = (WallRefiner, hyper, prefix)
    for o, hyper in enumerate(slicers):
        if hyper is not None:
            stages[slice_name(o)] = (SliceWallRefiner, hyper, f"slice.{o}.")
    records = {FIRST: {k: v for k, v in meta.items()
                       if k not in ("refiners", "slicers", "format", "format_version")}}
    named: dict[str, np.ndarray] = {}
    for name, (cls, hyper, prefix) in stages.items():
        records[name], family_arrays = _stage_record(cls, hyper, source)
        named.update({f"{name}/{key}": value for key, value in family_arrays.items()})
        for key in [k for k in arrays if k.startswith(prefix) and "stage" not in k[len(prefix):].split(".")[0]]:
            named[f"{name}/{key[len(prefix):]}"] = arrays.pop(key)
    for key, value in arrays.items():
        if key.startswith(("refine.", "slice.")):
            raise ModelFormatError(f"{source}: array {key} belongs to no fine-stage or slice-stage forest the file "
                                   "lists")
        named[f"{FIRST}/{key}"] = value
    return {FORESTS_KEY: records}, named


def _stage_record(cls: type[WallRefiner], hyper: dict, source: str) -> tuple[dict, dict[str, np.ndarray]]:
    """The record metadata (and feature-family arrays) of a later stage the older layout described by its
    settings alone: its feature family follows from them."""
    if not isinstance(hyper, dict):
        raise ModelFormatError(f"{source}: a stage's settings are not a mapping")
    try:
        est = cls.from_hyper_parameters({k: v for k, v in hyper.items() if k in cls.param_names()}, {})
        family = est._features()
    except (InvalidInputError, TypeError, ValueError) as exc:
        raise ModelFormatError(f"{source}: a stage's settings are invalid ({exc})") from None
    spec, family_arrays = family.to_spec()
    return {"task": cls.task, "estimator": cls.__name__, "family": spec, "hyper_parameters": hyper,
            "n_features_in": int(family.n_features)}, family_arrays
