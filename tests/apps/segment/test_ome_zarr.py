"""OME-Zarr in and out: `imageforest segment` on an OME-Zarr picture or volume gives what it gives on the same
image as a file, written as OME-Zarr on the input's scale; odd layouts are refused in one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image as PILImage

from imageforest.cli import main
from imageforest.imaging.io import Image, ImageReadError, read_image

from .conftest import disc_picture, strokes

pytest.importorskip("ome_zarr", reason="OME-Zarr needs the ome-zarr package (pip install 'imageforest[zarr]')")


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def write_zarr(array: np.ndarray, path: Path, axes: str, scale=None, unit: str | None = None) -> None:
    """An OME-Zarr image as another program writes one (ome-zarr's own writer)."""
    import zarr
    from ome_zarr.io import parse_url
    from ome_zarr.writer import write_image

    root = zarr.group(store=parse_url(str(path), mode="w").store)
    write_image(array, root, axes=axes, scale_factors=(2,),
                scale=None if scale is None else dict(zip(axes[-len(scale):], scale, strict=True)),
                axes_units={a: unit for a in axes if a in "zyx"} if unit else None)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("zarr")
    img, disc = disc_picture()
    PILImage.fromarray(img).save(root / "pic.png")
    write_zarr(np.moveaxis(img, -1, 0), root / "pic.ome.zarr", "cyx")
    pal = PILImage.fromarray(strokes(fg=1, bg=2), mode="P")
    pal.putpalette([0, 0, 0, 255, 0, 0, 0, 0, 255] + [0] * 759)
    pal.save(root / "scribbles.png")
    return root, disc


def test_an_ome_zarr_picture_segments_as_its_png(files):
    root, disc = files
    r = run("segment", root / "pic.png", "--scribbles", root / "scribbles.png", "-o", root / "png_mask.png")
    assert r.exit_code == 0, r.output
    r = run("segment", root / "pic.ome.zarr", "--scribbles", root / "scribbles.png", "-o", root / "mask.ome.zarr",
            "--proba", root / "proba.ome.zarr", "--save-model", root / "m.npz")
    assert r.exit_code == 0, r.output
    mask = read_image(root / "mask.ome.zarr")
    assert mask.array.dtype == np.uint8 and mask.ndim == 2
    assert np.array_equal(mask.array, np.array(PILImage.open(root / "png_mask.png")))
    import zarr

    proba = zarr.open_group(str(root / "proba.ome.zarr"), mode="r")["s0"][:]  # the classes are its channels
    assert proba.shape == (2, *disc.shape) and np.allclose(proba.sum(0), 1, atol=1e-5)
    # a saved model on the OME-Zarr picture; the earlier output is replaced, nothing left beside it
    r = run("segment", root / "pic.ome.zarr", "--model", root / "m.npz", "-o", root / "mask.ome.zarr")
    assert r.exit_code == 0, r.output
    assert set(np.unique(read_image(root / "mask.ome.zarr").array)) <= {1, 2}
    assert not [p for p in root.iterdir() if p.name.startswith(".")]


def test_a_batch_of_ome_zarr_images_writes_ome_zarr_masks(tmp_path, files):
    root, _ = files
    r = run("segment", root / "pic.png", "--scribbles", root / "scribbles.png", "-o", tmp_path / "ref.png",
            "--save-model", tmp_path / "m.npz")
    assert r.exit_code == 0, r.output
    r = run("segment", root / "pic.png", "--model", tmp_path / "m.npz", "-o", tmp_path / "ref.png")
    assert r.exit_code == 0, r.output
    import shutil

    import zarr

    shutil.copytree(root / "pic.ome.zarr", tmp_path / "in" / "b.zarr")
    shutil.copytree(root / "pic.ome.zarr", tmp_path / "in" / "a.ome.zarr")
    (tmp_path / "in" / "bad.zarr").mkdir()
    r = run("segment", str(tmp_path / "in" / "*.zarr"), "--model", tmp_path / "m.npz", "-o", tmp_path / "out",
            "--proba", tmp_path / "maps")
    assert r.exit_code == 1 and "bad.zarr" in r.output  # one image failed: reported, the others written
    reference = np.array(PILImage.open(tmp_path / "ref.png"))
    for stem in ("a", "b"):
        mask = read_image(tmp_path / "out" / f"{stem}.ome.zarr")
        assert np.array_equal(mask.array, reference)
        proba = zarr.open_group(str(tmp_path / "maps" / f"{stem}_proba.ome.zarr"), mode="r")["s0"][:]
        assert proba.shape == (2, *reference.shape)
        assert (tmp_path / "out" / f"{stem}.json").is_file()
    r = run("segment", str(tmp_path / "in" / "*.zarr"), "--model", tmp_path / "m.npz", "-o", tmp_path / "out",
            "--proba", tmp_path / "maps", "--resume")
    assert "bad.zarr" in r.output and not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]


def test_an_ome_zarr_volume_keeps_its_scale_in_mm(tmp_path, ball_volume):
    from imageforest.imaging.ome_zarr import write_ome_zarr

    vol, ball, scr = ball_volume
    write_zarr(vol, tmp_path / "vol.zarr", "zyx", scale=(2000.0, 1000.0, 1000.0), unit="micrometer")
    image = read_image(tmp_path / "vol.zarr")
    assert image.ndim == 3 and np.allclose(image.spacing, [1.0, 1.0, 2.0])  # (x, y, z) mm
    write_ome_zarr(scr.astype(np.uint8), tmp_path / "scr.zarr", image)
    r = run("segment", tmp_path / "vol.zarr", "--scribbles", tmp_path / "scr.zarr", "-o", tmp_path / "seg.zarr",
            "--uncertainty", tmp_path / "u.nii.gz")
    assert r.exit_code == 0, r.output
    seg = read_image(tmp_path / "seg.zarr")
    assert np.allclose(seg.spacing, image.spacing) and seg.array.shape == vol.shape
    assert 2 * np.sum((seg.array == 1) & ball) / (np.sum(seg.array == 1) + np.sum(ball)) > 0.85
    assert np.allclose(read_image(tmp_path / "u.nii.gz").spacing, image.spacing)


def test_layouts_imageforest_cannot_take_are_refused_in_one_line(tmp_path, files):
    root, _ = files
    write_zarr(np.zeros((5, 20, 30), np.uint8), tmp_path / "five.zarr", "cyx")
    write_zarr(np.zeros((3, 4, 20, 30), np.uint8), tmp_path / "movie.zarr", "tcyx")
    write_zarr(np.zeros((6, 20, 30), np.float32), tmp_path / "feet.zarr", "zyx", scale=(1.0, 1.0, 1.0),
               unit="parsec")
    (tmp_path / "empty.zarr").mkdir()
    for name, message in (("five.zarr", "5 channels"), ("movie.zarr", "time series of 3"),
                          ("feet.zarr", "space units"), ("empty.zarr", "OME-Zarr")):
        with pytest.raises(ImageReadError, match=message):
            read_image(tmp_path / name)
        r = run("segment", tmp_path / name, "--scribbles", root / "scribbles.png", "-o", tmp_path / "o.zarr")
        assert r.exit_code == 1 and len(r.output.strip().splitlines()) == 1 and message in r.output, r.output
    r = run("segment", root / "pic.png", "--scribbles", root / "scribbles.png", "-o", tmp_path / "o.nii.gz")
    assert r.exit_code == 1 and ".zarr" in r.output  # the allowed outputs name OME-Zarr


def test_a_folder_that_is_not_zarr_is_never_replaced(tmp_path, files):
    root, _ = files
    (tmp_path / "keep.zarr").mkdir()
    (tmp_path / "keep.zarr" / "notes.txt").write_text("mine")
    r = run("segment", root / "pic.png", "--scribbles", root / "scribbles.png", "-o", tmp_path / "keep.zarr")
    assert r.exit_code == 1 and "is a folder" in r.output
    assert (tmp_path / "keep.zarr" / "notes.txt").read_text() == "mine"


def test_written_maps_carry_the_images_origin(tmp_path):
    from imageforest.imaging.ome_zarr import write_ome_zarr

    image = Image(np.zeros((4, 6, 8), np.float32), np.array([0.5, 0.75, 3.0]), np.array([-10.0, 20.0, 5.0]),
                  np.eye(3))
    write_ome_zarr(np.arange(4 * 6 * 8, dtype=np.float32).reshape(4, 6, 8), tmp_path / "m.zarr", image)
    back = read_image(tmp_path / "m.zarr")
    assert np.allclose(back.spacing, image.spacing) and np.allclose(back.origin, image.origin)
    assert back.array.dtype == np.float32 and back.array[3, 5, 7] == 4 * 6 * 8 - 1


def test_a_large_ome_zarr_picture_is_read_tile_by_tile_when_only_labels_are_written(tmp_path, files, monkeypatch):
    """Labels only: the picture is never read whole (a dask array sliced per tile, beyond the limit of pictures
    read into memory), and the labels are those of the picture segmented in memory."""
    import imageforest.apps.segment.image_files as image_files
    import imageforest.apps.segment.model as model_module
    from imageforest.apps.segment import SegmentationForest

    root, disc = files
    r = run("segment", root / "pic.png", "--scribbles", root / "scribbles.png", "-o", tmp_path / "m.png",
            "--save-model", tmp_path / "m.npz")
    assert r.exit_code == 0, r.output
    img, _ = disc_picture()
    big = np.tile(img, (3, 4, 1))  # 180 x 320
    write_zarr(np.moveaxis(big, -1, 0), tmp_path / "big.ome.zarr", "cyx")
    monkeypatch.setattr(image_files, "MAX_SEGMENT_PIXELS", 1000)
    monkeypatch.setattr(image_files, "MAX_APPLY_PIXELS", 10_000)  # below the picture's 57,600 pixels
    monkeypatch.setattr(image_files, "MAX_LABEL_PIXELS", 10_000)
    monkeypatch.setattr(model_module, "TILED_ABOVE", 5_000)
    lazy = image_files.read_segmentation_image(tmp_path / "big.ome.zarr", tiled=True, labels_only=True)
    assert not isinstance(lazy.array, np.ndarray) and lazy.array.shape == big.shape
    import imageforest.imaging.ome_zarr as ome_zarr

    stores = []  # the labels go to an on-disk store beside the mask, tile by tile, never whole in memory
    real_store = ome_zarr.label_store
    monkeypatch.setattr(ome_zarr, "label_store", lambda *a: stores.append(a) or real_store(*a))
    r = run("segment", tmp_path / "big.ome.zarr", "--model", tmp_path / "m.npz", "-o", tmp_path / "labels.ome.zarr")
    assert r.exit_code == 0, r.output
    assert len(stores) == 1 and stores[0][0].parent.parent == tmp_path and not stores[0][0].parent.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # the staging folder is gone

    labels = ome_zarr.read_ome_zarr(tmp_path / "labels.ome.zarr").array
    expected = SegmentationForest.load(tmp_path / "m.npz").segment_tiles(big).labels
    assert np.array_equal(labels, expected)
    assert "1: " in r.output and "px" in r.output  # the pixel counts, from the tiles' tallies
    truth = np.tile(disc, (3, 4))
    assert np.sum((labels == 1) & truth) / np.sum((labels == 1) | truth) > 0.85
    r = run("segment", tmp_path / "big.ome.zarr", "--model", tmp_path / "m.npz", "-o", tmp_path / "again.ome.zarr",
            "--proba", tmp_path / "p.ome.zarr")  # maps need the picture in memory: over the limit
    assert r.exit_code == 1 and "pixels" in r.output


def test_tiles_write_their_labels_into_an_on_disk_store(tmp_path, files):
    """`segment_tiles(..., labels_out=label_store(...))`: each tile writes its own chunks (two threads), the labels
    and their counts are those of the in-memory run, and a store whose chunks straddle tiles is refused."""
    from imageforest.apps.segment import SegmentationForest
    from imageforest.exceptions import InvalidInputError
    from imageforest.imaging.ome_zarr import label_store

    root, _ = files
    r = run("segment", root / "pic.png", "--scribbles", root / "scribbles.png", "-o", tmp_path / "m.png",
            "--save-model", tmp_path / "m.npz")
    assert r.exit_code == 0, r.output
    model = SegmentationForest.load(tmp_path / "m.npz")
    img, _ = disc_picture()
    big = np.tile(img, (3, 4, 1))  # 180 x 320: 3 x 5 tiles of 64
    in_memory = model.segment_tiles(big, tile=64, halo=16, maps=False)
    store = label_store(tmp_path / "labels.zarr", big.shape[:2], in_memory.labels.dtype, 32)
    on_disk = model.segment_tiles(big, tile=64, halo=16, maps=False, labels_out=store)
    assert on_disk.labels is store and np.array_equal(store[:], in_memory.labels)
    assert np.array_equal(on_disk.pixel_counts(), [np.sum(in_memory.labels == c) for c in model.classes_])
    assert np.allclose(on_disk.mean_posterior(), in_memory.mean_posterior())
    straddling = label_store(tmp_path / "bad.zarr", big.shape[:2], in_memory.labels.dtype, 48)
    with pytest.raises(InvalidInputError, match="chunks"):
        model.segment_tiles(big, tile=64, halo=16, maps=False, labels_out=straddling)


def test_a_damaged_chunk_is_one_line_whether_the_picture_is_read_whole_or_by_tiles(tmp_path, files, monkeypatch):
    import imageforest.apps.segment.image_files as image_files
    import imageforest.apps.segment.model as model_module

    root, _ = files
    r = run("segment", root / "pic.png", "--scribbles", root / "scribbles.png", "-o", tmp_path / "m.png",
            "--save-model", tmp_path / "m.npz")
    assert r.exit_code == 0, r.output
    img, _ = disc_picture()
    write_zarr(np.moveaxis(np.tile(img, (3, 4, 1)), -1, 0), tmp_path / "big.ome.zarr", "cyx")
    meta = {"zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"}
    chunks = sorted(p for p in (tmp_path / "big.ome.zarr").rglob("*") if p.is_file() and p.name not in meta)
    chunks[0].write_bytes(b"not a chunk")  # a full-resolution chunk (the levels sort first)
    monkeypatch.setattr(model_module, "TILED_ABOVE", 5_000)
    for extra in ([], ["--proba", tmp_path / "p.npy"]):  # tiles read lazily; the whole picture read first
        monkeypatch.setattr(image_files, "MAX_APPLY_PIXELS", 10_000 if not extra else 1 << 27)
        r = run("segment", tmp_path / "big.ome.zarr", "--model", tmp_path / "m.npz", "-o", tmp_path / "out.png",
                *extra)
        assert r.exit_code == 1 and "unreadable chunk data" in r.output and len(r.output.strip().splitlines()) == 1
        assert not (tmp_path / "out.png").exists()
