"""Interactive semi-supervised segmentation from scribbles: ``imageforest segment IMAGE --scribbles S -o MASK``.

The Python API (imported on first use)::

    from imageforest.apps.segment import SegmentationSession, SegmentationForest
    session = SegmentationSession(image)        # 2-D grey or RGB, or a 3-D volume (an Image, or an array + spacing)
    session.set_scribbles(scribbles)            # 0 = not labelled, 1..K = classes
    result = session.update()                   # result.labels, .probabilities, .uncertainty
    session.suggest(5)                          # where to scribble next
    session.model().save("model.npz")           # SegmentationForest.load("model.npz").segment(other_image)
"""

from __future__ import annotations

from imageforest.applications import App, lazy_command
from imageforest.lazy import lazy_attributes

_LAZY = {
    "Segmentation": "imageforest.apps.segment.model",
    "SegmentationForest": "imageforest.apps.segment.model",
    "SegmentationSession": "imageforest.apps.segment.session",
    "load_segmentation_model": "imageforest.apps.segment.api",
    "segment_file": "imageforest.apps.segment.api",
    "prepare": "imageforest.apps.segment.features",
    "read_scribbles": "imageforest.apps.segment.image_files",
    "read_segmentation_image": "imageforest.apps.segment.image_files",
    "write_labels": "imageforest.apps.segment.image_files",
}

# What this application declares to the suite (its entry point in pyproject.toml names this object).
app = App(
    name="segment",
    description="interactive segmentation of pictures and volumes from scribbles",
    commands=(
        lazy_command("segment", "imageforest.apps.segment.cli:segment",
                     "Segment IMAGE from scribbles (or with a saved model) into a label mask."),
    ),
    readers={"SegmentationForest": "imageforest.apps.segment.model:SegmentationForest.from_record"},
    warmup="imageforest.apps.segment.scripts.warmup:warm_up",
    models={},
)

__all__ = sorted([*_LAZY, "app"])


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)
