"""Screenshots of the dock widget at work, for the segmentation application's README.

    xvfb-run -a python plugins/napari-imageforest/screenshots.py --out apps/segment/docs
    G=../shared/data/grabcut-scribbles
    xvfb-run -a python plugins/napari-imageforest/screenshots.py --out shots --grabcut $G/images/banana1.bmp \
        --scribbles $G/scribbles-set-1/banana1.png --ct ../shared/data/openkbp-hn/train_pt_100_ct.nii.gz

Without data paths it uses images the project makes itself (a synthetic picture and the localizer's head-and-neck
phantom), so its PNGs may be committed; with real data, keep the PNGs out of the repository (the data's terms).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import napari
import numpy as np
from napari_imageforest._widget import SegmentationWidget, _camera
from qtpy.QtWidgets import QApplication


def wait(widget: SegmentationWidget, timeout: float = 120.0) -> None:
    start = time.time()
    while (widget.busy or widget.pending) and time.time() - start < timeout:
        QApplication.processEvents()
        time.sleep(0.02)
    for _ in range(20):
        QApplication.processEvents()


def shot(image: np.ndarray, scribbles: np.ndarray, path: Path, rgb: bool, scale=None, slice_z: int | None = None,
         contrast=None) -> None:
    viewer = napari.Viewer(show=True)
    viewer.window._qt_window.resize(1400, 860)
    layer = viewer.add_image(image, name="image", rgb=rgb, scale=scale, contrast_limits=contrast)
    widget = SegmentationWidget(viewer)
    viewer.window.add_dock_widget(widget, name="Segment from scribbles")
    widget.start(layer)
    wait(widget)
    widget.scribbles.data = scribbles
    widget.request_update()
    wait(widget)
    viewer.layers["uncertainty"].visible = False
    if slice_z is not None:
        viewer.dims.set_point(0, slice_z * (scale[0] if scale is not None else 1.0))
    viewer.reset_view()
    if slice_z is not None:  # a volume: close in on the organs
        zyx = np.argwhere((scribbles > 0) & (scribbles < scribbles.max())).mean(axis=0)
        camera = _camera(viewer)
        camera.center = tuple(zyx[-2:] * np.asarray(scale[-2:]))
        camera.zoom *= 2.2
    for _ in range(20):
        QApplication.processEvents()
    viewer.screenshot(str(path), canvas_only=False)
    viewer.close()
    print(f"wrote {path}")


def synthetic_picture() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[:360, :480]
    wobble = 0.15 * np.sin(np.arctan2(yy - 180, xx - 230) * 5)
    blob = ((yy - 180) / 110.0) ** 2 + ((xx - 230) / 150.0) ** 2 < 1.0 + wobble
    img = np.empty((360, 480, 3))
    img[...] = (70, 120, 80)
    img[..., 1] += 30 * np.sin(xx / 9.0)
    img[blob] = (200, 150, 60)
    img += rng.normal(0, 14, img.shape)
    scr = np.zeros((360, 480), np.uint8)
    scr[175:180, 170:300] = 1
    scr[20:24, 30:200] = 2
    scr[300:340, 420:424] = 2
    return np.clip(img, 0, 255).astype(np.uint8), scr


def ct_scribbles(labels: np.ndarray) -> np.ndarray:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "segment"))
    from ct import simulated_scribbles  # the benchmark's brush strokes on three slices per organ

    return simulated_scribbles(labels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--grabcut", type=Path, default=None)
    parser.add_argument("--scribbles", type=Path, default=None)
    parser.add_argument("--ct", type=Path, default=None)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.grabcut is not None:
        from PIL import Image as PILImage

        img = np.array(PILImage.open(args.grabcut).convert("RGB"))
        scr = np.array(PILImage.open(args.scribbles))
        shot(img, scr, args.out / "napari_grabcut.png", rgb=True)
    else:
        img, scr = synthetic_picture()
        shot(img, scr, args.out / "napari_picture.png", rgb=True)
    if args.ct is not None:
        from imageforest.imaging.io import read_image

        ct = read_image(args.ct)
        labels = read_image(str(args.ct).replace("_ct.nii.gz", "_organs.nii.gz")).array
        name = "napari_ct.png"
    else:
        from imageforest.apps.localize.phantom import head_neck_phantom

        ct, lab = head_neck_phantom(0)
        labels = lab.array
        name = "napari_phantom.png"
    scr = ct_scribbles(labels)
    z = int(np.median(np.flatnonzero((scr > 0) & (scr < 8)) // (scr.shape[1] * scr.shape[2])))
    shot(ct.array.astype(np.float32), scr, args.out / name, rgb=False, scale=tuple(ct.spacing[::-1]), slice_z=z,
         contrast=(-200, 300))


if __name__ == "__main__":
    main()
