"""`imageforest model-info`: what a model file holds, for every kind of model the suite and its applications write.

One card layout for every model: the file, the estimator and task, the forests (trees, nodes, leaves, depth), what
the model tells apart (classes, organs, parts), its model card (name, training data, measured figures) and its
settings. Engine estimators written by `save` are read by their own classes; an application's files by the reader
it declares (`imageforest.App.readers`; a file of several named forests by the reader of the one estimator among
them that has one). The file is loaded, and so validated, by that reader before anything is
printed. With no file named, the card of every model the installed applications ship.
"""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path
from typing import Any

import click
import numpy as np

from imageforest.applications import model_readers, resolve, shipped_models
from imageforest.cli import fail
from imageforest.estimators.files import FORESTS_KEY
from imageforest.exceptions import ImageForestError, ModelFormatError

# estimator name in a file's metadata -> "module:class" whose `from_record` validates it (imported for that file only)
ENGINE_READERS = {
    "ClassificationForest": "imageforest.estimators.classification:ClassificationForest",
    "RegressionForest": "imageforest.estimators.regression:RegressionForest",
    "DensityForest": "imageforest.estimators.density:DensityForest",
    "ManifoldForest": "imageforest.estimators.manifold:ManifoldForest",
    "SemiSupervisedForest": "imageforest.estimators.semi_supervised:SemiSupervisedForest",
    "ImageClassificationForest": "imageforest.imaging.forests:ImageClassificationForest",
    "ImageRegressionForest": "imageforest.imaging.forests:ImageRegressionForest",
}
# what a model tells apart or reads, from its metadata (or the attribute named with a trailing underscore)
FIELDS = ("classes", "organs", "part_names", "threshold", "image_kind", "n_channels")
LONG_LIST = 8  # lists longer than this print as their count, first three and last


def _readers() -> dict[str, Any]:
    readers: dict[str, Any] = {name: f"{target}.from_record" for name, target in ENGINE_READERS.items()}
    readers.update(model_readers())
    return readers


def _naming_record(meta: dict, readers: dict) -> dict:
    """The record that names a file's model: the file's own metadata, or, in a file of several named forests, the
    one forest whose estimator has a reader (a cascade's first stage; its other stages are read with it)."""
    records = meta.get(FORESTS_KEY)
    if not isinstance(records, dict) or not records:
        return meta
    named = [r for r in records.values() if isinstance(r, dict) and r.get("estimator") in readers]
    kinds = {r["estimator"] for r in named}
    if len(kinds) == 1:
        return next(r for r in named if r["estimator"] in kinds)
    estimators = sorted({str(r.get("estimator")) for r in records.values() if isinstance(r, dict)})
    return {"estimator": " + ".join(sorted(kinds)) if kinds else ", ".join(estimators)}


def _forest_stats(model: Any) -> dict:
    """Counts over every forest of `model`: one, or those its ``named_forests()`` lists."""
    forests = model.named_forests() if hasattr(model, "named_forests") else {"": model}
    arrays = [f.forest_ for f in forests.values()]
    return {"count": len(arrays), "trees": int(sum(a.n_trees for a in arrays)),
            "nodes": int(sum(a.n_nodes for a in arrays)), "leaves": int(sum(a.leaf_node.size for a in arrays)),
            "max_depth": int(max((a.depth.max() for a in arrays if a.n_nodes), default=0))}


def describe(path: Path) -> dict:
    """The card of the model file at `path`, as a JSON-able dict.

    Raises ModelFormatError for a file that is no model of this suite, or that its reader refuses, and
    FileNotFoundError for a missing file.
    """
    from imageforest.forest.serialization import load_model

    meta, arrays = load_model(path)
    readers = _readers()
    record = _naming_record(meta, readers)
    name = str(record.get("estimator"))
    if name not in readers:
        raise ModelFormatError(f"{path}: holds a {name!r} model, which model-info does not know "
                               f"(it reads {', '.join(sorted(readers))})")
    model = resolve(readers[name])(meta, arrays, str(path))
    card: dict[str, Any] = {
        "file": str(path), "estimator": name, "task": record.get("task"),
        "format_version": meta.get("format_version"), "imageforest_version": record.get("imageforest_version"),
        "n_features_in": record.get("n_features_in"), "forest": _forest_stats(model)}
    for key in FIELDS:
        value = getattr(model, f"{key}_", None) if key != "organs" else getattr(model, "organs", None)
        value = record.get(key) if value is None else value
        if value is not None:
            card[key] = np.asarray(value).tolist() if isinstance(value, np.ndarray) else value
    card["model_card"] = getattr(model, "model_card_", None) or record.get("model_card") or {}
    card["training_summary"] = getattr(model, "training_summary_", None) or record.get("training_summary") or {}
    settings = model.saved_hyper_parameters() if hasattr(model, "saved_hyper_parameters") else None
    card["settings"] = settings if settings is not None else record.get("hyper_parameters", {})
    return card


def printable(text: Any) -> str:
    """`text` as a string with control characters escaped (a crafted card cannot move the cursor, set the
    terminal's title or forge lines)."""
    return "".join(c if unicodedata.category(c)[0] != "C" else
                   (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}") for c in str(text))


def _value(value) -> str:
    if isinstance(value, list) and len(value) > LONG_LIST:  # e.g. the training cases: their count and ends
        return f"{len(value)}: {', '.join(map(str, value[:3]))}, ..., {value[-1]}"
    return str(value) if not isinstance(value, (dict, list)) else json.dumps(value)


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def card_text(card: dict) -> list[str]:
    """The card as the lines `model-info` prints (control characters escaped)."""
    f = card["forest"]
    n_in = card["n_features_in"]
    forests = f"{f['count']} forests, " if f["count"] > 1 else ""
    lines = [f"file: {card['file']}",
             f"model: {card['estimator']} ({card['task']}), format version {card['format_version']}, "
             f"written by imageforest {card['imageforest_version']}",
             f"forest: {forests}{f['trees']} trees, {f['nodes']:,} nodes, {f['leaves']:,} leaves, depth up to "
             f"{f['max_depth']}; {n_in} input feature{'' if n_in == 1 else 's'}"]
    for key in FIELDS:
        if key in card:
            value = card[key]
            lines.append(f"{key}: {', '.join(map(str, value)) if key == 'organs' else _value(value)}")
    for section in ("model_card", "training_summary"):
        # what the card repeats of the fields or of the settings is said once
        lines += [f"{key}: {_value(value)}" for key, value in card[section].items()
                  if key not in card and not (key == "parameters" and _same(value, card["settings"]))]
    lines.append("settings: " + ", ".join(f"{k}={_value(v)}" for k, v in card["settings"].items()))
    return [printable(line) for line in lines]


@click.command("model-info")
@click.argument("model_path", required=False, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="The card as JSON (a list of cards with no MODEL_PATH).")
def model_info(model_path: Path | None, as_json: bool) -> None:
    """Print a model file's card: what it finds, its training data, recipe, measured figures and settings (any
    imageforest model: an application's or the engine's; with no file, every model the applications ship)."""
    try:
        paths = [model_path] if model_path is not None else list(shipped_models().values())
        cards = [describe(path) for path in paths]
    except FileNotFoundError as exc:
        raise fail(f"{exc.filename or model_path}: no such model file") from None
    except (ImageForestError, OSError) as exc:
        raise fail(str(exc)) from None
    if as_json:
        click.echo(json.dumps(cards[0] if model_path is not None else cards, indent=2))
        return
    for k, card in enumerate(cards):
        if k:
            click.echo("")
        for line in card_text(card):
            click.echo(line)

