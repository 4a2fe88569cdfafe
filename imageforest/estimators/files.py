"""Several named forests in one model file: a cascade's stages, a detector's stages.

Each forest is stored as its own record (`BaseForest.to_record`: metadata and arrays) under a name the application
chooses, such as ``"first"`` or ``"fine/3/0"``. The file's metadata holds ``{"forests": {name: record metadata}}``
beside the application's shared entries, and its arrays are named ``"<name>/<array>"``: applications name forests,
never array-name prefixes. Reading checks every forest as `BaseForest.load` checks a file of one, against the
estimator classes the caller allows (a file cannot name a class to build).

Example
-------
>>> save_forests("cascade.npz", {"coarse": coarse, "fine/0": fine}, {"organs": ["Brainstem"]})  # doctest: +SKIP
>>> shared, forests = load_forests("cascade.npz", [RegressionForest])  # doctest: +SKIP
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

import numpy as np

from imageforest.estimators.base import BaseForest
from imageforest.exceptions import ModelFormatError
from imageforest.forest.serialization import load_model, save_model

FORESTS_KEY = "forests"
RESERVED_KEYS = (FORESTS_KEY, "format", "format_version")
# Names read like paths ("fine/3/0"); an array's own name never holds a "/", so "<name>/<array>" splits uniquely.
NAME_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*)*\Z")


def pack_forests(forests: Mapping[str, BaseForest], metadata: Mapping | None = None
                 ) -> tuple[dict, dict[str, np.ndarray]]:
    """(metadata, arrays) of a file holding `forests` under their names, with the shared `metadata` entries."""
    shared = dict(metadata or {})
    clash = [key for key in RESERVED_KEYS if key in shared]
    if clash:
        raise ValueError(f"shared metadata may not use the reserved key(s) {', '.join(clash)}")
    records: dict[str, dict] = {}
    arrays: dict[str, np.ndarray] = {}
    for name, forest in forests.items():
        if not NAME_PATTERN.match(name):
            raise ValueError(f"forest name {name!r}: parts of letters, digits, '_', '.' and '-' (not leading '.' "
                             "or '-'), joined by '/'")
        meta, own = forest.to_record()
        records[name] = meta
        for key, value in own.items():
            if "/" in key:
                raise ValueError(f"array name {key!r} of forest {name!r} holds a '/'")
            arrays[f"{name}/{key}"] = value
    return {**shared, FORESTS_KEY: records}, arrays


def unpack_forests(meta: dict, arrays: dict[str, np.ndarray], classes: Iterable[type[BaseForest]],
                   source: str = "model") -> tuple[dict, dict[str, BaseForest]]:
    """The shared metadata and the forests of a `pack_forests` record, each validated by its class's
    `from_record`; `classes` are the estimators the file may hold. ModelFormatError names what is wrong."""
    records = meta.get(FORESTS_KEY)
    if not isinstance(records, dict) or not records:
        raise ModelFormatError(f"{source}: holds no named forests")
    by_name = {cls.__name__: cls for cls in classes}
    grouped: dict[str, dict[str, np.ndarray]] = {name: {} for name in records}
    for key, value in arrays.items():
        name, _, own = key.rpartition("/")
        if name not in grouped:
            raise ModelFormatError(f"{source}: array {key!r} belongs to no forest of the file")
        grouped[name][own] = value
    forests: dict[str, BaseForest] = {}
    for name, record in records.items():
        if not isinstance(name, str) or not NAME_PATTERN.match(name) or not isinstance(record, dict):
            raise ModelFormatError(f"{source}: forest entry {name!r} is malformed")
        cls = by_name.get(record.get("estimator"))
        if cls is None:
            raise ModelFormatError(f"{source}: forest {name!r} is a {record.get('estimator')!r}, which this "
                                   f"reader does not take (it takes {', '.join(sorted(by_name))})")
        forests[name] = cls.from_record(record, grouped[name], f"{source}: forest {name}")
    shared = {key: value for key, value in meta.items() if key not in RESERVED_KEYS}
    return shared, forests


def save_forests(path: str | os.PathLike, forests: Mapping[str, BaseForest], metadata: Mapping | None = None
                 ) -> None:
    """Write fitted `forests` under their names, and the shared `metadata`, to one model file (atomic)."""
    save_model(path, *pack_forests(forests, metadata))


def load_forests(path: str | os.PathLike, classes: Iterable[type[BaseForest]]
                 ) -> tuple[dict, dict[str, BaseForest]]:
    """(shared metadata, {name: forest}) of a file `save_forests` wrote; `classes`: the estimators it may hold."""
    meta, arrays = load_model(path)
    return unpack_forests(meta, arrays, classes, str(path))
