"""napari plugin of imageforest: segment an image from a few scribbles with a decision forest.

The dock widget (`SegmentationWidget`) is a thin shell over `imageforest.apps.segment`: it keeps one
`SegmentationSession` per image layer, runs its updates in a background worker and shows the results as layers.
"""

__version__ = "0.1.0"

__all__ = ["SegmentationWidget"]


def __getattr__(name: str):
    if name == "SegmentationWidget":  # Qt is imported only when the widget is asked for
        from napari_imageforest._widget import SegmentationWidget

        return SegmentationWidget
    raise AttributeError(name)
