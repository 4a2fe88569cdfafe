"""Hostile and mistaken inputs, built at test time, across the commands: each ends with one line and exit code 1 (or
an `ImageForestError` from Python), never a hang, a traceback, gigabytes of memory or a silent wrong answer."""

from __future__ import annotations

import json
import os
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import one_line_error, run
from PIL import Image as PILImage

from imageforest import ImageForestError, ModelFormatError
from imageforest.apps.detect.api import DEFAULT_MODEL as DETECTOR
from imageforest.forest.serialization import load_model, save_model
from imageforest.imaging.io import Image, read_image, write_image

pytestmark = pytest.mark.timeout(120)  # a reader that waited on a pipe would hang the suite


def header_only_png(path: Path, width: int, height: int) -> Path:
    """A PNG whose header declares width x height pixels, with one tiny compressed row: a few hundred bytes."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 64))
                     + chunk(b"IEND", b""))
    return path


@pytest.fixture()
def picture(tmp_path: Path) -> tuple[Path, Path]:
    """A small picture and its palette scribbles (1 on the square, 2 on the border)."""
    rng = np.random.default_rng(0)
    img = rng.integers(0, 40, (48, 64, 3)).astype(np.uint8)
    img[12:36, 20:44] += 150
    PILImage.fromarray(img).save(tmp_path / "pic.png")
    marks = np.zeros((48, 64), np.uint8)
    marks[20:28, 28:36] = 1
    marks[:3] = 2
    PILImage.fromarray(marks).save(tmp_path / "marks.png")
    return tmp_path / "pic.png", tmp_path / "marks.png"


def test_fifos_are_refused_not_waited_on(tmp_path: Path, picture):
    pic, _ = picture
    fifo = tmp_path / "marks_fifo.png"
    os.mkfifo(fifo)
    assert "FIFO" in one_line_error(run("segment", pic, "--scribbles", fifo, "-o", tmp_path / "m.png"))
    assert "FIFO" in one_line_error(run("bodyparts", fifo, "-o", tmp_path / "out"))
    assert "not a regular file" in one_line_error(run("segment", pic, "--scribbles", picture[1], "-o", fifo))


def test_pictures_over_the_pixel_limit_are_refused_from_their_header(tmp_path: Path, picture):
    big = header_only_png(tmp_path / "big.png", 30_000, 30_000)  # Pillow's own check calls this a bomb
    assert big.stat().st_size < 1000
    pic, marks = picture
    assert "million this command" in one_line_error(run("segment", big, "--scribbles", marks, "-o",
                                                        tmp_path / "m.png"))
    assert "million this command" in one_line_error(run("segment", pic, "--scribbles", big, "-o",
                                                        tmp_path / "m.png"))
    assert "million this command" in one_line_error(run("detect", big, "-o", tmp_path / "d"))
    header_only_png(tmp_path / "depth.png", 12_000, 12_000)
    assert "million" in one_line_error(run("bodyparts", tmp_path / "depth.png", "-o", tmp_path / "b"))
    # a .npy of 4 KB whose header promises 100000 x 100000 values
    with open(tmp_path / "huge.npy", "wb") as fh:
        np.lib.format.write_array_header_1_0(fh, {"descr": "<u2", "fortran_order": False,
                                                  "shape": (100_000, 100_000)})
        fh.write(b"\0" * 4000)
    assert "million" in one_line_error(run("bodyparts", tmp_path / "huge.npy", "-o", tmp_path / "b"))


def test_damaged_or_truncated_pictures_and_lossy_or_paged_labels_are_refused(tmp_path: Path, picture):
    pic, marks = picture
    rng = np.random.default_rng(1)
    PILImage.fromarray(rng.integers(0, 255, (120, 160, 3)).astype(np.uint8)).save(tmp_path / "p.jpg", quality=90)
    data = (tmp_path / "p.jpg").read_bytes()
    (tmp_path / "half.jpg").write_bytes(data[: len(data) // 2])
    damaged = bytearray(data)
    damaged[len(data) // 2: len(data) // 2 + 200] = b"A" * 200
    (tmp_path / "damaged.jpg").write_bytes(bytes(damaged))
    for name in ("half.jpg", "damaged.jpg"):
        line = one_line_error(run("segment", tmp_path / name, "--scribbles", marks, "-o", tmp_path / "m.png"))
        assert "damaged" in line or "truncated" in line or "Premature" in line
        line = one_line_error(run("detect", tmp_path / name, "-o", tmp_path / "d"))
        assert "damaged" in line or "truncated" in line
    PILImage.open(marks).convert("L").save(tmp_path / "marks.jpg", quality=95)
    assert "lossy" in one_line_error(run("segment", pic, "--scribbles", tmp_path / "marks.jpg", "-o",
                                         tmp_path / "m.png"))
    pages = [PILImage.fromarray(np.full((48, 64), v, np.uint8)) for v in (10, 120, 240)]
    pages[0].save(tmp_path / "three.tif", save_all=True, append_images=pages[1:])
    assert "3 pages" in one_line_error(run("segment", tmp_path / "three.tif", "--scribbles", marks, "-o",
                                           tmp_path / "m.png"))
    depth_pages = [PILImage.fromarray(np.full((48, 64), 2000, np.uint16)) for _ in range(2)]
    depth_pages[0].save(tmp_path / "depth.tif", save_all=True, append_images=depth_pages[1:])
    assert "2 pages" in one_line_error(run("bodyparts", tmp_path / "depth.tif", "-o", tmp_path / "b"))
    # a PNG whose chunk is damaged (its CRC no longer matches)
    raw = bytearray(marks.read_bytes())
    raw[20] ^= 0xFF
    (tmp_path / "broken.png").write_bytes(bytes(raw))
    assert one_line_error(run("segment", pic, "--scribbles", tmp_path / "broken.png", "-o", tmp_path / "m.png"))


def test_volume_scribbles_on_another_grid_are_refused(tmp_path: Path):
    rng = np.random.default_rng(0)
    vol = rng.normal(0, 10, (24, 32, 32)).astype(np.float32)
    vol[8:16, 10:22, 10:22] += 200
    image = Image(vol, np.array([1.0, 1.0, 2.0]), np.zeros(3), np.eye(3))
    write_image(image, tmp_path / "vol.nii.gz")
    marks = np.zeros(vol.shape, np.uint8)
    marks[10:14, 14:18, 14:18] = 1
    marks[:, :2] = 2
    moved = image.origin + np.array([0.0, 0.0, 60.0])
    write_image(Image(marks, image.spacing, moved, np.eye(3)), tmp_path / "moved.nii.gz")
    write_image(Image(marks, image.spacing * 2, image.origin, np.eye(3)), tmp_path / "coarse.nii.gz")
    for name in ("moved.nii.gz", "coarse.nii.gz"):
        assert "another grid" in one_line_error(run("segment", tmp_path / "vol.nii.gz", "--scribbles",
                                                    tmp_path / name, "-o", tmp_path / "m.nii.gz"))


@pytest.mark.parametrize("value", ["inf", "1e300", "nan", "-1"])
def test_segment_smoothness_must_be_finite_and_bounded(tmp_path: Path, picture, value):
    pic, marks = picture
    assert "smoothness" in one_line_error(run("segment", pic, "--scribbles", marks, "-o", tmp_path / "m.png",
                                              "--smoothness", value))


def test_a_saved_segmentation_model_with_a_huge_smoothness_is_refused(tmp_path: Path, picture):
    pic, marks = picture
    assert run("segment", pic, "--scribbles", marks, "-o", tmp_path / "m.png", "--save-model",
               tmp_path / "s.npz").exit_code == 0
    meta, arrays = load_model(tmp_path / "s.npz")
    meta["hyper_parameters"]["smoothness"] = 1e300
    save_model(tmp_path / "forged.npz", meta, arrays)
    assert "smoothness" in one_line_error(run("segment", pic, "--model", tmp_path / "forged.npz", "-o",
                                              tmp_path / "m2.png"))


def _depth_png(path: Path, value: int | None = None) -> Path:
    depth = np.zeros((240, 320), np.uint16)
    depth[40:220, 120:200] = 2500 if value is None else value
    if value is not None:
        depth[:] = value
    PILImage.fromarray(depth).save(path)
    return path


@pytest.mark.parametrize("option", [("--fx", "1e-300"), ("--fx", "1e300"), ("--cx", "1e300"), ("--fy", "nan"),
                                    ("--cy", "-5")])
def test_bodyparts_cameras_must_fit_the_map(tmp_path: Path, option):
    depth = _depth_png(tmp_path / "d.png")
    assert "camera" in one_line_error(run("bodyparts", depth, "-o", tmp_path / "out", *option))
    assert not (tmp_path / "out" / "d_joints.json").exists()


def test_a_camera_for_another_map_size_is_refused():
    from imageforest.apps.bodyparts import Camera, load_body_model

    depth = np.zeros((240, 320), np.float32)
    depth[40:220, 120:200] = 2500
    with pytest.raises(ImageForestError, match="another size"):
        load_body_model().parse(depth, Camera.kinect(640, 480))


def test_depth_beyond_any_camera_is_no_body(tmp_path: Path):
    all_far = _depth_png(tmp_path / "far.png", 65535)
    assert "beyond 10 m" in one_line_error(run("bodyparts", all_far, "-o", tmp_path / "out"))
    np.save(tmp_path / "far.npy", np.full((60, 80), 1e30, np.float32))
    assert "beyond 10 m" in one_line_error(run("bodyparts", tmp_path / "far.npy", "-o", tmp_path / "out"))


def test_train_bodyparts_refuses_the_8_bit_depth_bodyparts_refuses(tmp_path: Path):
    folder = tmp_path / "maps"
    folder.mkdir()
    for k in range(3):
        depth = np.zeros((60, 80), np.uint8)
        depth[10:50, 30:50] = 200
        PILImage.fromarray(depth).save(folder / f"m{k}_depth.png")
        PILImage.fromarray((depth > 0).astype(np.uint8) * 255).convert("RGBA").save(folder / f"m{k}_labels.png")
    assert "8-bit" in one_line_error(run("train-bodyparts", folder, "-o", tmp_path / "m.npz"))


def test_deeply_nested_boxes_json_is_one_line(tmp_path: Path):
    folder = tmp_path / "boxes"
    folder.mkdir()
    (folder / "boxes.json").write_text("[" * 200_000 + "]" * 200_000)
    assert "JSON" in one_line_error(run("train-detector", folder, "-o", tmp_path / "d.npz"))


def test_symbolic_link_loops_are_one_line(tmp_path: Path, picture):
    pic, marks = picture
    loop = tmp_path / "loop.png"
    loop.symlink_to(loop)
    for args in ((loop, "--scribbles", marks, "-o", tmp_path / "m.png"),
                 (pic, "--scribbles", loop, "-o", tmp_path / "m.png"),
                 (pic, "--scribbles", marks, "-o", loop),
                 (pic, "--model", loop, "-o", tmp_path / "m.png")):
        one_line_error(run("segment", *args))


def test_forged_models_are_refused_on_load(tmp_path: Path):
    meta, arrays = load_model(DETECTOR)
    thr = arrays["forest.thr_hi"].copy()
    thr[np.flatnonzero(arrays["forest.child"] >= 0)[:5]] = np.nan
    save_model(tmp_path / "nan.npz", meta, {**arrays, "forest.thr_hi": thr})
    votes = arrays["votes"].copy()
    votes[:3, :2] = 1e30
    save_model(tmp_path / "votes.npz", meta, {**arrays, "votes": votes})
    save_model(tmp_path / "hyper.npz", {**meta, "hyper_parameters": [1, 2]}, arrays)
    from imageforest.apps.detect import HoughForestDetector

    for name, words in (("nan", "NaN"), ("votes", "votes"), ("hyper", "mappings")):
        with pytest.raises(ModelFormatError, match=words):
            HoughForestDetector.load(tmp_path / f"{name}.npz")
        assert words in one_line_error(run("model-info", tmp_path / f"{name}.npz"))


def test_model_info_escapes_control_characters(tmp_path: Path):
    meta, arrays = load_model(DETECTOR)
    meta["model_card"] = {**meta["model_card"], "name": "evil\x1b]0;pwned\x07\nforged: line"}
    save_model(tmp_path / "evil.npz", meta, arrays)
    out = run("model-info", tmp_path / "evil.npz").stdout
    assert "\x1b" not in out and "\x07" not in out and "\nforged: line" not in out and "\\x1b" in out


def test_localize_refuses_broken_dicom_series_and_infinite_geometry(tmp_path: Path):
    import shutil

    import SimpleITK as sitk

    source = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "totalseg-examples" / \
        "example_ct_dicom"
    if not source.is_dir():
        pytest.skip(f"{source} is absent (the shared data)")
    for mode in ("truncated", "missing"):
        folder = tmp_path / mode
        shutil.copytree(source, folder)
        for f in folder.iterdir():
            f.chmod(0o644)
        files = sitk.ImageSeriesReader.GetGDCMSeriesFileNames(str(folder))
        victim = Path(files[len(files) // 2])
        if mode == "truncated":
            victim.write_bytes(victim.read_bytes()[:2000])
        else:
            victim.unlink()
        assert "slice" in one_line_error(run("localize", folder, "-o", tmp_path / f"{mode}.json"))
    header = ("ObjectType = Image\nNDims = 3\nOffset = inf 0 0\nElementSpacing = 2 2 2\nDimSize = 20 20 20\n"
              "ElementType = MET_SHORT\nElementDataFile = LOCAL\n")
    (tmp_path / "inf.mha").write_bytes(header.encode() + np.zeros(8000, np.int16).tobytes())
    assert "not finite" in one_line_error(run("localize", tmp_path / "inf.mha", "-o", tmp_path / "i.json"))
    with pytest.raises(ImageForestError, match="not finite"):
        read_image(tmp_path / "inf.mha")


def test_a_scan_outside_the_models_region_is_flagged(tmp_path: Path):
    thorax = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "totalseg-examples" / \
        "example_ct_sm.nii.gz"
    if not thorax.is_file():
        pytest.skip(f"{thorax} is absent (the shared data)")
    result = run("localize", thorax, "-o", tmp_path / "t.json")
    assert result.exit_code == 0, result.output
    document = json.loads((tmp_path / "t.json").read_text())
    assert not any(o["present"] for o in document["organs"].values())
    assert any("outside" in w or "none of the anatomy" in w for w in document["warnings"])


def test_a_read_only_install_without_a_home_gets_a_private_cache_folder():
    from imageforest.kernels import cache_folder

    assert cache_folder(True, None) is None
    folder = cache_folder(False, None)
    assert folder is not None and "imageforest-numba" in folder.name


def test_a_folder_output_named_like_a_file_is_refused(tmp_path: Path):
    depth = _depth_png(tmp_path / "d.png")
    assert "named like a file" in one_line_error(run("bodyparts", depth, "-o", tmp_path / "parts.json"))
    assert not (tmp_path / "parts.json").exists()


def test_staged_outputs_move_together_or_not_at_all(tmp_path: Path):
    from imageforest.outputs import StagedOutputs

    (tmp_path / "a.json").write_text("old a")
    (tmp_path / "b.npy").write_text("old b")
    with pytest.raises(RuntimeError), StagedOutputs() as out:
        out.path(tmp_path / "a.json").write_text("new a")
        raise RuntimeError("the second output failed")
    assert (tmp_path / "a.json").read_text() == "old a" and sorted(p.name for p in tmp_path.iterdir()) == \
        ["a.json", "b.npy"]
    with StagedOutputs() as out:
        out.path(tmp_path / "a.json").write_text("new a")
        out.path(tmp_path / "b.npy").write_text("new b")
        assert out.path(Path("/dev/null")) == Path("/dev/null")  # a device is written into, never replaced
    assert (tmp_path / "a.json").read_text() == "new a" and (tmp_path / "b.npy").read_text() == "new b"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.npy"]


COMMANDS = {  # a command line per command, its input replaced by each hostile path below
    "localize": lambda src, tmp: ["localize", src, "-o", tmp / "o.json"],
    "segment": lambda src, tmp: ["segment", src, "--scribbles", src, "-o", tmp / "o.png"],
    "bodyparts": lambda src, tmp: ["bodyparts", src, "-o", tmp / "o"],
    "detect": lambda src, tmp: ["detect", src, "-o", tmp / "o"],
    "model-info": lambda src, tmp: ["model-info", src],
    "train-localizer": lambda src, tmp: ["train-localizer", src, "-o", tmp / "m.npz"],
    "train-bodyparts": lambda src, tmp: ["train-bodyparts", src, "-o", tmp / "m.npz"],
    "train-detector": lambda src, tmp: ["train-detector", src, "-o", tmp / "m.npz"],
}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("kind", ["missing", "fifo", "loop", "empty", "text"])
def test_every_command_refuses_the_same_hostile_inputs_in_one_line(tmp_path: Path, command: str, kind: str):
    suffix = {"localize": ".nii.gz", "segment": ".png", "bodyparts": ".png", "detect": ".jpg",
              "model-info": ".npz"}.get(command, "")
    src = tmp_path / f"input{suffix}"
    if kind == "fifo":
        os.mkfifo(src)
    elif kind == "loop":
        src.symlink_to(src)
    elif kind == "empty":
        src.write_bytes(b"")
    elif kind == "text":
        src.write_text("not what the command reads\n" * 10)
    result = run(*COMMANDS[command](src, tmp_path))
    one_line_error(result)
    assert not any(p.name.startswith(".") for p in tmp_path.rglob("*"))  # no temporary left behind
