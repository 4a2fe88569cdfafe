"""Readers and writers: geometry preserved, LPS orientation, bad files stopped with a clear message."""

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk

from imageforest.imaging import Image, ImageReadError, read_image, resample, write_image

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"
TOTALSEG = SHARED / "totalseg-examples"


def _volume(direction=None):
    rng = np.random.default_rng(0)
    arr = rng.integers(-1000, 1000, (7, 9, 11)).astype(np.int16)
    return Image(arr, np.array([0.8, 1.1, 2.5]), np.array([-10.0, 20.0, 30.0]),
                 np.eye(3) if direction is None else np.asarray(direction, float))


@pytest.mark.parametrize("suffix", [".nii.gz", ".nii", ".nrrd", ".mha"])
def test_round_trip_preserves_voxels_and_geometry(tmp_path, suffix):
    img = _volume()
    path = tmp_path / f"vol{suffix}"
    write_image(img, path)
    back = read_image(path)
    assert np.array_equal(back.array, img.array)
    assert np.allclose(back.spacing, img.spacing) and np.allclose(back.origin, img.origin)
    assert np.allclose(back.direction, np.eye(3))


def test_ras_volume_comes_back_in_lps_with_points_in_place(tmp_path):
    ras = _volume(np.diag([-1.0, -1.0, 1.0]))
    marker = (3, 4, 5)  # (z, y, x)
    ras.array[marker] = 3000
    where = ras.index_to_physical(np.array([marker[::-1]]))[0]
    write_image(ras, tmp_path / "ras.nii.gz")
    lps = read_image(tmp_path / "ras.nii.gz")
    assert np.allclose(lps.direction, np.eye(3))
    z, y, x = np.argwhere(lps.array == 3000)[0]
    assert np.allclose(lps.index_to_physical(np.array([[x, y, z]]))[0], where)
    assert np.allclose(lps.physical_to_index(where[None])[0], [x, y, z])


@pytest.mark.parametrize("orient", ["RAS", "LPI", "SLP", "oblique"])
def test_outputs_go_back_to_the_file_axes_the_volume_was_read_from(tmp_path, orient):
    img = _volume().to_sitk()
    if orient == "oblique":  # a few degrees off axis, with the axes permuted: the closest code is restored
        img = sitk.PermuteAxes(sitk.DICOMOrient(img, "RAI"), [1, 0, 2])
        c, s = np.cos(0.07), np.sin(0.07)
        turn = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
        img.SetDirection(tuple((turn @ np.array(img.GetDirection()).reshape(3, 3)).ravel()))
    else:
        img = sitk.DICOMOrient(img, orient) if orient != "SLP" else sitk.PermuteAxes(img, [2, 0, 1])
    sitk.WriteImage(img, str(tmp_path / "in.nii.gz"))
    read = read_image(tmp_path / "in.nii.gz")
    assert np.allclose(read.direction, np.eye(3), atol=0.1)  # in LPS while the tools work on it
    assert read.file_orientation == sitk.DICOMOrientImageFilter.GetOrientationFromDirectionCosines(
        img.GetDirection())
    write_image(read, tmp_path / "out.nii.gz", orientation=read.file_orientation)
    back = sitk.ReadImage(str(tmp_path / "out.nii.gz"))
    assert np.array_equal(sitk.GetArrayFromImage(back), sitk.GetArrayFromImage(img))  # the same array order
    assert np.allclose(back.GetDirection(), img.GetDirection(), atol=1e-6)
    assert np.allclose(back.GetOrigin(), img.GetOrigin(), atol=1e-4)
    write_image(read, tmp_path / "lps.nii.gz")  # without an orientation: the image's own, LPS
    assert np.allclose(sitk.ReadImage(str(tmp_path / "lps.nii.gz")).GetDirection(), read.direction.ravel())


def test_resampling_keeps_physical_positions():
    img = _volume()
    img.array[:] = -1000
    img.array[2:5, 3:6, 4:8] = 500
    centre = img.index_to_physical(np.argwhere(img.array == 500)[:, ::-1].mean(0))[0]
    out = resample(img, [0.5, 0.5, 0.5], interpolator="nearest")
    assert np.allclose(out.spacing, 0.5) and np.allclose(out.origin, img.origin)
    new_centre = out.index_to_physical(np.argwhere(out.array == 500)[:, ::-1].mean(0))[0]
    assert np.allclose(new_centre, centre, atol=1.3)
    assert out.array.min() == -1000  # filled with the image minimum, not 0


def test_planar_and_depth_png(tmp_path):
    depth = (np.arange(12 * 10).reshape(12, 10) * 500).astype(np.uint16)
    sitk.WriteImage(sitk.GetImageFromArray(depth), str(tmp_path / "d.png"))
    img = read_image(tmp_path / "d.png")
    assert img.array.dtype == np.uint16 and np.array_equal(img.array, depth) and img.ndim == 2


def test_bad_files(tmp_path):
    good = tmp_path / "good.nii.gz"
    write_image(_volume(), good)
    cases = {}
    cases["missing"] = (tmp_path / "nope.nii.gz", "no such")
    trunc = tmp_path / "trunc.nii.gz"
    trunc.write_bytes(good.read_bytes()[:300])
    cases["truncated"] = (trunc, "truncated|damaged")
    text = tmp_path / "notes.nii.gz"
    text.write_bytes(gzip.compress(b"hello, I am not an image"))
    cases["not an image"] = (text, "not a readable image|cut short")
    four = tmp_path / "four.nii.gz"
    vol = sitk.GetImageFromArray(np.zeros((3, 4, 5), np.int16))
    sitk.WriteImage(sitk.JoinSeries([vol, vol]), str(four))  # a time series: 4-D
    cases["4-D"] = (four, "4-D")
    vec = tmp_path / "vector.nii.gz"
    sitk.WriteImage(sitk.GetImageFromArray(np.zeros((3, 4, 5, 2), np.int16), isVector=True), str(vec))
    cases["vector volume"] = (vec, "components")
    nan = tmp_path / "nan.mha"  # ITK reads NaN in NIfTI as 0; MetaImage keeps it
    arr = np.zeros((3, 4, 5), np.float32)
    arr[1, 1, 1] = np.nan
    sitk.WriteImage(sitk.GetImageFromArray(arr), str(nan))
    cases["NaN"] = (nan, "NaN")
    empty = tmp_path / "emptydir"
    empty.mkdir()
    cases["empty folder"] = (empty, "no DICOM series")
    for name, (path, msg) in cases.items():
        with pytest.raises(ImageReadError, match=msg) as info:
            read_image(path)
            pytest.fail(f"{name}: no error")
        assert str(path.name) in str(info.value), name
        assert "\n" not in str(info.value), name


needs_totalseg = pytest.mark.skipif(not TOTALSEG.is_dir(),
                                    reason=f"shared data not found at {TOTALSEG} (reader check on real scans)")


@needs_totalseg
def test_totalseg_ras_nifti_reads_as_lps_with_organs_in_place():
    ct = read_image(TOTALSEG / "example_ct_sm.nii.gz")
    seg = read_image(TOTALSEG / "example_seg.nii.gz")
    boxes = json.loads((TOTALSEG / "derived_organ_bboxes.json").read_text())["example_seg.nii.gz"]["organs"]
    assert np.allclose(ct.direction, np.eye(3)) and ct.array.shape == seg.array.shape
    for organ in ("spleen", "liver", "kidney_left", "kidney_right"):
        zz, yy, xx = np.nonzero(seg.array == boxes[organ]["label"])
        pts = seg.index_to_physical(np.c_[xx, yy, zz])
        ras_lo = np.array(boxes[organ]["bbox_world_mm_lo"])
        ras_hi = np.array(boxes[organ]["bbox_world_mm_hi"])
        # LPS = RAS with x and y negated: the reference box's faces swap.
        assert np.allclose(pts.min(0), [-ras_hi[0], -ras_hi[1], ras_lo[2]], atol=0.01)
        assert np.allclose(pts.max(0), [-ras_lo[0], -ras_lo[1], ras_hi[2]], atol=0.01)
    spleen = seg.array == boxes["spleen"]["label"]
    liver = seg.array == boxes["liver"]["label"]
    x_of = lambda m: seg.index_to_physical(np.c_[np.nonzero(m)[2], np.zeros(m.sum()), np.zeros(m.sum())])[:, 0]  # noqa: E731
    assert x_of(spleen).mean() > 0 > x_of(liver).mean(), "spleen on the patient's left (+x in LPS), liver right"
    assert 0 < ct.array[liver].mean() < 150  # soft tissue HU


@needs_totalseg
def test_totalseg_dicom_series_reads_as_lps_and_matches_its_label_map():
    ct = read_image(TOTALSEG / "example_ct_dicom")
    seg = read_image(TOTALSEG / "example_seg_dicom.nii.gz")
    assert ct.array.shape == (20, 512, 512) and np.allclose(ct.direction, np.eye(3))
    assert np.allclose(ct.spacing, [0.9765625, 0.9765625, 2.0])
    assert np.allclose(seg.origin, ct.origin, atol=0.01) and seg.array.shape == ct.array.shape
    classes = json.loads((TOTALSEG / "class_map_total.json").read_text())["total"]
    liver = int(next(k for k, v in classes.items() if v == "liver"))
    spleen = int(next(k for k, v in classes.items() if v == "spleen"))
    assert 60 < ct.array[seg.array == liver].mean() < 120
    assert 50 < ct.array[seg.array == spleen].mean() < 120


def test_headers_itk_would_repair_silently_are_refused(tmp_path):
    """ITK reads a NIfTI voxel size of 0 / NaN as 1 mm and NaN voxels as 0; a non-rotation direction and absurd
    voxel sizes pass it too. Each is refused with the file name and the reason."""
    import gzip
    import struct

    import SimpleITK as sitk

    from imageforest.imaging.io import ImageReadError, read_image

    vol = sitk.GetImageFromArray(np.zeros((4, 5, 6), np.float32))
    sitk.WriteImage(vol, str(tmp_path / "ok.nii"))
    raw = bytearray((tmp_path / "ok.nii").read_bytes())
    for name, value in (("zero", 0.0), ("nan", float("nan"))):
        bad = bytearray(raw)
        bad[80:84] = struct.pack("<f", value)  # pixdim[1], the x voxel size
        (tmp_path / f"{name}.nii.gz").write_bytes(gzip.compress(bytes(bad)))
        with pytest.raises(ImageReadError, match="invalid voxel spacing"):
            read_image(tmp_path / f"{name}.nii.gz")
    for value in (float("nan"), float("inf")):
        bad = bytearray(raw)
        bad[108:112] = struct.pack("<f", value)  # vox_offset, where the voxels start
        (tmp_path / "offset.nii").write_bytes(bytes(bad))
        with pytest.raises(ImageReadError, match="voxel-data offset"):
            read_image(tmp_path / "offset.nii")
    nan = np.zeros((4, 5, 6), np.float32)
    nan[1, 2, 3] = np.nan
    sitk.WriteImage(sitk.GetImageFromArray(nan), str(tmp_path / "nan_voxel.nii.gz"))
    with pytest.raises(ImageReadError, match="NaN"):
        read_image(tmp_path / "nan_voxel.nii.gz")
    skew = sitk.GetImageFromArray(np.zeros((4, 5, 6), np.int16))
    skew.SetDirection((1, 0, 0, 0.5, 1, 0, 0, 0, 1))
    sitk.WriteImage(skew, str(tmp_path / "skew.mha"))
    with pytest.raises(ImageReadError, match="not a rotation"):
        read_image(tmp_path / "skew.mha")
    tiny = sitk.GetImageFromArray(np.zeros((4, 5, 6), np.int16))
    tiny.SetSpacing((1e-6, 1.0, 1.0))
    sitk.WriteImage(tiny, str(tmp_path / "tiny.mha"))
    with pytest.raises(ImageReadError, match="implausible voxel spacing"):
        read_image(tmp_path / "tiny.mha")


def test_a_damaged_deflate_stream_with_an_intact_trailer_is_refused(tmp_path):
    """Bytes changed inside a .nii.gz's compressed stream, its length field intact: ITK would inflate the right
    number of bytes (mostly zeros) without complaint; the stream's CRC does not match."""
    import SimpleITK as sitk

    from imageforest.imaging.io import ImageReadError, read_image

    arr = np.random.default_rng(0).integers(-1000, 1000, (20, 30, 40)).astype(np.int16)
    sitk.WriteImage(sitk.GetImageFromArray(arr), str(tmp_path / "ok.nii.gz"))
    raw = bytearray((tmp_path / "ok.nii.gz").read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    (tmp_path / "bad.nii.gz").write_bytes(bytes(raw))
    with pytest.raises(ImageReadError, match="damaged"):
        read_image(tmp_path / "bad.nii.gz")
    assert read_image(tmp_path / "ok.nii.gz").array.shape == (20, 30, 40)


def test_a_header_declaring_billions_of_voxels_is_refused_before_reading(tmp_path):
    """A small file whose header declares 1600 x 1600 x 1000 voxels: refused from the header (no 5 GB
    allocation)."""
    import gzip
    import struct

    import SimpleITK as sitk

    from imageforest.imaging.io import ImageReadError, read_image

    sitk.WriteImage(sitk.GetImageFromArray(np.zeros((4, 5, 6), np.int16)), str(tmp_path / "ok.nii"))
    raw = bytearray((tmp_path / "ok.nii").read_bytes())
    raw[40:56] = struct.pack("<8h", 3, 1600, 1600, 1000, 1, 1, 1, 1)
    (tmp_path / "big.nii").write_bytes(bytes(raw))
    with pytest.raises(ImageReadError):  # truncated against its header, or over the voxel cap
        read_image(tmp_path / "big.nii")
    (tmp_path / "big.nii.gz").write_bytes(gzip.compress(bytes(raw)))
    with pytest.raises(ImageReadError):
        read_image(tmp_path / "big.nii.gz")
    sitk.WriteImage(sitk.GetImageFromArray(np.zeros((4, 5, 6), np.int16)), str(tmp_path / "ok.mha"))
    text = (tmp_path / "ok.mha").read_bytes().replace(b"DimSize = 6 5 4", b"DimSize = 1600 1600 1000")
    (tmp_path / "big.mha").write_bytes(text)
    with pytest.raises(ImageReadError, match="over the"):
        read_image(tmp_path / "big.mha")
