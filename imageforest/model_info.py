"""`imageforest model-info`: what a model file holds, for every kind of model the suite writes.

An organ localizer's card (organs, training data, recipe, measured figures), an application's forest (a detector, a
body-parts model, a segmentation model: its card and settings) or an engine estimator written by `save` (task,
features, classes, settings). The file is loaded, and so validated, by its own reader before anything is printed.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import click
import numpy as np

from imageforest.cli import fail
from imageforest.estimators.files import FORESTS_KEY
from imageforest.exceptions import ImageForestError, ModelFormatError

# estimator name in a file's metadata -> "module:class" whose `from_record` validates it (imported for that file only)
READERS = {
    "ClassificationForest": "imageforest.estimators.classification:ClassificationForest",
    "RegressionForest": "imageforest.estimators.regression:RegressionForest",
    "DensityForest": "imageforest.estimators.density:DensityForest",
    "ManifoldForest": "imageforest.estimators.manifold:ManifoldForest",
    "SemiSupervisedForest": "imageforest.estimators.semi_supervised:SemiSupervisedForest",
    "ImageClassificationForest": "imageforest.imaging.forests:ImageClassificationForest",
    "ImageRegressionForest": "imageforest.imaging.forests:ImageRegressionForest",
    "HoughForestDetector": "imageforest.apps.detect.model:HoughForestDetector",
    "BodyPartsForest": "imageforest.apps.bodyparts.model:BodyPartsForest",
    "SegmentationForest": "imageforest.apps.segment.model:SegmentationForest",
}
LOCALIZER = "OrganLocalizer"  # files of several named forests are localizers (older ones: one record)
APP_FIELDS = ("part_names", "threshold", "image_kind", "n_channels")  # what an application's model reads
LONG_LIST = 8  # lists longer than this print as their count, first three and last


def describe(path: Path | None) -> dict:
    """The card of the model file at `path` (None: the shipped organ localizer), as a JSON-able dict.

    Raises ModelFormatError for a file that is no model of this suite, or that its reader refuses, and
    FileNotFoundError for a missing file.
    """
    from imageforest.forest.serialization import load_model, model_file

    if path is None:
        from imageforest.apps.localize.api import DEFAULT_MODEL

        path = model_file(None, DEFAULT_MODEL)
    meta, arrays = load_model(path)
    if FORESTS_KEY in meta or meta.get("estimator") == LOCALIZER:  # several named forests, or the older layout
        return _localizer_card(meta, arrays, path)
    name = str(meta.get("estimator"))
    if name not in READERS:
        raise ModelFormatError(f"{path}: holds a {name!r} model, which model-info does not know "
                               f"(it reads {', '.join(sorted([*READERS, LOCALIZER]))})")
    module, cls = READERS[name].split(":")
    model = getattr(importlib.import_module(module), cls).from_record(meta, arrays, str(path))
    forest = model.forest_
    card = {"file": str(path), "estimator": name, "task": meta.get("task"),
            "format_version": meta.get("format_version"), "imageforest_version": meta.get("imageforest_version"),
            "n_features_in": meta.get("n_features_in"),
            "forest": {"trees": int(forest.n_trees), "nodes": int(forest.n_nodes),
                       "leaves": int(forest.leaf_node.size),
                       "max_depth": int(forest.depth.max()) if forest.n_nodes else 0}}
    classes = getattr(model, "classes_", None)
    if classes is not None:
        card["classes"] = np.asarray(classes).tolist()
    for key in APP_FIELDS:
        if key in meta:
            card[key] = meta[key]
    card["model_card"] = getattr(model, "model_card_", None) or meta.get("model_card", {})
    card["settings"] = meta.get("hyper_parameters", {})
    return card


def _localizer_card(meta: dict, arrays: dict, path: Path) -> dict:
    from imageforest.apps.localize.files import localizer_from_record

    model = localizer_from_record(meta, arrays, str(path))
    return {"file": str(path), "organs": list(model.organs),
            "model_card": getattr(model, "model_card_", {}) or {},
            "training_summary": getattr(model, "training_summary_", {}) or {},
            "settings": model._saved_hyper_parameters()}


def _value(value) -> str:
    if isinstance(value, list) and len(value) > LONG_LIST:  # e.g. the training cases: their count and ends
        return f"{len(value)}: {', '.join(map(str, value[:3]))}, ..., {value[-1]}"
    return str(value) if not isinstance(value, (dict, list)) else json.dumps(value)


def card_text(card: dict) -> list[str]:
    """The card as the lines `model-info` prints."""
    lines = [f"file: {card['file']}"]
    if "organs" in card:  # an organ localizer
        lines.append(f"organs: {', '.join(card['organs'])}")
        for section in ("model_card", "training_summary"):
            lines += [f"{key}: {_value(value)}" for key, value in card[section].items()]
    else:
        f = card["forest"]
        lines.append(f"model: {card['estimator']} ({card['task']}), format version {card['format_version']}, "
                     f"written by imageforest {card['imageforest_version']}")
        n_in = card["n_features_in"]
        lines.append(f"forest: {f['trees']} trees, {f['nodes']:,} nodes, {f['leaves']:,} leaves, depth up to "
                     f"{f['max_depth']}; {n_in} input feature{'' if n_in == 1 else 's'}")
        for key in ("classes", *APP_FIELDS):
            if key in card:
                lines.append(f"{key}: {_value(card[key])}")
        lines += [f"{key}: {_value(value)}" for key, value in card["model_card"].items()]
    lines.append("settings: " + ", ".join(f"{k}={v}" for k, v in card["settings"].items()))
    return lines


@click.command("model-info")
@click.argument("model_path", required=False, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="The card as JSON.")
def model_info(model_path: Path | None, as_json: bool) -> None:
    """Print a model file's card: what it finds, its training data, recipe, measured figures and settings (any
    imageforest model: localizer, detector, body parts, segmentation, engine; default: the shipped localizer)."""
    try:
        card = describe(model_path)
    except FileNotFoundError:
        raise fail(f"{model_path}: no such model file") from None
    except (ImageForestError, OSError) as exc:
        raise fail(str(exc)) from None
    if as_json:
        click.echo(json.dumps(card, indent=2))
        return
    for line in card_text(card):
        click.echo(line)


# The command this module adds to `imageforest`.
commands = click.Group("model-info", commands=[model_info])
