"""`imageforest segment`: masks in the scribbles' numbers on the input's grid, saved models, one-line errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk
from click.testing import CliRunner
from PIL import Image as PILImage

from imageforest.cli import main
from imageforest.imaging.io import Image, read_image, write_image

from .conftest import disc_picture, strokes


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("segment")
    img, disc = disc_picture()
    PILImage.fromarray(img).save(root / "pic.png")
    pal = PILImage.fromarray(strokes(fg=1, bg=2), mode="P")
    pal.putpalette([0, 0, 0, 255, 0, 0, 0, 0, 255] + [0] * 759)
    pal.save(root / "scribbles.png")
    PILImage.fromarray(disc_picture(seed=3)[0]).save(root / "other.png")
    four_d = sitk.GetImageFromArray(np.zeros((2, 3, 4, 5), np.float32), isVector=False)
    sitk.WriteImage(four_d, str(root / "four_d.nii.gz"))
    nan = np.zeros((4, 8, 8), np.float32)
    nan[1, 2, 3] = np.nan
    sitk.WriteImage(sitk.GetImageFromArray(nan), str(root / "nan.mha"))
    return root, disc


def test_scribbles_to_mask_maps_and_model(files):
    root, disc = files
    r = run("segment", root / "pic.png", "--scribbles", root / "scribbles.png", "-o", root / "mask.png",
            "--proba", root / "p.npy", "--uncertainty", root / "u.png", "--save-model", root / "m.npz")
    assert r.exit_code == 0, r.output
    mask = np.array(PILImage.open(root / "mask.png"))
    assert set(np.unique(mask)) == {1, 2}
    assert np.sum((mask == 1) & disc) / np.sum((mask == 1) | disc) > 0.9
    proba = np.load(root / "p.npy")
    assert proba.shape == (*disc.shape, 2) and np.allclose(proba.sum(-1), 1, atol=1e-5)
    assert np.array(PILImage.open(root / "u.png")).shape == disc.shape
    r = run("segment", root / "pic.png", "--scribbles", root / "scribbles.png", "-o", root / "mask2.png",
            "--proba", root / "p.tif", "--uncertainty", root / "u.tif")
    assert r.exit_code == 0, r.output
    import tifffile

    assert np.allclose(tifffile.imread(root / "p.tif"), proba) and tifffile.imread(root / "u.tif").shape == disc.shape
    r = run("segment", root / "other.png", "--model", root / "m.npz", "-o", root / "other_mask.tif")
    assert r.exit_code == 0, r.output
    assert set(np.unique(np.array(PILImage.open(root / "other_mask.tif")))) <= {1, 2}


def test_volume_mask_keeps_the_geometry(tmp_path: Path, ball_volume):
    vol, ball, scr = ball_volume
    image = Image(vol, np.array([1.0, 1.0, 2.0]), np.array([5.0, -3.0, 7.0]), np.eye(3))
    write_image(image, tmp_path / "v.nii.gz")
    write_image(Image(scr.astype(np.uint8), image.spacing, image.origin, image.direction), tmp_path / "s.nii.gz")
    r = run("segment", tmp_path / "v.nii.gz", "--scribbles", tmp_path / "s.nii.gz", "-o", tmp_path / "m.nii.gz")
    assert r.exit_code == 0, r.output
    mask = read_image(tmp_path / "m.nii.gz")
    assert np.allclose(mask.spacing, image.spacing) and np.allclose(mask.origin, image.origin)
    assert 2 * np.sum((mask.array == 1) & ball) / (np.sum(mask.array == 1) + ball.sum()) > 0.85
    # the session's volume settings reach the command: an unbounded run with undiscounted paths is the same here
    # (the ball's strokes lie on one slice, so nothing is bounded or discounted)
    r = run("segment", tmp_path / "v.nii.gz", "--scribbles", tmp_path / "s.nii.gz", "-o", tmp_path / "n.nii.gz",
            "--extent-margin", "inf", "--slice-path-scale", "1")
    assert r.exit_code == 0, r.output
    assert np.array_equal(read_image(tmp_path / "n.nii.gz").array, mask.array)
    # the volume and its strokes stored in RAS: the mask comes back in RAS, the same voxels in the file's axes
    for name in ("v", "s"):
        sitk.WriteImage(sitk.DICOMOrient(sitk.ReadImage(str(tmp_path / f"{name}.nii.gz")), "RAS"),
                        str(tmp_path / f"{name}_ras.nii.gz"))
    r = run("segment", tmp_path / "v_ras.nii.gz", "--scribbles", tmp_path / "s_ras.nii.gz", "-o",
            tmp_path / "m_ras.nii.gz")
    assert r.exit_code == 0, r.output
    ras_mask = sitk.ReadImage(str(tmp_path / "m_ras.nii.gz"))
    assert np.allclose(ras_mask.GetDirection(), np.diag([-1.0, -1.0, 1.0]).ravel())
    assert np.array_equal(sitk.GetArrayFromImage(ras_mask),
                          sitk.GetArrayFromImage(sitk.DICOMOrient(sitk.ReadImage(str(tmp_path / "m.nii.gz")), "RAS")))


@pytest.mark.parametrize("make_args, message", [
    (lambda r: ["segment", r / "pic.png", "-o", r / "x.png"], "either --scribbles"),
    (lambda r: ["segment", r / "pic.png", "--scribbles", r / "scribbles.png", "-o", r / "scribbles.png"],
     "is an input"),
    (lambda r: ["segment", r / "pic.png", "--scribbles", r / "pic.png", "-o", r / "x.png"], "colour"),
    (lambda r: ["segment", r / "pic.png", "--scribbles", r / "scribbles.png", "-o", r / "pic.png" / "x.png"],
     "is a file"),
    (lambda r: ["segment", r / "pic.png", "--scribbles", r / "scribbles.png", "-o", r / "x.jpg"], "mask as"),
    (lambda r: ["segment", r / "missing.png", "--scribbles", r / "scribbles.png", "-o", r / "x.png"], ""),
    (lambda r: ["segment", r / "four_d.nii.gz", "--scribbles", r / "scribbles.png", "-o", r / "x.nii.gz"], "4-D"),
    (lambda r: ["segment", r / "nan.mha", "--scribbles", r / "scribbles.png", "-o", r / "x.nii.gz"], "NaN"),
    (lambda r: ["segment", r / "pic.png", "--model", r / "scribbles.png", "-o", r / "x.png"], ""),
    (lambda r: ["segment", r / "pic.png", "--scribbles", r / "scribbles.png", "-o", r / "x.png",
                "--colour-weight", "1.5"], "colour_weight"),
    (lambda r: ["segment", r / "pic.png", "--model", r / "m.npz", r / "pic.png", "-o", r / "out",
                "--colour-weight", "0.2"], "--colour-weight trains on scribbles"),
    (lambda r: ["segment", r / "pic.png", "--scribbles", r / "scribbles.png", "-o", r / "x.png",
                "--extent-margin", "-1"], "--extent-margin must be"),
    (lambda r: ["segment", r / "pic.png", "--scribbles", r / "scribbles.png", "-o", r / "x.png",
                "--slice-path-scale", "0"], "slice_path_scale"),
    (lambda r: ["segment", r / "pic.png", "--model", r / "m.npz", r / "pic.png", "-o", r / "out",
                "--slice-path-scale", "0.5"], "--slice-path-scale belongs to scribbles"),
    (lambda r: ["segment", r / "pic.png", "--model", r / "m.npz", "-o", r / "x.png", "--stroke-regions"],
     "--stroke-regions belongs to scribbles"),
    (lambda r: ["segment", r / "pic.png", "--model", r / "m.npz", r / "pic.png", "-o", r / "out",
                "--stroke-regions"], "--stroke-regions belongs to scribbles"),
])
def test_bad_input_is_one_line_and_exit_1(files, make_args, message):
    root, _ = files
    before = (root / "scribbles.png").read_bytes()
    r = run(*make_args(root))
    assert r.exit_code == 1, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and message in lines[0]
    assert (root / "scribbles.png").read_bytes() == before
    assert not list(root.glob(".x.*"))  # no temporary file left behind


def test_stroke_regions_drop_a_lookalike_no_stroke_touches(tmp_path: Path):
    """`--stroke-regions`: a second disc like the painted one, which no stroke touches, goes to the background;
    without it the colour rounds give it to the disc's class."""
    img, disc = disc_picture(shape=(60, 160))
    twin = np.roll(disc, 80, axis=1)
    img[twin] = img[disc]
    PILImage.fromarray(img).save(tmp_path / "twins.png")
    PILImage.fromarray(np.pad(strokes(fg=1, bg=2), ((0, 0), (0, 80)))).save(tmp_path / "s.png")  # left disc only
    for flag, expected in (([], 1), (["--stroke-regions"], 2)):
        r = run("segment", tmp_path / "twins.png", "--scribbles", tmp_path / "s.png", "-o", tmp_path / "m.png",
                *flag)
        assert r.exit_code == 0, r.output
        mask = np.array(PILImage.open(tmp_path / "m.png"))
        assert np.mean(mask[twin] == expected) > 0.9 and np.mean(mask[disc] == 1) > 0.9


def test_a_model_for_grey_pictures_refuses_a_colour_one(files, tmp_path: Path):
    root, _ = files
    grey = np.array(PILImage.open(root / "pic.png"))[..., 0]
    PILImage.fromarray(grey).save(tmp_path / "grey.png")
    assert run("segment", tmp_path / "grey.png", "--scribbles", root / "scribbles.png", "-o", tmp_path / "g.png",
               "--save-model", tmp_path / "g.npz").exit_code == 0
    r = run("segment", root / "pic.png", "--model", tmp_path / "g.npz", "-o", tmp_path / "c.png")
    assert r.exit_code == 1 and "trained on grey images with 1 channel(s)" in r.output
