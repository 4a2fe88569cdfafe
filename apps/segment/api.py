"""Segmenting one image file: what the command line, the napari plugin and benchmarks call.

    from imageforest.apps.segment.api import segment_file
    result, image, model = segment_file("photo.png", "strokes.png", keep_model=True)  # train on this image
    result, image, _ = segment_file("other.png", model="model.npz")                   # apply a saved model
"""

from __future__ import annotations

from pathlib import Path

from imageforest.apps.segment.image_files import read_scribbles, read_segmentation_image
from imageforest.apps.segment.model import Segmentation, SegmentationForest
from imageforest.exceptions import InvalidInputError
from imageforest.imaging.io import Image


def load_segmentation_model(path: str | Path) -> SegmentationForest:
    """A segmentation model saved by `--save-model` or `SegmentationForest.save` (no model ships)."""
    return SegmentationForest.load(path)


def segment_file(image: str | Path, scribbles: str | Path | None = None, model: str | Path | SegmentationForest |
                 None = None, *, n_trees: int | None = None, max_depth: int | None = None,
                 smoothness: float | None = None, geodesic_weight: float | None = None, keep_model: bool = False,
                 init: str | Path | None = None, background: int | None = None, init_weight: float | None = None,
                 colour_weight: float | None = None, maps: bool = True, labels_to: str | Path | None = None,
                 extent_margin: float | None = None, slice_path_scale: float | None = None,
                 stroke_regions: bool | None = None) -> tuple[Segmentation, Image, SegmentationForest | None]:
    """Segment the picture or volume at `image` from its `scribbles` (a label image file on its grid) or with a
    saved `model` (a path or a loaded model); exactly one of the two.

    The settings left None are the recipe's for the image's kind (`recipe.py`). Returns the segmentation, the image
    as read, and, with `keep_model`, a forest for other images grown on the scribbles and the pixels the
    segmentation is sure of (`SegmentationSession.model`; None otherwise, and when a model was applied).
    `init` is a label map on the image's grid to start from (e.g. `imageforest contour`'s; 0 = background): the
    scribbled organs are corrected and the labels come back in its numbering (`SegmentationSession.set_init`;
    `background` the background strokes' number, `init_weight` its share of the pooling). `maps` False: a saved
    model keeps only the labels of a picture it segments in tiles (no probability or uncertainty maps: larger
    pictures fit, see `MAX_LABEL_PIXELS`). `labels_to`: a new folder where a picture segmented in tiles without maps
    keeps its labels (an on-disk zarr array, written tile by tile: the labels are then never in memory; the
    result's `labels` is that array, for `write_labels` to an OME-Zarr mask); the caller removes it.
    `extent_margin`: how far a volume's class painted on separate slices reaches beyond them;
    `slice_path_scale`: the share of a geodesic step across those slices that counts; `stroke_regions`: keep
    only the regions of each class that hold one of its strokes (`SegmentationSession`).
    """
    if (scribbles is None) == (model is None):
        raise InvalidInputError("give either scribbles (train on this image) or a model (apply a saved one)")
    if init is not None and scribbles is None:
        raise InvalidInputError("an automatic segmentation to start from (init) is corrected with scribbles")
    if model is not None:
        forest = model if isinstance(model, SegmentationForest) else load_segmentation_model(model)
        # a saved model segments large pictures in tiles
        picture = read_segmentation_image(image, tiled=True, labels_only=not maps,
                                          streamed=labels_to is not None and not maps)
        return forest.segment(picture, maps=maps, labels_to=labels_to), picture, None
    picture = read_segmentation_image(image)
    from imageforest.apps.segment.session import SegmentationSession

    labels = read_scribbles(scribbles, picture)
    forest = SegmentationForest.for_kind(picture.ndim == 3, n_trees=n_trees, max_depth=max_depth)
    session = SegmentationSession(picture, forest=forest, geodesic_weight=geodesic_weight, smoothness=smoothness,
                                  colour_weight=colour_weight, extent_margin=extent_margin,
                                  slice_path_scale=slice_path_scale, stroke_regions=stroke_regions)
    session.set_scribbles(labels)
    if init is not None:
        session.set_init(read_scribbles(init, picture, "the init"), background,
                         session.init_weight if init_weight is None else init_weight)
    return session.update(), picture, session.model() if keep_model else None
